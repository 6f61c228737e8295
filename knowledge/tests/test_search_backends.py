"""The search backend contract, run against whatever `get_backend()` picks for the test database.

The embedded run exercises MemoryBackend on SQLite; the full-stack run (DATABASE_URL on
PostgreSQL) exercises PgBackend, and then also checks the SQL can use the HNSW and GIN
indexes and that both backends agree on the same data.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import nullcontext

import numpy as np
import pytest
from django.db import connection, transaction
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from agentic_rag.embeddings import clear_embedder_cache, get_embedder
from agentic_rag.side_connections import SideConnections
from knowledge import search
from knowledge.analysis import analyze
from knowledge.indexing import index_text
from knowledge.ingest import delete_document, run_ingestion, submit_document
from knowledge.memory_index import MemoryBackend
from knowledge.models import Chunk, Document, KnowledgeBase, SearchEntry
from knowledge.retrieval import RetrievalParams, SearchContext, retrieve
from knowledge.search import MIN_GENERAL_TAGGED

pytestmark = pytest.mark.django_db

ON_POSTGRESQL = connection.vendor == "postgresql"
postgresql_only = pytest.mark.skipif(not ON_POSTGRESQL, reason="PostgreSQL only (DATABASE_URL)")

CURING_MD = """# 1 Concrete curing

Fresh concrete must be kept moist while it gains strength. Cover the slab with wet burlap
and plastic sheeting as soon as the surface can bear it.

## 1.1 Curing time

Keep ordinary Portland cement concrete moist for at least seven days. Slabs containing a
zeolite admixture need fourteen days of moist curing.

## 1.2 Cold weather

Below five degrees Celsius, insulate the formwork and heat the enclosure so the concrete
does not freeze while curing.

# 2 Inspection

Test cylinders are crushed at 28 days, following GB 50204-2015.
"""

CURING_ZH_MD = """# 1 混凝土养护

混凝土浇筑完毕后，应在12小时内加以覆盖并保湿养护。

## 1.1 养护时间

采用硅酸盐水泥拌制的混凝土，养护时间不得少于7天。掺用缓凝型外加剂的混凝土不得少于14天。

## 1.2 冬期施工

日平均气温低于5℃时，不得浇水养护，应按《建筑工程冬期施工规程》执行。
"""

WELDING_MD = """# 1 Steel welding

Welders must hold a valid certificate. Preheat thick plates before welding to avoid cracking.

## 1.1 Weld inspection

