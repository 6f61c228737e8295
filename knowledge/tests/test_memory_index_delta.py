"""The embedded index takes a document's change in place: never a rebuild, the same answers as one."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from django.db import connection, transaction

from agentic_rag.embeddings import HashingEmbedder, get_embedder
from knowledge import ingest as ingest_module
from knowledge import memory_index, memory_snapshot, models
from knowledge.analysis import analyze
from knowledge.indexing import reembed_knowledge_base
from knowledge.ingest import delete_document
from knowledge.memory_index import MemoryBackend
from knowledge.memory_snapshot import UpdatePolicy
from knowledge.models import Chunk, ContentChange, Document, KnowledgeBase
from knowledge.retrieval import RetrievalParams, retrieve
from knowledge.tests.test_search_backends import ingest

pytestmark = pytest.mark.django_db

CURING_MD = """# 1 Concrete curing

Fresh concrete must be kept moist while it gains strength. Cover the slab with wet burlap.

## 1.1 Curing time

Keep ordinary Portland cement concrete moist for at least seven days. Slabs containing a
zeolite admixture need fourteen days of moist curing.

# 2 Inspection

Test cylinders are crushed at 28 days, following GB 50204-2015.
"""

WELDING_MD = """# 1 Steel welding

Welders must hold a valid certificate. Preheat thick plates before welding to avoid cracking.

## 1.1 Weld inspection

Ultrasonic testing checks full penetration welds for internal flaws, per GB 50661-2011.
"""

FORMWORK_MD = """# 1 Formwork

Formwork must be inspected before pouring concrete. Props stand on firm ground.

## 1.1 Striking

Strike the formwork of slabs only when the concrete reaches 75% of its design strength.
"""

COATING_MD = """# 1 Coating

Galvanized bolts resist corrosion in coastal sites. Paint the steel after blasting.

## 1.1 Inspection of coatings

Measure the dry film thickness of the coating at five points per member.
"""

QUERIES = ["curing concrete", "ultrasonic weld inspection", "galvanized coating", "formwork concrete strength",
           "zeolite", "inspection", "GB 50204"]


def run_now(job) -> None:
    job()


# Compaction would drop the dead rows a change leaves; most tests look at the change alone.
NEVER_COMPACT = UpdatePolicy(compact_dead_share=1.0, compact_segments=1_000_000)


@pytest.fixture
def builds(monkeypatch) -> list[int]:
    """The KB ids of every full build the backends start."""
    calls: list[int] = []
    build = memory_snapshot.build_snapshot

    def counting(kb, version):
        calls.append(kb.pk)
        return build(kb, version)

    monkeypatch.setattr(memory_index, "build_snapshot", counting)
    return calls


@pytest.fixture
def docs(kb) -> dict[str, Document]:
    return {"curing": ingest(kb, "curing.md", CURING_MD), "welding": ingest(kb, "welding.md", WELDING_MD)}


@pytest.fixture
def backend(kb, docs, builds) -> MemoryBackend:
    warm = MemoryBackend(policy=NEVER_COMPACT)
    warm.snapshot(kb)
    assert builds == [kb.pk]
    return warm


def ids(hits) -> list[int]:
    return [chunk_id for chunk_id, _ in hits]


def assert_same_hits(found, expected) -> None:
    assert ids(found) == ids(expected)
    np.testing.assert_allclose([s for _, s in found], [s for _, s in expected], rtol=1e-6)


def assert_serves_as_a_fresh_build(backend: MemoryBackend, kb: KnowledgeBase) -> None:
    """Every answer of the backend equals that of a backend that has just built the KB's index."""
    held = backend.snapshot(kb)
    reference = MemoryBackend()
    fresh = reference.snapshot(kb)
    assert held.version == fresh.version
    assert held.chunks == fresh.chunks
    assert (held.tags, held.chapters, held.by_position, held.by_document) == (
        fresh.tags, fresh.chapters, fresh.by_position, fresh.by_document)
    assert {chunk: level for chunk, (level, _) in held.rows.items()} == {
        chunk: level for chunk, (level, _) in fresh.rows.items()}
    live = sorted(fresh.chunks)
    some = live[::2]
    for text in QUERIES:
        vector = get_embedder("hashing-1024").embed_query(text)
        for level in (Chunk.PARENT, Chunk.CHILD):
            for only in (None, some):
                keyword = {"level": level, "top_k": 1000, "only": only}
                assert_same_hits(backend.keyword(kb, analyze(text), **keyword), reference.keyword(kb, analyze(text), **keyword))
                assert_same_hits(backend.vector(kb, vector, **keyword), reference.vector(kb, vector, **keyword))
        np.testing.assert_allclose(backend.cosines(kb, vector, live), reference.cosines(kb, vector, live), rtol=1e-6)
        assert backend.tagged(kb, text.split(), limit=100) == reference.tagged(kb, text.split(), limit=100)
    for chapter in fresh.chapters:
        assert backend.in_chapter(kb, *chapter) == reference.in_chapter(kb, *chapter)
    infos = list(fresh.chunks.values())
    assert backend.neighbours(kb, infos) == reference.neighbours(kb, infos)
    assert backend.size(kb)["chunks"] == len(live)


