"""The retrieval result cache: hits on a repeat, misses once the KB's content or graph moved, one
entry per parameter set, no entry shared across KBs (so across users), and a shared cache that
is down costs searches, not answers."""

from __future__ import annotations

import pytest
from django.core.cache.backends.locmem import LocMemCache
from django.test import TestCase

from agentic_rag.redis_cache import FailSoftRedisCache, outage
from knowledge.ingest import delete_document, run_ingestion, submit_document
from knowledge.models import Document, KnowledgeBase
from knowledge.result_cache import RetrievalCache, cache_key, kb_version
from knowledge.retrieval import RetrievalParams, RetrievalResult, retrieve

pytestmark = pytest.mark.django_db

DOCS = {
    "vectors.md": "# 1 Vector search\n\nHNSW graphs index embeddings so cosine similarity search stays fast.",
    "keywords.md": "# 1 Keyword search\n\nBM25 ranks passages by term frequency and inverse document frequency.",
}
QUERY = "How does BM25 rank passages?"


def ingest(kb, docs=DOCS):
    for name, text in docs.items():
        queued: list[int] = []
        with TestCase.captureOnCommitCallbacks(execute=True):
            submit_document(kb, name, text.encode(), enqueue=queued.append)
        run_ingestion(queued[0])


class CountingRetriever:
    """The real `retrieve`, counting the searches that reached it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, query, kb, params=RetrievalParams(), **kwargs) -> RetrievalResult:
        self.calls += 1
        return retrieve(query, kb, params, **kwargs)


@pytest.fixture
def searched(kb):
    ingest(kb)
    return kb


def cache(**kwargs) -> RetrievalCache:
    return RetrievalCache(**{"entries": 64, "ttl_s": 3600, **kwargs})


def chunk_ids(result: RetrievalResult) -> list[int]:
    return [c.chunk_id for c in result.candidates]


def test_a_repeated_search_is_answered_from_the_cache(searched):
    inner, results = CountingRetriever(), cache()
    search = results.wrap(inner)

    first = search(QUERY, searched, RetrievalParams())
    again = search("  How does BM25   rank passages? ", searched, RetrievalParams())  # the same, spaced out

    assert inner.calls == 1 and chunk_ids(again) == chunk_ids(first) and first.candidates
    assert [c.score for c in again.candidates] == [c.score for c in first.candidates]
    assert set(again.timings_ms) == {"cache", "total"}  # the trace shows a hit, not a search
    stats = results.stats()
    assert (stats.hits, stats.misses, stats.hit_rate) == (1, 1, 0.5)


def test_a_caller_that_edits_its_result_does_not_edit_the_cached_one(searched):
    search = cache().wrap(retrieve)
    first = search(QUERY, searched, RetrievalParams())
    first.candidates[0].score = -1.0
    first.candidates.clear()

    again = search(QUERY, searched, RetrievalParams())

    assert again.candidates and again.candidates[0].score != -1.0


def test_ingesting_or_deleting_a_document_makes_the_old_entries_unreachable(searched):
    inner = CountingRetriever()
    search = cache().wrap(inner)
    before = search(QUERY, searched, RetrievalParams())

    ingest(searched, {"ranking.md": "# 1 Ranking\n\nBM25 ranks passages with a saturation curve k1 and length norm b."})
    after_ingest = search(QUERY, searched, RetrievalParams())  # the same KB object, now out of date: read afresh
    assert inner.calls == 2
    assert "ranking.md" in {c.doc_name for c in after_ingest.candidates} - {c.doc_name for c in before.candidates}

    delete_document(Document.objects.get(kb=searched, name="ranking.md"))
    after_delete = search(QUERY, searched, RetrievalParams())
    assert inner.calls == 3 and "ranking.md" not in {c.doc_name for c in after_delete.candidates}


def test_a_re_embedding_bump_and_a_graph_build_each_start_afresh(searched):
    graph = {"version": 1}
    inner = CountingRetriever()
    search = cache(graph_version=lambda kb: graph["version"]).wrap(inner)
    graph_mode = RetrievalParams(mode="hybrid+graph")

    search(QUERY, searched, graph_mode)
    search(QUERY, searched, graph_mode)
    graph["version"] = 2  # a build wrote the graph: content_version does not move
    search(QUERY, searched, graph_mode)
    search(QUERY, searched, RetrievalParams())
    searched.bump_content_version()  # as re-embedding does
    search(QUERY, searched, RetrievalParams())

    assert inner.calls == 4


def test_each_parameter_set_has_its_own_entry(searched):
    inner = CountingRetriever()
    search = cache().wrap(inner)
    variants = [
        RetrievalParams(),
        RetrievalParams(top_k=3),
        RetrievalParams(mode="bm25"),
        RetrievalParams(rerank=False),
        RetrievalParams(expand_cross_language=False),
        RetrievalParams(scope="Keyword search"),
    ]
    for params in variants:
        search(QUERY, searched, params)
    for params in variants:
        search(QUERY, searched, params)

    assert inner.calls == len(variants) and len({cache_key(QUERY, kb_version(searched), p) for p in variants}) == 6
    assert len(search(QUERY, searched, RetrievalParams(top_k=3)).candidates) <= 3


def test_no_entry_is_shared_between_two_users_kbs(searched, bob):
    bobs = KnowledgeBase.objects.create(slug="bob-kb", name="Bob's KB", owner=bob)
    ingest(bobs, {"bob.md": "# 1 Notes\n\nBM25 ranks passages in Bob's own notes about search engines."})
    inner = CountingRetriever()
    search = cache().wrap(inner)

    alices = search(QUERY, searched, RetrievalParams())
    his = search(QUERY, bobs, RetrievalParams())

    assert inner.calls == 2
    assert {c.doc_name for c in his.candidates} == {"bob.md"}
    assert "bob.md" not in {c.doc_name for c in alices.candidates}


def test_a_kb_made_again_with_the_same_id_does_not_read_the_old_ones_entries(searched, alice):
    search = cache().wrap(retrieve)
    search(QUERY, searched, RetrievalParams())
    old_pk = searched.pk
    searched.delete()
    again = KnowledgeBase.objects.create(pk=old_pk, slug="alice-kb", name="Again", owner=alice)

    assert search(QUERY, again, RetrievalParams()).candidates == []


def test_the_lru_holds_at_most_its_entries(searched):
    inner = CountingRetriever()
    search = cache(entries=2).wrap(inner)
    for top_k in (1, 2, 3, 1):
        search(QUERY, searched, RetrievalParams(top_k=top_k))

    assert inner.calls == 4  # top_k=1 was pushed out by 2 and 3


def test_a_degraded_result_is_not_kept(searched):
    def rerank_failed(query, kb, params=RetrievalParams(), **kwargs):
        result = retrieve(query, kb, params)
        result.warnings.append("rerank skipped: the judge timed out")
        return result

    results = cache()
    search = results.wrap(rerank_failed)
    search(QUERY, searched, RetrievalParams())
    search(QUERY, searched, RetrievalParams())

    assert results.stats().hits == 0 and results.stats().uncached == 2


def test_processes_share_entries_through_the_shared_cache(searched):
    shared = LocMemCache("retrieval-test", {})
    inner = CountingRetriever()
    one, other = cache(shared=shared), cache(shared=shared)

    one.wrap(inner)(QUERY, searched, RetrievalParams())
    found = other.wrap(inner)(QUERY, searched, RetrievalParams())

    assert inner.calls == 1 and found.candidates and other.stats().shared_hits == 1


def test_a_shared_cache_that_is_down_costs_a_search_not_an_answer(searched):
    down = FailSoftRedisCache("redis://127.0.0.1:1/0", {"OPTIONS": {"socket_connect_timeout": 0.2}})
    inner = CountingRetriever()
    results = cache(shared=down)
    search = results.wrap(inner)
    try:
        first = search(QUERY, searched, RetrievalParams())
        again = search(QUERY, searched, RetrievalParams())
    finally:
        outage._down_until = float("-inf")  # the next tests find Redis as if never tried

    assert first.candidates and chunk_ids(again) == chunk_ids(first)
    assert inner.calls == 1 and results.stats().hits == 1  # this process's LRU still answers


def test_a_cache_of_no_entries_searches_every_time(searched):
    inner = CountingRetriever()
    search = cache(entries=0).wrap(inner)
    search(QUERY, searched, RetrievalParams())
    search(QUERY, searched, RetrievalParams())

    assert inner.calls == 2