Ultrasonic testing checks full penetration welds for internal flaws.
"""


@pytest.fixture(autouse=True)
def _hashing_embedder(settings, monkeypatch):
    settings.EMBEDDER = "hashing-1024"
    clear_embedder_cache()
    # Each test gets a fresh backend: a cached snapshot must not outlive the test's data.
    monkeypatch.setattr(search, "_backend", None)
    yield
    clear_embedder_cache()


def ingest(kb: KnowledgeBase, name: str, text: str) -> Document:
    queued: list[int] = []
    # The test's transaction never commits, so run on-commit callbacks as if it had.
    with TestCase.captureOnCommitCallbacks(execute=True):
        outcome = submit_document(kb, name, text.encode(), enqueue=queued.append)
    for document_id in queued:
        run_ingestion(document_id)
    return Document.objects.get(pk=outcome.document.pk)


def children(document: Document) -> list[Chunk]:
    return list(Chunk.objects.live().children().filter(document=document).order_by("index"))


def child_in_section(document: Document, section_index: str) -> Chunk:
    return Chunk.objects.live().children().get(document=document, section_index=section_index)


def query_vector(text: str) -> np.ndarray:
    return get_embedder("hashing-1024").embed_query(text)


def ids(hits) -> list[int]:
    return [chunk_id for chunk_id, _ in hits]


@pytest.fixture
def docs(kb) -> dict[str, Document]:
    return {
        "curing": ingest(kb, "curing.md", CURING_MD),
        "curing_zh": ingest(kb, "养护.md", CURING_ZH_MD),
        "welding": ingest(kb, "welding.md", WELDING_MD),
    }


@pytest.fixture
def backend():
    return search.get_backend()


def test_it_picks_the_backend_of_the_database(backend):
    expected = "PgBackend" if ON_POSTGRESQL else "MemoryBackend"
    assert type(backend).__name__ == expected
    assert search.get_backend() is backend


def test_it_finds_the_document_with_a_rare_term_first(kb, docs, backend):
    hits = backend.keyword(kb, analyze("zeolite admixture"), level=Chunk.CHILD, top_k=5)
    zh_hits = backend.keyword(kb, analyze("缓凝型外加剂"), level=Chunk.CHILD, top_k=5)

    assert hits[0][0] == child_in_section(docs["curing"], "1.1").pk
    assert zh_hits[0][0] == child_in_section(docs["curing_zh"], "1.1").pk
    assert all(score > 0 for _, score in hits + zh_hits)
    assert [score for _, score in hits] == sorted((score for _, score in hits), reverse=True)


def test_it_finds_the_only_document_of_a_new_kb_by_keyword(kb, backend):
    # A one-paragraph note is one row per level: rank-bm25's idf is negative for all of it.
    note = ingest(kb, "note.txt", "Formwork must be inspected before pouring concrete.")

    for level in (Chunk.CHILD, Chunk.PARENT):
        hits = backend.keyword(kb, analyze("formwork inspection"), level=level, top_k=5)
        assert ids(hits) == [Chunk.objects.live().get(document=note, level=level).pk]
        assert hits[0][1] > 0


@pytest.mark.parametrize("only_zh", [False, True])
def test_it_ranks_a_querys_variants_by_each_chunks_best_score(kb, docs, backend, only_zh):
    variants = [analyze("curing time of concrete"), analyze("养护 时间 混凝土"), analyze("curing 养护 !!")]
    only = [chunk.pk for chunk in children(docs["curing_zh"])] if only_zh else None
    apart = [backend.keyword(kb, tokens, level=Chunk.CHILD, top_k=4, only=only) for tokens in variants]

    context = SearchContext(kb, backend, queries=(), tokens=tuple(map(tuple, variants)), vectors=())
    together = context.keyword_hits(level=Chunk.CHILD, top_k=4, only=only)

    expected = search.best_of(apart, 4)
    assert ids(together) == ids(expected) and together
    assert np.allclose([s for _, s in together], [s for _, s in expected])
    # Each language's best chunk is found, not only the first variant's.
    assert {hits[0][0] for hits in apart if hits} <= set(ids(together))
    nothing = SearchContext(kb, backend, queries=(), tokens=(("!!",), ()), vectors=())
    assert nothing.keyword_hits(level=Chunk.CHILD, top_k=4) == []


def test_it_searches_parents_and_children_apart(kb, docs, backend):
    parent_hits = backend.keyword(kb, analyze("zeolite"), level=Chunk.PARENT, top_k=5)
    child_hits = backend.keyword(kb, analyze("zeolite"), level=Chunk.CHILD, top_k=5)

    parent = Chunk.objects.live().parents().get(document=docs["curing"], section_index="1.1")
    assert ids(parent_hits) == [parent.pk]
    assert ids(child_hits) == [child_in_section(docs["curing"], "1.1").pk]


def test_it_ranks_the_closest_chunk_first_by_vector(kb, docs, backend):
    weld = child_in_section(docs["welding"], "1.1")

    hits = backend.vector(kb, query_vector("ultrasonic testing of penetration welds"), level=Chunk.CHILD, top_k=3)
    exact = backend.vector(kb, query_vector(index_text(weld)), level=Chunk.CHILD, top_k=3)

    assert hits[0][0] == weld.pk
    assert len(hits) == 3
    assert exact[0] == (weld.pk, pytest.approx(1.0, abs=1e-4))
    assert exact[1][1] < exact[0][1]


def test_it_skips_entries_of_a_version_not_yet_live(kb, docs, backend, monkeypatch):
    if ON_POSTGRESQL:  # fetch exactly top_k ranked rows first, so the pending one takes the place
        from knowledge import pg_search

        monkeypatch.setattr(pg_search, "_FETCH_FACTOR", 1)
        monkeypatch.setattr(pg_search, "_FETCH_EXTRA", 0)
    weld = child_in_section(docs["welding"], "1.1")
    text = "ultrasonic testing of penetration welds"
    # What the store and index stages leave while version 2 is being ingested.
    pending = Chunk.objects.create(
        kb=kb, document=docs["welding"], version=2, level=Chunk.CHILD, index=weld.index, text=text, sha256="v2"
    )
    SearchEntry.objects.create(
        chunk=pending, kb=kb, level=Chunk.CHILD, embedder="hashing-1024", dims=1024,
        embedding=query_vector(text), tokens=" ".join(analyze(text) * 3),
    )

    assert ids(backend.vector(kb, query_vector(text), level=Chunk.CHILD, top_k=1)) == [weld.pk]
    assert ids(backend.keyword(kb, analyze(text), level=Chunk.CHILD, top_k=1)) == [weld.pk]
    assert ids(backend.vector(kb, query_vector(text), level=Chunk.CHILD, top_k=2))[0] == weld.pk
    assert backend.chunks(kb, [pending.pk]) == {}


def test_it_returns_top_k_of_every_child_when_asked_for_more(kb, docs, backend):
    live_children = Chunk.objects.live().children().filter(kb=kb).count()

    hits = backend.vector(kb, query_vector("concrete"), level=Chunk.CHILD, top_k=100)

    assert len(hits) == live_children
    assert len(set(ids(hits))) == live_children


def test_it_restricts_both_legs_to_the_given_chunks(kb, docs, backend):
    allowed = [chunk.pk for chunk in children(docs["curing_zh"])]
    query = query_vector("zeolite admixture curing concrete")

    keyword = backend.keyword(kb, analyze("混凝土 zeolite"), level=Chunk.CHILD, top_k=10, only=allowed)
    vector = backend.vector(kb, query, level=Chunk.CHILD, top_k=10, only=allowed)

    assert keyword and set(ids(keyword)) <= set(allowed)
    assert sorted(ids(vector)) == sorted(allowed)
    assert backend.keyword(kb, ["zeolit"], level=Chunk.CHILD, top_k=10, only=allowed) == []
    assert backend.vector(kb, query, level=Chunk.CHILD, top_k=10, only=[]) == []


def test_it_serves_only_the_new_version_after_a_swap(kb, docs, backend):
    old_ids = {chunk.pk for chunk in Chunk.objects.filter(document=docs["welding"])}
    before = backend.keyword(kb, analyze("ultrasonic"), level=Chunk.CHILD, top_k=5)
    assert set(ids(before)) & old_ids

    new_text = WELDING_MD.replace("Ultrasonic testing", "Radiographic inspection")
    document = ingest(kb, "welding.md", new_text)

    assert document.live_version == 2
    assert backend.keyword(kb, analyze("ultrasonic"), level=Chunk.CHILD, top_k=5) == []
    radiographic = backend.keyword(kb, analyze("radiographic"), level=Chunk.CHILD, top_k=5)
    assert radiographic[0][0] == child_in_section(document, "1.1").pk
    vector = backend.vector(kb, query_vector(new_text), level=Chunk.CHILD, top_k=100)
    everything = ids(vector) + ids(backend.vector(kb, query_vector(new_text), level=Chunk.PARENT, top_k=100))
    assert not old_ids & set(everything)
    assert not old_ids & set(backend.chunks(kb, old_ids))


def test_it_forgets_deleted_documents(kb, docs, backend):
    gone = {chunk.pk for chunk in Chunk.objects.filter(document=docs["curing"])}
    size_before = backend.size(kb)["chunks"]

    delete_document(docs["curing"])

    assert backend.keyword(kb, analyze("zeolite"), level=Chunk.CHILD, top_k=5) == []
    hits = backend.vector(kb, query_vector(CURING_MD), level=Chunk.CHILD, top_k=100)
    assert hits and not gone & set(ids(hits))
    assert backend.tagged(kb, ["GB 50204"], limit=10) == []
    assert backend.size(kb)["chunks"] == size_before - len(gone)


def test_it_keeps_knowledge_bases_apart(kb, docs, backend, bob):
    other = KnowledgeBase.objects.create(slug="bob-kb", name="Bob's KB", owner=bob)
    theirs = ingest(other, "curing.md", CURING_MD)
    ours = set(Chunk.objects.filter(kb=kb).values_list("pk", flat=True))
    their_ids = set(Chunk.objects.filter(kb=other).values_list("pk", flat=True))
    query = query_vector(CURING_MD)

    found = set()
    for level in (Chunk.PARENT, Chunk.CHILD):
        found |= set(ids(backend.keyword(kb, analyze(CURING_MD), level=level, top_k=100)))
        found |= set(ids(backend.vector(kb, query, level=level, top_k=100)))
    found |= set(backend.tagged(kb, ["gb"], limit=100))
    found |= set(backend.in_chapter(kb, "Concrete curing", "Curing time"))

    assert found and found <= ours
    assert backend.chunks(kb, their_ids) == {}
    assert not backend.cosines(kb, query, sorted(their_ids)).any()
    assert backend.neighbours(kb, list(backend.chunks(other, their_ids).values())) == {}
    their_hits = backend.keyword(other, analyze("zeolite"), level=Chunk.CHILD, top_k=5)
    assert ids(their_hits) == [child_in_section(theirs, "1.1").pk]
    assert backend.vector(kb, query, level=Chunk.CHILD, top_k=5, only=their_ids) == []


def test_it_loads_chunk_info_for_live_chunks_of_the_kb(kb, docs, backend):
    child = child_in_section(docs["curing"], "2")

    info = backend.chunks(kb, [child.pk, 10**9])

    assert list(info) == [child.pk]
    loaded = info[child.pk]
    assert (loaded.doc_id, loaded.doc_name, loaded.text) == (docs["curing"].pk, "curing.md", child.text)
    assert (loaded.level, loaded.parent_id, loaded.index) == (Chunk.CHILD, child.parent_id, child.index)
    assert loaded.chapter_level_1 == "Inspection"
    assert "GB 50204-2015" in loaded.tags
    assert loaded.tokens.split() == analyze(index_text(child))
    assert loaded.doc_title == docs["curing"].metadata["title"] != ""
    assert loaded.candidate().doc_title == loaded.doc_title
    assert backend.chunks(kb, []) == {}


def test_it_finds_chunks_by_tag_most_matches_first(kb, docs, backend):
    child = child_in_section(docs["curing"], "2")
    parent = child.parent
    titled = child_in_section(docs["curing_zh"], "1.2")

    by_standard = backend.tagged(kb, ["gb 50204", "2015"], limit=10)
    by_title = backend.tagged(kb, ["冬期施工"], limit=10)

    assert set(by_standard) == {child.pk, parent.pk}
    assert titled.pk in by_title and titled.parent_id in by_title
    assert backend.tagged(kb, ["gb 50204"], limit=1) in ([child.pk], [parent.pk])
    assert backend.tagged(kb, ["no-such-tag"], limit=10) == []
    assert backend.tagged(kb, [], limit=10) == []


def test_it_ranks_chunks_matching_more_tag_keywords_first(kb, docs, backend):
    # 1.1 is tagged 混凝土 and 外加剂; section 1 only 混凝土; 1.2 建筑工程冬期施工规程.
    section = Chunk.objects.live().filter(document=docs["curing_zh"])
    both = set(section.filter(section_index="1.1").values_list("pk", flat=True))
    one = set(section.exclude(section_index="1.1").values_list("pk", flat=True))

    tagged = backend.tagged(kb, ["混凝土", "外加剂", "冬期"], limit=10)

    assert set(tagged[:2]) == both
    assert set(tagged[2:]) == one
    assert set(backend.tagged(kb, ["混凝土", "外加剂", "冬期"], limit=2)) == both


def test_it_leaves_out_keywords_tagged_on_too_many_chunks(kb, docs, backend):
    live = Chunk.objects.live().filter(kb=kb)
    general = {c.pk for c in live if any("混凝土" in tag for tag in c.tags)}
    rare = {c.pk for c in live if any("外加剂" in tag for tag in c.tags)}
    share = (len(general) - 1) / live.count()  # just below the general word's share
    assert len(rare) < len(general) - 1 and len(general) - 1 >= MIN_GENERAL_TAGGED

    found = backend.tagged(kb, ["混凝土", "外加剂"], limit=50, max_share=share)

    assert set(found) == rare
    assert set(backend.tagged(kb, ["混凝土", "外加剂"], limit=50)) == general | rare
    # In a small KB, a keyword on a few chunks is never general, whatever the share.
    assert set(backend.tagged(kb, ["外加剂"], limit=50, max_share=0.0001)) == rare


def test_it_lists_the_chunks_of_a_chapter(kb, docs, backend):
    section = Chunk.objects.live().filter(document=docs["curing"], section_index="1.1")

    found = backend.in_chapter(kb, "Concrete curing", "Curing time")

    assert len(found) == 2
    assert sorted(found) == sorted(section.values_list("pk", flat=True))
    assert backend.in_chapter(kb, "9 Nowhere", "") == []


def test_it_scores_cosines_of_given_chunks_in_their_order(kb, docs, backend):
    weld = child_in_section(docs["welding"], "1.1")
    other = child_in_section(docs["curing"], "1.1")
    query = query_vector(index_text(weld))

    scores = backend.cosines(kb, query, [other.pk, 10**9, weld.pk])
    vector = dict(backend.vector(kb, query, level=Chunk.CHILD, top_k=100))

    assert scores.dtype == np.float32 and scores.shape == (3,)
    assert scores[2] == pytest.approx(1.0, abs=1e-4)
    assert scores[1] == 0.0
    assert scores[0] == pytest.approx(vector[other.pk], abs=1e-4)
    assert backend.cosines(kb, query, []).shape == (0,)


def test_it_returns_the_texts_around_each_chunk(kb, docs, backend):
    chunks = children(docs["curing"])
    assert len(chunks) >= 3
    middle = backend.chunks(kb, [chunks[1].pk])[chunks[1].pk]
    first = backend.chunks(kb, [chunks[0].pk])[chunks[0].pk]
    doc = docs["curing"].pk

    around = backend.neighbours(kb, [middle, first])

    assert dict(around) == {
        (doc, Chunk.CHILD, chunks[0].index): chunks[0].text,
        (doc, Chunk.CHILD, chunks[1].index): chunks[1].text,
        (doc, Chunk.CHILD, chunks[2].index): chunks[2].text,
    }
    assert backend.neighbours(kb, []) == {}


@pytest.mark.parametrize("pinned", [False, True])
def test_the_texts_around_loaded_chunks_are_the_same_when_pinned(kb, docs, backend, pinned):
    chunks = children(docs["curing"])
    doc = docs["curing"].pk
    with search.pinned(backend, kb) if pinned else nullcontext():
        loaded = backend.chunks(kb, [chunks[0].pk, chunks[1].pk])
        with CaptureQueriesContext(connection) as queries:
            around = backend.neighbours(kb, list(loaded.values()))

    assert dict(around) == {
        (doc, Chunk.CHILD, chunks[0].index): chunks[0].text,
        (doc, Chunk.CHILD, chunks[1].index): chunks[1].text,
        (doc, Chunk.CHILD, chunks[2].index): chunks[2].text,
    }
    if ON_POSTGRESQL and pinned:
        assert queries.captured_queries == []  # the chunks brought their neighbours along


def test_it_counts_the_live_chunks_it_searches(kb, docs, backend):
    live = Chunk.objects.live().filter(kb=kb).count()

    size = backend.size(kb)

    assert size["chunks"] == live
    if ON_POSTGRESQL:
        assert size["bytes"] == 0  # the database holds the indexes, not this process
    else:
        assert size["bytes"] > 0


def test_it_sees_a_new_document_in_this_and_another_instance(kb, docs, backend):
    before = backend.keyword(kb, analyze("galvanized"), level=Chunk.CHILD, top_k=5)
    other_process = type(backend)()
    other_process.size(kb)  # builds (or, on PostgreSQL, reads) its view before the change

    added = ingest(kb, "coating.md", "# Coating\n\nGalvanized bolts resist corrosion in coastal sites.\n")

    expected = [chunk.pk for chunk in children(added)]
    assert before == []
    assert ids(backend.keyword(kb, analyze("galvanized"), level=Chunk.CHILD, top_k=5)) == expected
    assert ids(other_process.keyword(kb, analyze("galvanized"), level=Chunk.CHILD, top_k=5)) == expected


def test_it_reads_the_embedder_the_kb_row_names_not_a_stale_copy(docs, backend):
    stale = KnowledgeBase.objects.get(slug="alice-kb")
    stale.embedder = ""

    assert backend.keyword(stale, analyze("zeolite"), level=Chunk.CHILD, top_k=5)
    assert backend.vector(stale, query_vector("zeolite"), level=Chunk.CHILD, top_k=5)
    assert backend.size(stale)["chunks"] > 0
    assert backend.embedder_name(stale) == "hashing-1024" and backend.has_entries(stale)


def test_it_says_whether_a_kb_has_anything_to_search(kb, docs, backend):
    empty = KnowledgeBase.objects.create(slug="empty", name="Empty", owner=kb.owner)

    assert backend.has_entries(kb) and not backend.has_entries(empty)
    assert backend.embedder_name(empty) == ""

    for document in docs.values():
        delete_document(document)
    assert not backend.has_entries(kb)


def test_it_returns_nothing_for_empty_or_unknown_queries(kb, docs, backend):
    query = query_vector("concrete")
    empty = KnowledgeBase.objects.create(slug="empty", name="Empty", owner=kb.owner)

    assert backend.keyword(kb, [], level=Chunk.CHILD, top_k=5) == []
    assert backend.keyword(kb, ["qwertyuiop"], level=Chunk.CHILD, top_k=5) == []
    assert backend.keyword(kb, analyze("concrete"), level=Chunk.CHILD, top_k=0) == []
    assert backend.vector(kb, query, level=Chunk.CHILD, top_k=0) == []
    assert backend.keyword(empty, analyze("concrete"), level=Chunk.CHILD, top_k=5) == []
    assert backend.vector(empty, query, level=Chunk.CHILD, top_k=5) == []
    assert backend.size(empty)["chunks"] == 0


def test_it_treats_query_tokens_as_data(kb, docs, backend):
    tokens = ["zeolit", "'", "a & b", "x' | 'y", "!", ":*", "\\", "%", "_", "concret"]

    hits = backend.keyword(kb, tokens, level=Chunk.CHILD, top_k=5)
    tagged = backend.tagged(kb, ["%", "_", "'; drop table knowledge_chunk; --"], limit=5)

    assert hits[0][0] == child_in_section(docs["curing"], "1.1").pk
    assert tagged == []
    assert Chunk.objects.filter(kb=kb).exists()


# --- PostgreSQL only ------------------------------------------------------------------------


@postgresql_only
def test_it_agrees_with_the_memory_backend_on_postgresql(kb, docs, backend):
    memory = MemoryBackend()
    query = query_vector("curing concrete in cold weather")

    for level in (Chunk.PARENT, Chunk.CHILD):
        pg_hits = backend.vector(kb, query, level=level, top_k=10)
        memory_hits = memory.vector(kb, query, level=level, top_k=10)
        assert ids(pg_hits) == ids(memory_hits)
        assert np.allclose([s for _, s in pg_hits], [s for _, s in memory_hits], atol=1e-4)
    chunk_ids = [chunk.pk for chunk in Chunk.objects.filter(kb=kb)]
    assert np.allclose(backend.cosines(kb, query, chunk_ids), memory.cosines(kb, query, chunk_ids), atol=1e-4)
    assert backend.in_chapter(kb, "混凝土养护", "养护时间") == memory.in_chapter(kb, "混凝土养护", "养护时间")
    assert backend.tagged(kb, ["gb", "施工"], limit=20) == memory.tagged(kb, ["gb", "施工"], limit=20)


@postgresql_only
def test_one_query_reads_the_kbs_version_once(kb, docs, backend):
    retrieve("curing concrete in cold weather", kb, RetrievalParams(mode="hybrid"), backend=backend)  # caches

    with CaptureQueriesContext(connection) as queries:
        result = retrieve("formwork for concrete walls", kb, RetrievalParams(mode="hybrid"), backend=backend)

    assert result.candidates
    reads = [q["sql"] for q in queries.captured_queries if "FROM knowledge_knowledgebase WHERE id" in q["sql"]]
    assert len(reads) == 1
    assert not any("SELECT EXISTS" in q["sql"] for q in queries.captured_queries)  # known for this version


@postgresql_only
def test_a_term_asked_again_is_scored_from_this_process_until_the_kb_changes(kb, docs, backend):
    def postings_reads(text: str) -> int:
        with CaptureQueriesContext(connection) as queries:
            backend.keyword(kb, analyze(text), level=Chunk.CHILD, top_k=5)
        return sum("knowledge_searchposting" in q["sql"] for q in queries.captured_queries)

    assert postings_reads("formwork concrete") == 1
    assert postings_reads("concrete formwork") == 0

    ingest(kb, "more.txt", "Formwork for a concrete wall is braced every metre.")
    assert postings_reads("formwork concrete") == 1  # a new content version: read again
    assert "more.txt" in {Chunk.objects.get(pk=c).document.name for c, _ in
                          backend.keyword(kb, analyze("braced formwork"), level=Chunk.CHILD, top_k=5)}


KEYWORD_QUERIES = [
    "curing concrete in cold weather 混凝土 养护",
    "concrete",  # in most rows: the rows are ranked by their length and tf alone
    "the of and a concrete formwork",  # frequent words around two that matter
    "formwork formwork concrete",  # a repeated term counts twice
    "zeolite",
]


@postgresql_only
@pytest.mark.parametrize("text", KEYWORD_QUERIES)
def test_the_keyword_leg_scores_as_the_memory_backend_does(kb, docs, backend, text):
    memory = MemoryBackend()
    tokens = analyze(text)
    some_children = [chunk.pk for chunk in Chunk.objects.filter(kb=kb, level=Chunk.CHILD)][::2]

    for level, top_k, only in [(Chunk.PARENT, 10, None), (Chunk.CHILD, 10, None), (Chunk.CHILD, 3, None),
                               (Chunk.CHILD, 50, None), (Chunk.CHILD, 10, some_children)]:
        pg_hits = backend.keyword(kb, tokens, level=level, top_k=top_k, only=only)
        memory_hits = memory.keyword(kb, tokens, level=level, top_k=top_k, only=only)
        assert ids(pg_hits) == ids(memory_hits)
        assert np.allclose([s for _, s in pg_hits], [s for _, s in memory_hits], rtol=1e-6)
        assert only is None or set(ids(pg_hits)) <= set(only)


@postgresql_only
def test_the_keyword_leg_skips_frequent_terms_yet_ranks_exactly(kb, backend):
    # Forty rows share five frequent words; three rare words pick out a few rows. The
    # exact ranking by MaxScore must equal BM25 over every posting (the memory backend).
    rng = np.random.default_rng(5)
    frequent, rare = ["alpha", "beta", "gamma", "delta", "omega"], ["quartz", "basalt", "granite"]
    paragraphs = []
    for row in range(40):
        words = list(rng.choice(frequent, size=12)) + [rare[row % 3]] * int(row % 5 == 0) + ["filler"] * (row % 7)
        paragraphs.append(" ".join(words))
    ingest(kb, "rocks.txt", "\n\n".join(paragraphs))
    memory = MemoryBackend()

    for text in ["alpha beta quartz", "alpha beta gamma delta omega", "granite omega omega", "basalt quartz alpha"]:
        for top_k in (1, 4, 15):
            pg_hits = backend.keyword(kb, analyze(text), level=Chunk.CHILD, top_k=top_k)
            memory_hits = memory.keyword(kb, analyze(text), level=Chunk.CHILD, top_k=top_k)
            assert ids(pg_hits) == ids(memory_hits)
            assert np.allclose([s for _, s in pg_hits], [s for _, s in memory_hits], rtol=1e-6)


@postgresql_only
def test_it_finds_the_same_chunks_through_the_hnsw_index(kb, docs, backend, monkeypatch):
    from knowledge import pg_search

    query = query_vector("curing concrete in cold weather")
    exact = backend.vector(kb, query, level=Chunk.CHILD, top_k=5)
    monkeypatch.setattr(pg_search, "_HNSW_READ_COST", 0)
    monkeypatch.setattr(pg_search, "vector_sql", _recording(pg_search.vector_sql, calls := []))

    approximate = backend.vector(kb, query, level=Chunk.CHILD, top_k=5)

    assert calls and all(kwargs["is_ann"] for kwargs in calls)
    assert ids(approximate) == ids(exact)
    assert np.allclose([s for _, s in approximate], [s for _, s in exact], atol=1e-5)


def _recording(function, calls: list):
    def record(*args, **kwargs):
        calls.append(kwargs)
        return function(*args, **kwargs)

    return record


@postgresql_only
def test_an_hnsw_scan_leaves_no_setting_behind_in_a_transaction(kb, docs, backend, monkeypatch):
    assert connection.in_atomic_block  # pytest-django's test transaction: the savepoint path
    _assert_hnsw_scan_restores_settings(kb, backend, monkeypatch)


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_an_hnsw_scan_leaves_no_setting_behind_in_autocommit(kb, docs, backend, monkeypatch):
    assert not connection.in_atomic_block  # one message, one implicit transaction
    _assert_hnsw_scan_restores_settings(kb, backend, monkeypatch)


HYBRID = RetrievalParams(mode="hybrid", top_k=5)


def _ranked(result) -> list[tuple[int, float]]:
    return [(c.chunk_id, round(c.score, 6)) for c in result.candidates]


def _vector_threads(backend, monkeypatch) -> list[int]:
    """The threads the backend's vector leg runs on, from now on."""
    threads: list[int] = []
    vector = backend.vector

    def recorded(*args, **kwargs):
        threads.append(threading.get_ident())
        return vector(*args, **kwargs)

    monkeypatch.setattr(backend, "vector", recorded)
    return threads


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_hybrid_query_runs_its_vector_leg_beside_the_keyword_leg_with_the_same_result(kb, docs, backend, monkeypatch):
    from knowledge import pg_search

    monkeypatch.setattr(pg_search, "_SIDE_LEGS", SideConnections(0))
    one_after_the_other = retrieve("curing concrete in cold weather", kb, HYBRID, backend=backend)
    monkeypatch.setattr(pg_search, "_SIDE_LEGS", SideConnections(1))
    threads = _vector_threads(backend, monkeypatch)
    monkeypatch.setattr(pg_search, "_version_row", _recording(pg_search._version_row, version_reads := []))

    side_by_side = retrieve("curing concrete in cold weather", kb, HYBRID, backend=backend)

    assert threads and threading.get_ident() not in threads
    assert len(version_reads) == 1  # the side thread works under the query's pin
    assert _ranked(side_by_side) == _ranked(one_after_the_other)
    assert _ranked(side_by_side)[0][0] == child_in_section(docs["curing"], "1.2").pk


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_while_another_query_searches_both_legs_run_on_the_callers_connection(kb, docs, backend, bob, monkeypatch):
    from knowledge import pg_search

    monkeypatch.setattr(pg_search, "_SIDE_LEGS", SideConnections(1))
    threads = _vector_threads(backend, monkeypatch)
    other_kb = KnowledgeBase.objects.create(slug="bob-kb", name="Bob's KB", owner=bob)

    with backend.pinned(other_kb):  # a query of this process still searching another KB
        while_busy = retrieve("curing concrete in cold weather", kb, HYBRID, backend=backend)
    alone = retrieve("curing concrete in cold weather", kb, HYBRID, backend=backend)

    assert threads[0] == threading.get_ident() and threads[1] != threading.get_ident()
    assert _ranked(while_busy) == _ranked(alone)