def live_ids(document: Document) -> set[int]:
    return set(Chunk.objects.live().filter(document=document).values_list("pk", flat=True))


# --- in place ----------------------------------------------------------------------------------


def test_it_adds_a_document_in_place(kb, backend, builds):
    coating = ingest(kb, "coating.md", COATING_MD)

    hits = backend.keyword(kb, analyze("galvanized"), level=Chunk.CHILD, top_k=5)

    assert builds == [kb.pk]  # the warm-up's build only
    assert hits and set(ids(hits)) <= live_ids(coating)
    assert backend.snapshot(kb).version[0] == KnowledgeBase.objects.get(pk=kb.pk).content_version
    assert_serves_as_a_fresh_build(backend, kb)


def test_it_replaces_a_documents_chunks_in_place(kb, docs, backend, builds):
    old = set(Chunk.objects.filter(document=docs["welding"]).values_list("pk", flat=True))

    welding = ingest(kb, "welding.md", WELDING_MD.replace("Ultrasonic testing", "Radiographic inspection"))

    assert backend.keyword(kb, analyze("ultrasonic"), level=Chunk.CHILD, top_k=5) == []
    assert set(ids(backend.keyword(kb, analyze("radiographic"), level=Chunk.CHILD, top_k=5))) <= live_ids(welding)
    assert builds == [kb.pk]
    assert welding.live_version == 2 and not old & set(backend.snapshot(kb).chunks)
    assert_serves_as_a_fresh_build(backend, kb)


def test_it_deletes_a_documents_chunks_in_place(kb, docs, backend, builds):
    gone = live_ids(docs["curing"])

    delete_document(docs["curing"])

    assert backend.keyword(kb, analyze("zeolite"), level=Chunk.CHILD, top_k=5) == []
    everything = backend.vector(kb, get_embedder().embed_query(CURING_MD), level=Chunk.CHILD, top_k=100)
    assert everything and not gone & set(ids(everything))
    assert backend.tagged(kb, ["GB 50204"], limit=10) == []
    assert builds == [kb.pk]
    assert backend.snapshot(kb).levels[Chunk.CHILD].bm25.n_dead > 0  # tombstones, not yet compacted
    assert_serves_as_a_fresh_build(backend, kb)


def test_it_takes_a_document_it_already_holds_again_harmlessly(kb, docs, backend, builds):
    # As when a build read a change that landed after the version it read: the change's
    # record then names rows the snapshot already has.
    kb.bump_content_version([docs["curing"].pk])

    snapshot = backend.snapshot(kb)

    assert builds == [kb.pk]
    assert snapshot.levels[Chunk.CHILD].bm25.n_dead == len(Chunk.objects.live().children().filter(document=docs["curing"]))
    assert_serves_as_a_fresh_build(backend, kb)


def test_it_catches_up_on_many_changes_at_once_as_another_process_would(kb, docs, backend, builds):
    elsewhere = MemoryBackend(policy=NEVER_COMPACT)
    elsewhere.snapshot(kb)  # a second process, warm at the same version

    ingest(kb, "coating.md", COATING_MD)
    ingest(kb, "formwork.md", FORMWORK_MD)
    ingest(kb, "curing.md", CURING_MD.replace("seven days", "ten days"))
    delete_document(docs["welding"])
    ingest(kb, "coating.md", COATING_MD + "\nZinc-rich primer goes on first.\n")

    assert_serves_as_a_fresh_build(elsewhere, kb)
    assert builds[:2] == [kb.pk, kb.pk]  # the two warm-ups; the fresh reference builds after
    assert_serves_as_a_fresh_build(backend, kb)


