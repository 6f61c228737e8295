"""Retrieval speed on a generated corpus: `manage.py bench retrieval --chunks N [--delta]`.

The corpus is synthetic on purpose (issue: "a generated corpus is fine"): documents,
parent and child chunks, Zipf-distributed tokens and random unit vectors of the KB
embedder's dimension are written straight to the database, so 100k chunks take seconds
instead of hours of embedding. Queries are embedded by the real embedder, and that time
is reported apart from the search itself.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from time import perf_counter

import numpy as np
from django.db import transaction
from django.test import override_settings

from agentic_rag.embeddings import get_embedder
from knowledge.candidates import Candidate
from knowledge.ingest import delete_document
from knowledge.memory_index import MemoryBackend
from knowledge.memory_snapshot import compacted
from knowledge.models import Chunk, Document, DocumentStatus, KnowledgeBase, SearchEntry
from knowledge.postprocess import PostContext, default_pipeline, run_postprocessing
from knowledge.retrieval import RetrievalParams, retrieve
from knowledge.search import get_backend, hnsw_index_built_after, refresh_planner_statistics

VOCABULARY = 30_000
TOKENS_PER_CHILD = 120
CHILDREN_PER_PARENT = 4
CHILDREN_PER_DOCUMENT = 100


@dataclass(frozen=True)
class SyntheticCorpus:
    children: int
    dims: int
    seed: int = 7


def _words(rng: np.random.Generator, count: int) -> list[str]:
    ranks = np.minimum(rng.zipf(1.2, size=count), VOCABULARY)
    return [f"w{rank}" for rank in ranks]


def generate_corpus(kb: KnowledgeBase, corpus: SyntheticCorpus, embedder_name: str) -> None:
    """Write a synthetic corpus into an empty KB, searchable under `embedder_name`."""
    rng = np.random.default_rng(corpus.seed)
    rows = corpus.children + corpus.children // CHILDREN_PER_PARENT
    with hnsw_index_built_after(corpus.dims, expected_rows=rows), transaction.atomic():
        for start in range(0, corpus.children, CHILDREN_PER_DOCUMENT):
            count = min(CHILDREN_PER_DOCUMENT, corpus.children - start)
            _write_document(kb, rng, start // CHILDREN_PER_DOCUMENT, count, corpus.dims, embedder_name)
        KnowledgeBase.objects.filter(pk=kb.pk).update(embedder=embedder_name)
        kb.bump_content_version()
    # As after any bulk load: otherwise PostgreSQL plans the first minute's queries blind.
    refresh_planner_statistics()


def _write_document(kb, rng, number: int, children: int, dims: int, embedder_name: str) -> Document:
    document = Document.objects.create(
        kb=kb, name=f"synthetic-{number:06d}.txt", sha256=f"{number:064d}", status=DocumentStatus.READY,
        live_version=1, chunk_count=children,
    )
    _write_chunks(document, 1, rng, children, dims, embedder_name)
    return document


def _write_chunks(document: Document, version: int, rng, children: int, dims: int, embedder_name: str) -> None:
    kb = document.kb
    texts = [" ".join(_words(rng, TOKENS_PER_CHILD)) for _ in range(children)]
    parents = Chunk.objects.bulk_create([
        Chunk(kb=kb, document=document, version=version, level=Chunk.PARENT, index=i, sha256="-",
              text="\n\n".join(texts[i * CHILDREN_PER_PARENT:(i + 1) * CHILDREN_PER_PARENT]))
        for i in range((children + CHILDREN_PER_PARENT - 1) // CHILDREN_PER_PARENT)
    ])
    kids = Chunk.objects.bulk_create([
        Chunk(kb=kb, document=document, version=version, level=Chunk.CHILD, index=i, sha256="-", text=text,
              parent=parents[i // CHILDREN_PER_PARENT])
        for i, text in enumerate(texts)
    ])
    rows = [*parents, *kids]
    vectors = rng.standard_normal((len(rows), dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    SearchEntry.objects.bulk_create([
        SearchEntry(chunk=row, kb=kb, level=row.level, embedder=embedder_name, dims=dims,
                    embedding=vector, tokens=row.text.replace("\n\n", " "))
        for row, vector in zip(rows, vectors, strict=True)
    ], batch_size=1000)


def _percentiles(values: list[float]) -> dict[str, float]:
    return {"p50": round(float(np.percentile(values, 50)), 3), "p95": round(float(np.percentile(values, 95)), 3)}


def bench_retrieval(kb: KnowledgeBase, *, queries: int, mode: str, seed: int = 11) -> dict:
    """Time `retrieve` on generated queries; split query embedding from the search."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(_words(rng, 6)) for _ in range(queries)]
    started = perf_counter()
    size = get_backend().size(kb)
    first_load_s = perf_counter() - started
    params = RetrievalParams(mode=mode, top_k=5)
    totals, embeddings, searches = [], [], []
    for text in texts:
        result = retrieve(text, kb, params)
        embed_ms = result.timings_ms.get("embed_query", 0.0)
        totals.append(result.timings_ms["total"])
        embeddings.append(embed_ms)
        searches.append(result.timings_ms["total"] - embed_ms)
    return {
        "mode": mode,
        "chunks_searchable": size["chunks"],
        "index_memory_mb": round(size["bytes"] / 1e6, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "index_build_s (first query after a change)": round(first_load_s, 2),
        "queries": queries,
        "search_ms (without query embedding)": _percentiles(searches),
        "query_embedding_ms": _percentiles(embeddings),
        "total_ms": _percentiles(totals),
        "postprocessing_ms_100_candidates": bench_postprocessing(kb, texts[:20]),
    }


def bench_postprocessing(kb: KnowledgeBase, texts: list[str]) -> dict[str, float]:
    """Time the post-processing chain alone on 100 real candidates per query."""
    samples = []
    for text in texts:
        params = RetrievalParams(mode="hybrid", leg_top_k=100, top_k=100, rerank=False, postprocess=False, gate=None)
        candidates: list[Candidate] = retrieve(text, kb, params).fused[:100]
        started = perf_counter()
        run_postprocessing(candidates, PostContext(query=text), default_pipeline())
        samples.append((perf_counter() - started) * 1000)
    return _percentiles(samples)


def bench_delta(kb: KnowledgeBase, corpus: SyntheticCorpus, embedder_name: str, *, queries: int = 50) -> dict:
    """Time applying typical documents' changes (add, replace, delete) to a warm index, against a rebuild.

    It adds DELTA_DOCUMENTS documents of the corpus's size, replaces each once and deletes
    them again, so the KB ends with the content it had. Each time is what the first query
    after the change waits for the index to catch up.
    """
    backend = MemoryBackend(run_compaction=lambda job: None)  # compaction is timed apart, below
    started = perf_counter()
    rows = len(backend.snapshot(kb).chunks)
    build_s = perf_counter() - started
    rng = np.random.default_rng(corpus.seed + 1)
    texts = [" ".join(_words(rng, 6)) for _ in range(queries)]
    fresh_ms = _search_ms(kb, backend, texts)
    first = Document.objects.filter(kb=kb).count() + 10**6  # names no generated corpus uses
    added = [_write_document(kb, rng, first + n, CHILDREN_PER_DOCUMENT, corpus.dims, embedder_name)
             for n in range(DELTA_DOCUMENTS)]
    times: dict[str, list[float]] = {"add": [], "replace": [], "delete": []}
    for document in added:
        times["add"].append(_apply_ms(backend, kb, lambda d=document: kb.bump_content_version([d.pk])))
    for document in added:
        times["replace"].append(_apply_ms(backend, kb, lambda d=document: _replace(d, rng, corpus.dims, embedder_name)))
    changed_ms = _search_ms(kb, backend, texts)
    snapshot = backend.snapshot(kb)
    started = perf_counter()
    compacted(snapshot)
    compaction_s = perf_counter() - started
    # A deleted document starts a graph build, which would outlast the benchmark.
    with override_settings(GRAPH_BUILD_AFTER_INGESTION=False):
        for document in added:
            times["delete"].append(_apply_ms(backend, kb, lambda d=document: delete_document(d)))
    return {
        "chunks_searchable": rows,
        "rows_per_document": CHILDREN_PER_DOCUMENT + CHILDREN_PER_DOCUMENT // CHILDREN_PER_PARENT,
        "full_build_s": round(build_s, 2),
        **{f"apply_{change}_ms": _spread(samples) for change, samples in times.items()},
        "index_updates": dict(backend.updates),
        "search_ms fresh build (p50, p95)": fresh_ms,
        f"search_ms after {2 * DELTA_DOCUMENTS} changes (p50, p95)": changed_ms,
        "compaction_s (background thread)": round(compaction_s, 2),
    }


DELTA_DOCUMENTS = 5


def _apply_ms(backend: MemoryBackend, kb: KnowledgeBase, change) -> float:
    """Make a change as ingestion commits it, then time the next query's wait for the index."""
    with transaction.atomic():
        change()
    started = perf_counter()
    backend.snapshot(kb)
    return (perf_counter() - started) * 1000


def _replace(document: Document, rng, dims: int, embedder_name: str) -> None:
    """Publish a new version of a synthetic document, as ingestion's last step does."""
    version = document.live_version + 1
    _write_chunks(document, version, rng, CHILDREN_PER_DOCUMENT, dims, embedder_name)
    Chunk.objects.filter(document=document).exclude(version=version).delete()
    Document.objects.filter(pk=document.pk).update(version=version, live_version=version)
    document.live_version = version
    document.kb.bump_content_version([document.pk])


def _search_ms(kb: KnowledgeBase, backend: MemoryBackend, texts: list[str]) -> tuple[float, float]:
    params = RetrievalParams(mode="hybrid", top_k=5)
    samples = []
    for text in texts:
        result = retrieve(text, kb, params, backend=backend)
        samples.append(result.timings_ms["total"] - result.timings_ms.get("embed_query", 0.0))
    spread = _percentiles(samples)
    return spread["p50"], spread["p95"]


def _spread(samples: list[float]) -> dict[str, float]:
    return {"p50": round(float(np.percentile(samples, 50)), 1), "max": round(max(samples), 1)}


def embedder_name_and_dims(name: str | None = None) -> tuple[str, int]:
    """The embedder's name and dimension (the EMBEDDER setting's when name is None)."""
    embedder = get_embedder(name)
    return embedder.name, int(embedder.embed_query("dimension probe").shape[0])