@postgresql_only
def test_inside_a_transaction_both_legs_run_on_its_connection(kb, backend, monkeypatch):
    from knowledge import pg_search

    assert connection.in_atomic_block
    monkeypatch.setattr(pg_search, "_SIDE_LEGS", SideConnections(1))
    threads = _vector_threads(backend, monkeypatch)
    document = ingest(kb, "curing.md", CURING_MD)  # not committed: another connection would not see it

    result = retrieve("curing concrete in cold weather", kb, HYBRID, backend=backend)

    assert threads == [threading.get_ident()]
    assert {c.doc_id for c in result.legs["vector"]} == {document.pk}


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_side_connection_the_server_dropped_is_replaced_and_loses_no_query(kb, docs, backend, monkeypatch):
    from knowledge import pg_search

    monkeypatch.setattr(pg_search, "_SIDE_LEGS", side := SideConnections(1))
    first = retrieve("curing concrete in cold weather", kb, HYBRID, backend=backend)
    side_pid = side.try_submit(_backend_pid).result(timeout=10)
    with connection.cursor() as cursor:  # as a database restart or an idle timeout would
        cursor.execute("SELECT pg_terminate_backend(%s)", [side_pid])
    threads = _vector_threads(backend, monkeypatch)

    after_the_drop = retrieve("curing concrete in cold weather", kb, HYBRID, backend=backend)
    again = retrieve("curing concrete in cold weather", kb, HYBRID, backend=backend)

    assert _ranked(after_the_drop) == _ranked(first) == _ranked(again)
    assert threading.get_ident() in threads[:2]  # the dropped leg ran once more here
    assert threads[-1] != threading.get_ident()  # and the next query's on a new side connection


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _assert_hnsw_scan_restores_settings(kb, backend, monkeypatch) -> None:
    from knowledge import pg_search

    monkeypatch.setattr(pg_search, "_HNSW_READ_COST", 0)  # the HNSW index even for three documents
    monkeypatch.setattr(pg_search, "vector_sql", _recording(pg_search.vector_sql, calls := []))
    names = ("enable_sort", "hnsw.ef_search", "hnsw.iterative_scan")
    before = _settings(names)

    hits = backend.vector(kb, query_vector("curing concrete"), level=Chunk.CHILD, top_k=3)

    assert calls and all(kwargs["is_ann"] for kwargs in calls)
    assert len(hits) == 3
    assert _settings(names) == before and before[0] == "on"