def test_a_document_published_after_a_later_stored_one_ranks_as_in_a_fresh_build(kb, backend, builds, monkeypatch):
    # Equal texts tie in both legs; the first stored is published last, so its rows follow
    # rows of higher chunk ids, and ties must still go to the lower id as in a fresh build.
    held_back = []
    with monkeypatch.context() as patch:
        patch.setattr(ingest_module, "_publish", lambda *args: held_back.append(args))
        # The held-back run keeps its claim on the document, as a run that has not ended does.
        patch.setattr(ingest_module, "release_claim", lambda *args: None)
        first = ingest(kb, "first.txt", "Galvanized bolts resist corrosion.\n")
    second = ingest(kb, "second.txt", "Galvanized bolts resist corrosion.\n\n")
    backend.snapshot(kb)
    ingest_module._publish(*held_back.pop())

    hits = backend.keyword(kb, analyze("galvanized bolts"), level=Chunk.CHILD, top_k=1)
    vector_hits = backend.vector(kb, get_embedder().embed_query("galvanized bolts"), level=Chunk.CHILD, top_k=1)

    first_child, second_child = (Chunk.objects.live().children().get(document=doc).pk for doc in (first, second))
    assert first_child < second_child
    assert ids(hits) == ids(vector_hits) == [first_child]
    child_rows = backend.snapshot(kb).levels[Chunk.CHILD].ids
    assert list(child_rows) != sorted(child_rows)  # the rows are out of id order
    assert builds == [kb.pk]
    assert_serves_as_a_fresh_build(backend, kb)


def test_it_empties_and_fills_a_kb_in_place_and_compacts_it_down_to_nothing(kb, docs, builds):
    backend = MemoryBackend(run_compaction=run_now)  # compacts once a fifth of the rows are dead
    backend.snapshot(kb)

    delete_document(docs["curing"])
    delete_document(docs["welding"])
    assert not backend.has_entries(kb) and backend.size(kb)["chunks"] == 0
    assert all(level.bm25.n_rows == 0 for level in backend.snapshot(kb).levels.values())
    assert backend.keyword(kb, analyze("zeolite"), level=Chunk.CHILD, top_k=5) == []
    coating = ingest(kb, "coating.md", COATING_MD)

    hits = backend.vector(kb, get_embedder().embed_query("galvanized bolts"), level=Chunk.CHILD, top_k=5)
    assert hits and set(ids(hits)) <= live_ids(coating)
    assert builds == [kb.pk] and backend.updates["compacted"] >= 1
    assert_serves_as_a_fresh_build(backend, kb)


@pytest.mark.parametrize(("chunk_ids", "gone", "kept"), [
    ([1, 2, 3, 5, 8], [2, 8], [1, 3, 5]),
    ([1, 2, 2, 3], [2], [1, 3]),  # a chunk tagged twice (as "GB" and "gb") is listed twice
    ([1, 3], [2, 4, 0], [1, 3]),
    ([4, 5, 6], [6, 5, 4], []),
    ([], [1], []),
])
def test_it_cuts_ids_out_of_an_ascending_list(chunk_ids, gone, kept):
    assert memory_snapshot._without_sorted(chunk_ids, gone) == kept


def test_a_snapshot_in_use_is_not_changed_by_a_later_change(kb, docs, backend):
    before = backend.snapshot(kb)
    level = before.levels[Chunk.CHILD]
    hits = level.bm25.search(analyze("ultrasonic"), 5)
    chunk_count, tag_lists = len(before.chunks), {tag: list(ids) for tag, ids in before.tags.items()}

    ingest(kb, "welding.md", WELDING_MD.replace("Ultrasonic testing", "Radiographic inspection"))
    delete_document(docs["curing"])
    after = backend.snapshot(kb)

    assert after is not before and after.version[0] == before.version[0] + 2
    assert level.bm25.search(analyze("ultrasonic"), 5) == hits and hits
    assert level.bm25.n_dead == 0 and len(before.chunks) == chunk_count
    assert before.tags == tag_lists


def test_compaction_drops_dead_rows_and_changes_no_answer(kb, docs, builds):
    backend = MemoryBackend(policy=UpdatePolicy(compact_segments=2, compact_dead_share=0.9), run_compaction=run_now)
    backend.snapshot(kb)
    ingest(kb, "coating.md", COATING_MD)
    ingest(kb, "welding.md", WELDING_MD.replace("Ultrasonic testing", "Radiographic inspection"))
    segments = [len(level.bm25.segments) for level in backend.snapshot(kb).levels.values()]
    assert segments == [2, 2]  # not yet past the limit

    ingest(kb, "formwork.md", FORMWORK_MD)
    backend.snapshot(kb)  # applies the change, then compacts (at once, with run_now)

    for level in backend.snapshot(kb).levels.values():
        assert len(level.bm25.segments) == 1 and len(level.vectors.blocks) == 1
        assert level.bm25.n_dead == 0 and level.bm25.n_rows == len(level.ids)
    assert builds == [kb.pk]
    assert_serves_as_a_fresh_build(backend, kb)


def test_compaction_runs_off_the_query_path_and_catches_up_with_later_changes(kb, docs, builds):
    jobs: list = []
    backend = MemoryBackend(policy=UpdatePolicy(compact_segments=1), run_compaction=jobs.append)
    backend.snapshot(kb)

    ingest(kb, "coating.md", COATING_MD)
    changed = backend.snapshot(kb)
    ingest(kb, "formwork.md", FORMWORK_MD)  # lands while the compaction waits for its thread
    newest = backend.snapshot(kb)

    assert len(jobs) == 1  # one compaction at a time per KB
    assert all(len(level.bm25.segments) == 2 for level in changed.levels.values())
    jobs.pop()()
    compact = backend.snapshot(kb)
    assert compact is not newest and compact.version == newest.version
    assert all(len(level.bm25.segments) == 1 for level in compact.levels.values())
    assert builds == [kb.pk]
    assert_serves_as_a_fresh_build(backend, kb)


# --- rebuilt instead ------------------------------------------------------------------------------


def test_it_rebuilds_when_the_kb_moves_to_another_embedder(kb, backend, builds):
    reembed_knowledge_base(kb, HashingEmbedder(512))

    snapshot = backend.snapshot(kb)

    assert builds == [kb.pk, kb.pk]
    assert snapshot.version[1] == "hashing-512" and snapshot.levels[Chunk.CHILD].vectors.dims == 512


def test_it_rebuilds_when_a_change_does_not_say_which_documents(kb, backend, builds):
    kb.bump_content_version()

    backend.snapshot(kb)

    assert builds == [kb.pk, kb.pk]


def test_it_rebuilds_when_the_change_log_no_longer_reaches_its_version(kb, backend, builds, monkeypatch):
    monkeypatch.setattr(models, "CONTENT_CHANGES_KEPT", 2)
    ingest(kb, "coating.md", COATING_MD)
    ingest(kb, "formwork.md", FORMWORK_MD)
    delete_document(Document.objects.get(kb=kb, name="welding.md"))
    # Three changes since the backend's version; the record of the first is gone.
    assert ContentChange.objects.filter(kb=kb).count() == 2

    backend.snapshot(kb)

    assert builds == [kb.pk, kb.pk]
    assert_serves_as_a_fresh_build(backend, kb)


def test_it_applies_as_many_changes_as_the_log_keeps(kb, backend, builds, monkeypatch):
    monkeypatch.setattr(models, "CONTENT_CHANGES_KEPT", 2)
    ingest(kb, "coating.md", COATING_MD)
    ingest(kb, "formwork.md", FORMWORK_MD)

    backend.snapshot(kb)

    assert builds == [kb.pk]
    assert_serves_as_a_fresh_build(backend, kb)


def test_it_rebuilds_when_a_version_has_no_record(kb, backend, builds):
    ingest(kb, "coating.md", COATING_MD)
    ContentChange.objects.filter(kb=kb).order_by("-version").first().delete()  # as a bump before 0009

    backend.snapshot(kb)

    assert builds == [kb.pk, kb.pk]


def test_it_rebuilds_a_change_larger_than_the_policy_allows(kb, docs, builds):
    backend = MemoryBackend(policy=UpdatePolicy(min_delta_rows=0, max_delta_share=0.2, compact_dead_share=1.0))
    rows = len(backend.snapshot(kb).chunks)
    small = "# Note\n\nGalvanized bolts.\n"
    large = "\n\n".join(f"# Part {n}\n\nParagraph {n} about galvanized steel and its coating." for n in range(8))

    ingest(kb, "small.md", small)
    backend.snapshot(kb)
    assert builds == [kb.pk]
    ingest(kb, "large.md", large)
    backend.snapshot(kb)

    assert Chunk.objects.live().filter(document__name="large.md").count() > 0.2 * rows
    assert builds == [kb.pk, kb.pk]
    assert_serves_as_a_fresh_build(backend, kb)


def test_it_rebuilds_when_the_version_moved_back(kb, backend, builds):
    ingest(kb, "coating.md", COATING_MD)
    backend.snapshot(kb)
    KnowledgeBase.objects.filter(pk=kb.pk).update(content_version=1)  # as a database restored from a backup

    assert backend.snapshot(kb).version[0] == 1
    assert builds == [kb.pk, kb.pk]