def _settings(names: Sequence[str]) -> tuple[str, ...]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join("current_setting(%s)" for _ in names), list(names))
        return cursor.fetchone()


@postgresql_only
def test_it_can_use_the_hnsw_index(kb, docs):
    from knowledge import pg_search

    query = pg_search.to_pgvector_text(query_vector("concrete"))
    common = {"kb": kb.pk, "level": Chunk.CHILD, "fetch": 20, "only": [1], "query": query}
    # With the settings the backend scans HNSW with, only a matching index avoids a sort.
    vector_plan = _plan(pg_search.vector_sql(1024, is_ann=True), common, as_ann=True)
    exact_plan = _plan(pg_search.vector_sql(1024, is_ann=False, restricted=True), common, as_ann=True)

    assert "Index Scan using knowledge_searchentry_hnsw_1024" in vector_plan
    assert "hnsw" not in exact_plan


def _plan(sql: str, params: dict, *, without: Sequence[str] = (), as_ann: bool = False) -> str:
    """EXPLAIN with sequential scans priced out, as on a table too big to read whole."""
    from knowledge import pg_search

    savepoint = transaction.savepoint()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            if as_ann:
                cursor.execute(pg_search._hnsw_settings(params["fetch"]))
            for index in without:
                cursor.execute(f'DROP INDEX "{index}"')
            cursor.execute("EXPLAIN " + sql, params)
            return "\n".join(row[0] for row in cursor.fetchall())
    finally:
        transaction.savepoint_rollback(savepoint)


def _kb_indexes() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'knowledge_searchentry' "
            "AND indexdef LIKE '%%btree (kb_id%%'"
        )
        return [name for (name,) in cursor.fetchall()]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_sharded_vector_scan_gives_the_single_scan_scores(settings, threads):
    from knowledge.vector_rows import similarities

    settings.VECTOR_SCAN_THREADS, settings.VECTOR_SCAN_PARALLEL_ROWS = threads, 10
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((1001, 16)).astype(np.float32)
    query = rng.standard_normal(16).astype(np.float32)

    np.testing.assert_allclose(similarities(vectors, query), vectors @ query, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(similarities(vectors[:5], query), vectors[:5] @ query, rtol=1e-5, atol=1e-5)


def _postings(entry_id: int) -> dict[str, tuple[int, int]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT term, tf, dl FROM knowledge_searchposting WHERE entry_id = %s", [entry_id])
        return {term: (tf, dl) for term, tf, dl in cursor.fetchall()}


def _df(kb, term: str, level: int = Chunk.CHILD) -> int:
    """The entries holding term: the length of its postings, all the keyword leg reads of it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM knowledge_searchposting WHERE kb_id = %s AND level = %s AND term = %s",
            [kb.pk, level, term],
        )
        return int(cursor.fetchone()[0])


@postgresql_only
def test_the_database_keeps_each_entrys_postings(kb, docs):
    entry = SearchEntry.objects.filter(chunk__document=docs["curing"], level=Chunk.CHILD).exclude(tokens="").first()
    tokens = entry.tokens.split()
    term = tokens[0]
    holding = SearchEntry.objects.filter(kb=kb, level=Chunk.CHILD)
    expected_df = sum(term in other.split() for other in holding.values_list("tokens", flat=True))

    assert _postings(entry.pk) == {token: (tokens.count(token), len(tokens)) for token in set(tokens)}
    assert _df(kb, term) == expected_df

    SearchEntry.objects.filter(pk=entry.pk).update(tokens="brand new brand")
    assert _postings(entry.pk) == {"brand": (2, 3), "new": (1, 3)}
    assert _df(kb, term) == expected_df - 1 and _df(kb, "brand") == 1

    # The vector alone changes nothing: no posting is dropped and written again.
    with connection.cursor() as cursor:
        cursor.execute("SELECT array_agg(ctid::text ORDER BY term) FROM knowledge_searchposting WHERE entry_id = %s",
                       [entry.pk])
        where = cursor.fetchone()[0]
        SearchEntry.objects.filter(pk=entry.pk).update(embedding=entry.embedding)
        cursor.execute("SELECT array_agg(ctid::text ORDER BY term) FROM knowledge_searchposting WHERE entry_id = %s",
                       [entry.pk])
        assert cursor.fetchone()[0] == where
    assert _postings(entry.pk) == {"brand": (2, 3), "new": (1, 3)}

    delete_document(docs["curing"])
    assert _postings(entry.pk) == {}
    remaining = SearchEntry.objects.filter(kb=kb, level=Chunk.CHILD).values_list("tokens", flat=True)
    assert _df(kb, term) == sum(term in other.split() for other in remaining)


@postgresql_only
def test_deleting_a_kb_leaves_none_of_its_postings(kb, docs):
    assert _df(kb, analyze("concrete")[0]) > 0

    KnowledgeBase.objects.filter(pk=kb.pk).delete()

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM knowledge_searchposting WHERE kb_id = %s", [kb.pk])
        assert cursor.fetchone()[0] == 0


def _counted(kb, level: int = Chunk.CHILD) -> tuple[int, int]:
    """(entries, tokens) of the KB level under its embedder, counted from the entries themselves."""
    tokens = SearchEntry.objects.filter(kb=kb, level=level, embedder=KnowledgeBase.objects.get(pk=kb.pk).embedder)
    lengths = [len(text.split()) for text in tokens.values_list("tokens", flat=True)]
    return len(lengths), sum(lengths)


def _ledger(kb, level: int = Chunk.CHILD) -> tuple[int, int, int]:
    """(entries, tokens, rows) of the KB level in the stats ledger."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(entries), 0), coalesce(sum(tokens), 0), count(*) FROM knowledge_searchstats"
            " WHERE kb_id = %s AND level = %s AND embedder = (SELECT embedder FROM knowledge_knowledgebase WHERE id = %s)",
            [kb.pk, level, kb.pk],
        )
        return tuple(int(value) for value in cursor.fetchone())


@postgresql_only
def test_the_database_keeps_each_levels_entry_and_token_counts(kb, docs, backend):
    assert _ledger(kb)[:2] == _counted(kb) and _counted(kb)[0] > 0
    stats = backend.corpus_stats(kb, Chunk.CHILD)
    assert (stats.rows, stats.mean_length) == (_counted(kb)[0], _counted(kb)[1] / _counted(kb)[0])

    entry = SearchEntry.objects.filter(kb=kb, level=Chunk.CHILD).exclude(tokens="").first()
    SearchEntry.objects.filter(pk=entry.pk).update(tokens="brand new brand")
    assert _ledger(kb)[:2] == _counted(kb)
    delete_document(docs["curing"])
    assert _ledger(kb)[:2] == _counted(kb)

    rows_before = _ledger(kb)[2]
    KnowledgeBase.objects.filter(pk=kb.pk).update(content_version=15)
    kb.bump_content_version()  # the 16th version folds the ledger
    assert _ledger(kb)[2] == 1 < rows_before and _ledger(kb)[:2] == _counted(kb)

    KnowledgeBase.objects.filter(pk=kb.pk).delete()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM knowledge_searchstats WHERE kb_id = %s", [kb.pk])
        assert cursor.fetchone()[0] == 0


def test_a_kb_mentions_a_name_its_live_chunks_or_document_names_hold(kb, docs):
    other = KnowledgeBase.objects.create(slug="other-kb", name="Other", owner=kb.owner)
    ingest(other, "zeppelin.md", "# Airships\n\nThe Zeppelin fleet used hydrogen.")
    weld = child_in_section(docs["welding"], "1.1")
    Chunk.objects.create(kb=kb, document=docs["welding"], version=2, level=Chunk.CHILD, index=weld.index,
                         text="a pending version names Bessemer", sha256="v2")

    assert search.kb_mentions(kb, "portland") and search.kb_mentions(kb, "GB 50204")
    assert search.kb_mentions(kb, "welding.md")  # the document's name
    assert not search.kb_mentions(kb, "Zeppelin")  # another KB's
    assert not search.kb_mentions(kb, "Bessemer")  # a version not yet live