def test_a_thread_that_read_an_older_version_gets_the_newer_snapshot(kb, backend, builds, monkeypatch):
    ingest(kb, "coating.md", COATING_MD)
    newest = backend.snapshot(kb)
    reads = iter([(newest.version[0] - 1, newest.version[1])])  # read before the change landed
    real = memory_index.current_version
    monkeypatch.setattr(memory_index, "current_version", lambda kb_id: next(reads, None) or real(kb_id))

    assert backend.snapshot(kb) is newest
    assert builds == [kb.pk]


# --- the change log ----------------------------------------------------------------------------


def test_each_bump_records_the_documents_it_changed(kb, docs):
    start = KnowledgeBase.objects.get(pk=kb.pk).content_version
    welding = docs["welding"].pk

    coating = ingest(kb, "coating.md", COATING_MD)
    delete_document(docs["welding"])
    version = kb.bump_content_version()

    assert version == start + 3 == KnowledgeBase.objects.get(pk=kb.pk).content_version
    changes = ContentChange.objects.filter(kb=kb, version__gt=start).order_by("version")
    assert [change.documents for change in changes] == [[coating.pk], [welding], None]
    assert ContentChange.objects.documents_changed(kb.pk, since=start, until=start + 2) == {coating.pk, welding}
    assert ContentChange.objects.documents_changed(kb.pk, since=start, until=start + 3) is None
    assert ContentChange.objects.documents_changed(kb.pk, since=start + 3, until=start + 3) == set()
    assert ContentChange.objects.documents_changed(kb.pk, since=start + 3, until=start) is None


def test_a_bump_rolled_back_leaves_no_record(kb):
    with pytest.raises(RuntimeError), transaction.atomic():
        kb.bump_content_version([1])
        raise RuntimeError("the change failed")

    assert KnowledgeBase.objects.get(pk=kb.pk).content_version == 0
    assert not ContentChange.objects.filter(kb=kb).exists()


def test_the_change_log_keeps_a_bounded_number_of_records(kb, monkeypatch):
    monkeypatch.setattr(models, "CONTENT_CHANGES_KEPT", 3)

    for document in range(7):
        kb.bump_content_version([document])

    assert list(ContentChange.objects.filter(kb=kb).order_by("version").values_list("version", flat=True)) == [5, 6, 7]
    assert ContentChange.objects.documents_changed(kb.pk, since=4, until=7) == {4, 5, 6}
    assert ContentChange.objects.documents_changed(kb.pk, since=3, until=7) is None


# --- under load -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_no_query_pays_a_rebuild_while_documents_are_uploaded(kb, builds):
    docs = {"curing": ingest(kb, "curing.md", CURING_MD), "welding": ingest(kb, "welding.md", WELDING_MD)}
    backend = MemoryBackend()  # compactions on their background thread, as deployed
    params = RetrievalParams(mode="hybrid", rerank=False)
    retrieve("curing", kb, params, backend=backend)
    assert builds == [kb.pk]
    answered: list[tuple[int, list[int]]] = []  # (version served, chunk ids found)
    failures: list[BaseException] = []
    stop = threading.Event()

    def ask() -> None:
        try:
            while not stop.is_set():
                result = retrieve("galvanized coating zinc", kb, params, backend=backend)
                version = backend.snapshot(kb).version[0]
                answered.append((version, [candidate.chunk_id for candidate in result.candidates]))
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)
        finally:
            connection.close()

    asker = threading.Thread(target=ask)
    asker.start()
    try:
        coating = ingest(kb, "coating.md", COATING_MD)
        ingest(kb, "formwork.md", FORMWORK_MD)
        ingest(kb, "welding.md", WELDING_MD.replace("Ultrasonic testing", "Radiographic inspection"))
        delete_document(docs["curing"])
        coating = ingest(kb, "coating.md", COATING_MD + "\nZinc-rich primer goes on first.\n")
        final = KnowledgeBase.objects.get(pk=kb.pk).content_version
        deadline = time.monotonic() + 30
        while not any(version == final for version, _ in answered) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        asker.join(30)

    assert not failures
    versions = [version for version, _ in answered]
    assert versions == sorted(versions) and len(set(versions)) > 1  # queries ran while the changes landed
    assert versions[-1] == final
    assert builds == [kb.pk]  # none of them rebuilt the index
    assert set(answered[-1][1]) & live_ids(coating)
