"""An upload racing a move to another embedder ends under the KB's embedder, found by search."""

from __future__ import annotations

import threading
import time
from functools import partial

import pytest
from django.db import connection

import agentic_rag.embeddings as embeddings
import knowledge.indexing as indexing
from knowledge.indexing import _entries, index_text, reembed_knowledge_base
from knowledge.ingest import Stage, pipeline_stages, run_ingestion
from knowledge.models import Chunk, Document, DocumentStatus, SearchEntry
from knowledge.progress import BackgroundIndexing, background_indexing, publish_background_indexing
from knowledge.retrieval import RetrievalParams, retrieve
from knowledge.tasks import resume_embedding_upgrades, upgrade_embeddings

from .factories import GUIDE_MD
from .test_ingest import _ingest, _submit

NOTE = "Formwork inspection happens before every concrete pour on the viaduct."
# A note long enough for several chunks: more than the batch the tests give the upgrade.
LONG_NOTE = "\n\n".join(
    f"# {i} Pour {i}\n\n{NOTE} Pour {i} uses bay {i} of the viaduct deck." for i in range(1, 5)
)


@pytest.fixture
def small_hashing(monkeypatch):
    monkeypatch.setitem(embeddings._BUILDERS, "hashing-512", lambda options: embeddings.HashingEmbedder(512))
    embeddings.clear_embedder_cache()
    yield embeddings.get_embedder("hashing-512")
    embeddings.clear_embedder_cache()


def _ingest_with_switch(kb, embedder, *, before: str) -> Document:
    """Ingest NOTE; the KB switches to `embedder` just before the stage named `before`."""
    _, queued = _submit(kb, "note.txt", NOTE.encode())
    switch = Stage("switch", "", lambda run: reembed_knowledge_base(kb, embedder))
    stages = []
    for stage in pipeline_stages():
        if stage.name == before:
            stages.append(Stage("switch", stage.status, switch.run))
        stages.append(stage)
    run_ingestion(queued[0], stages=stages)
    return Document.objects.get(pk=queued[0])


def _assert_searchable_under(kb, document, embedder_name: str) -> None:
    kb.refresh_from_db()
    assert kb.embedder == embedder_name
    chunks = Chunk.objects.live().filter(document=document)
    entries = SearchEntry.objects.filter(chunk__in=chunks)
    assert set(entries.values_list("embedder", flat=True)) == {embedder_name}
    assert entries.count() == chunks.count() > 0
    dims = embeddings.get_embedder(embedder_name).dims
    assert {(entry.dims, len(entry.embedding)) for entry in entries} == {(dims, dims)}
    hits = retrieve("formwork inspection viaduct", kb, RetrievalParams(mode="vector", gate=None)).candidates
    assert document.pk in [c.doc_id for c in hits[:3]]


@pytest.mark.django_db
@pytest.mark.parametrize("before", ["parse", "embed", "index"])
def test_an_upload_racing_the_switch_is_embedded_with_the_kbs_embedder(kb, small_hashing, before):
    _ingest(kb, "guide.md", GUIDE_MD.encode())  # the KB starts on hashing-1024

    document = _ingest_with_switch(kb, small_hashing, before=before)

    assert document.status == DocumentStatus.READY, document.error
    _assert_searchable_under(kb, document, "hashing-512")


def _closing(work):
    """work, closing its thread's database connection after (the test database is dropped later)."""

    def run(*args, **kwargs):
        try:
            work(*args, **kwargs)
        finally:
            connection.close()

    return run


@pytest.mark.django_db(transaction=True)
def test_uploads_in_threads_during_an_upgrade_all_end_under_the_new_embedder(kb, small_hashing, settings):
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    submitted = [_submit(kb, f"note-{i}.txt", f"{NOTE} Batch {i}.".encode())[1][0] for i in range(4)]
    upgrade = threading.Thread(target=_closing(reembed_knowledge_base), args=(kb, small_hashing), kwargs={"batch_size": 2})
    uploads = [threading.Thread(target=_closing(run_ingestion), args=(document_id,)) for document_id in submitted]

    for thread in [upgrade, *uploads]:
        thread.start()
    for thread in [upgrade, *uploads]:
        thread.join(timeout=60)

    kb.refresh_from_db()
    assert kb.embedder == "hashing-512"
    for document_id in submitted:
        document = Document.objects.get(pk=document_id)
        assert document.status == DocumentStatus.READY, document.error
        live = Chunk.objects.live().filter(document=document)
        assert set(SearchEntry.objects.filter(chunk__in=live).values_list("embedder", flat=True)) == {"hashing-512"}


class RecordingEmbedder(embeddings.HashingEmbedder):
    """A hashing embedder that notes each call: its name, its texts, whether in a transaction."""

    def __init__(self, dims: int, calls: list) -> None:
        super().__init__(dims)
        self._calls = calls

    def embed_passages(self, texts):
        self._calls.append((self.name, len(texts), connection.in_atomic_block))
        return super().embed_passages(texts)


@pytest.fixture
def recorded(monkeypatch):
    """Both test embedders, recording their calls; yields (the upgrade's embedder, the calls)."""
    calls: list[tuple[str, int, bool]] = []
    for dims in (1024, 512):
        monkeypatch.setitem(embeddings._BUILDERS, f"hashing-{dims}", lambda options, d=dims: RecordingEmbedder(d, calls))
    embeddings.clear_embedder_cache()
    yield embeddings.get_embedder("hashing-512"), calls
    embeddings.clear_embedder_cache()


def _embedded_in_a_transaction(calls) -> list[int]:
    return [count for _, count, in_transaction in calls if in_transaction]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("before", ["parse", "embed", "index"])
def test_an_upload_racing_the_switch_is_never_embedded_while_the_kb_is_locked(kb, recorded, before):
    small, calls = recorded
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    calls.clear()

    document = _ingest_with_switch(kb, small, before=before)

    assert document.status == DocumentStatus.READY, document.error
    _assert_searchable_under(kb, document, "hashing-512")
    # No model runs while the KB (under SQLite: the whole database) is locked for writing:
    # before "index" the switch's scan embedded the stored chunks and the write found them
    # done; a switch before "embed" is seen there, so the old embedder is not run at all.
    assert _embedded_in_a_transaction(calls) == []
    if before != "index":
        assert {name for name, _, _ in calls} == {"hashing-512"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("batch_size", [2, 64])
def test_an_upload_finished_between_the_scan_and_the_switch_is_caught_up(kb, recorded, monkeypatch, batch_size):
    small, calls = recorded
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    switch, uploaded = indexing._switch, []

    def upload_then_switch(*args, **kwargs):
        if not uploaded:  # the upload lands after the scan found nothing left, before the lock
            uploaded.append(_ingest(kb, "note.md", LONG_NOTE.encode()).document)
            calls.clear()
        return switch(*args, **kwargs)

    monkeypatch.setattr(indexing, "_switch", upload_then_switch)

    reembed_knowledge_base(kb, small, batch_size=batch_size)

    document = Document.objects.get(pk=uploaded[0].pk)
    assert document.status == DocumentStatus.READY and document.chunk_count > 2
    _assert_searchable_under(kb, document, "hashing-512")
    # Under the lock the switch embeds at most one batch; more goes back to the scan.
    assert all(count <= batch_size for count in _embedded_in_a_transaction(calls))


@pytest.mark.django_db(transaction=True)
def test_a_switch_waiting_on_an_open_indexing_transaction_catches_its_document_up(kb, small_hashing, monkeypatch):
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    scanned, writing, seen_during_write = threading.Event(), threading.Event(), []
    switch = indexing._switch

    def switch_once_the_write_began(*args, **kwargs):
        scanned.set()
        writing.wait(timeout=30)
        return switch(*args, **kwargs)

    def write_while_the_switch_waits(chunks, vectors, embedder_name, **options):
        if threading.current_thread() is threading.main_thread() and not writing.is_set():
            writing.set()  # this ingestion's transaction is open and holds the KB's lock
            time.sleep(0.5)  # long enough for the switch to be waiting on that lock
            seen_during_write.append((embedder_name, upgrade.is_alive()))
        return _entries(chunks, vectors, embedder_name, **options)

    monkeypatch.setattr(indexing, "_switch", switch_once_the_write_began)
    monkeypatch.setattr(indexing, "_entries", write_while_the_switch_waits)
    upgrade = threading.Thread(target=_closing(reembed_knowledge_base), args=(kb, small_hashing))
    upgrade.start()
    assert scanned.wait(timeout=30)  # the guide is embedded with hashing-512; the KB not yet switched

    outcome = _ingest(kb, "note.txt", NOTE.encode())
    upgrade.join(timeout=60)

    assert seen_during_write == [("hashing-1024", True)]  # written under the old embedder, switch waiting
    _assert_searchable_under(kb, Document.objects.get(pk=outcome.document.pk), "hashing-512")


@pytest.mark.django_db
def test_the_server_start_reembeds_a_document_left_under_another_embedder(kb, small_hashing, settings):
    settings.EMBEDDER_UPGRADE = "hashing-512"
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    reembed_knowledge_base(kb, small_hashing)
    # What the bug left: a document written under hashing-1024 after the KB switched.
    document = _ingest(kb, "note.txt", NOTE.encode()).document
    chunks = list(Chunk.objects.filter(document=document))
    SearchEntry.objects.filter(chunk__in=chunks).delete()
    stale = embeddings.HashingEmbedder(1024).embed_passages([index_text(chunk) for chunk in chunks])
    SearchEntry.objects.bulk_create(_entries(chunks, stale, "hashing-1024"))
    kb.bump_content_version()

    assert resume_embedding_upgrades.apply().get() == [kb.pk]

    _assert_searchable_under(kb, document, "hashing-512")
    assert resume_embedding_upgrades.apply().get() == []


@pytest.mark.django_db
def test_the_upgrade_task_reports_its_progress_and_clears_it(kb, small_hashing, settings, monkeypatch):
    settings.EMBEDDER_UPGRADE = "hashing-512"
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    seen = []
    monkeypatch.setattr("knowledge.tasks.publish_background_indexing", lambda state, kb_id: seen.append(state))

    upgrade_embeddings.apply(args=[kb.pk])

    progress = [state for state in seen if state is not None]
    assert progress and all(state.embedder == "hashing-512" for state in progress)
    assert progress[0].step == "loading" and all(state.step == "embedding" for state in progress[1:])
    percents = [state.percent for state in progress[1:] if state.percent is not None]
    assert percents == sorted(percents) and percents[-1] == 100 and seen[-1] is None


@pytest.mark.django_db
def test_the_upgrade_shows_no_percentage_while_documents_are_still_being_ingested(kb, small_hashing, settings, monkeypatch):
    settings.EMBEDDER_UPGRADE = "hashing-512"
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    kb.documents.create(name="late.md", status=DocumentStatus.CHUNKING)  # its chunks will join the run later
    seen = []
    monkeypatch.setattr("knowledge.tasks.publish_background_indexing", lambda state, kb_id: seen.append(state))

    upgrade_embeddings.apply(args=[kb.pk])

    embedding = [state for state in seen if state is not None and state.step == "embedding"]
    assert embedding and all(state.percent is None and not state.total_final for state in embedding)


@pytest.mark.django_db
def test_an_upgrade_whose_worker_died_frees_the_kb_when_its_lock_lapses(kb, small_hashing, settings, monkeypatch):
    from django.core.cache import cache

    settings.EMBEDDER_UPGRADE = "hashing-512"
    settings.UPGRADE_LOCK_S = 1
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    cache.add(f"upgrade-embeddings-{kb.pk}", 1, timeout=settings.UPGRADE_LOCK_S)  # the dead worker's

    assert upgrade_embeddings.apply(args=[kb.pk]).get() == 0  # taken: a live upgrade may hold it
    time.sleep(1.1)
    assert upgrade_embeddings.apply(args=[kb.pk]).get() > 0  # the broker's next delivery takes over
    kb.refresh_from_db()
    assert kb.embedder == "hashing-512"


@pytest.mark.django_db
def test_a_running_upgrade_keeps_its_lock_past_the_lock_time(kb, small_hashing, settings, monkeypatch):
    from django.core.cache import cache

    settings.EMBEDDER_UPGRADE = "hashing-512"
    settings.UPGRADE_LOCK_S = 1
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    lock = f"upgrade-embeddings-{kb.pk}"
    held = []

    def slow_batches(kb, embedder, *, on_batch):
        for done in range(1, 5):  # 2 s of batches against a 1 s lock
            time.sleep(0.5)
            on_batch(done, 4)
            held.append(cache.get(lock) is not None)
        return 4

    monkeypatch.setattr("knowledge.tasks.reembed_knowledge_base", slow_batches)

    assert upgrade_embeddings.apply(args=[kb.pk]).get() == 4
    assert held == [True, True, True, True] and cache.get(lock) is None


def _page_text(client, kb) -> str:
    """The KB page with its whitespace collapsed, as a reader sees it."""
    return " ".join(client.get(kb.get_absolute_url()).content.decode().split())


@pytest.mark.django_db
def test_the_kb_page_shows_background_indexing_only_while_it_runs(alice_client, kb):
    assert "Indexing in the background" not in _page_text(alice_client, kb)

    publish_background_indexing(BackgroundIndexing(kb.pk, "e5-small", 0, 0, step="loading"), kb.pk)
    assert "Indexing in the background with e5-small, step 1 of 2: loading the model." in _page_text(alice_client, kb)

    publish_background_indexing(BackgroundIndexing(kb.pk, "e5-small", 30, 120, total_final=False), kb.pk)
    page = _page_text(alice_client, kb)
    assert "step 2 of 2: 30 chunks embedded; documents are still being ingested" in page
    assert "%" not in page.split("step 2 of 2")[1].split("Search keeps")[0]  # no percentage of a growing total

    publish_background_indexing(BackgroundIndexing(kb.pk, "e5-small", 30, 120), kb.pk)
    assert "Indexing in the background with e5-small, step 2 of 2: 25% (30 of 120 chunks)." in _page_text(alice_client, kb)

    publish_background_indexing(None, kb.pk)
    assert background_indexing(kb.pk) is None
    assert "Indexing in the background" not in _page_text(alice_client, kb)


@pytest.mark.django_db
def test_the_kb_page_shows_a_running_upgrade_with_its_progress(alice_client, kb, small_hashing, settings, monkeypatch):
    settings.EMBEDDER_UPGRADE = "hashing-512"
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    pages = []
    embed = small_hashing.embed_passages

    def embed_and_look(texts):
        pages.append(_page_text(alice_client, kb))
        return embed(texts)

    monkeypatch.setattr(small_hashing, "embed_passages", embed_and_look)
    # Small batches, so the page is seen part-way through.
    monkeypatch.setattr("knowledge.tasks.reembed_knowledge_base", partial(reembed_knowledge_base, batch_size=2))
    total = Chunk.objects.filter(kb=kb).count()

    upgrade_embeddings.apply(args=[kb.pk])

    assert len(pages) > 1
    assert f"Indexing in the background with hashing-512, step 2 of 2: 0% (0 of {total} chunks)." in pages[0]
    assert f"Indexing in the background with hashing-512, step 2 of 2: {round(200 / total)}% (2 of {total} chunks)." in pages[1]
    assert "Indexing in the background" not in _page_text(alice_client, kb)


@pytest.mark.django_db(transaction=True)
async def test_the_kb_socket_pushes_the_background_banner(kb, alice):
    from asgiref.sync import sync_to_async

    from .test_consumers import communicator, session_headers

    headers = await sync_to_async(session_headers)(alice)
    socket = communicator(headers, kb.slug)
    connected, _ = await socket.connect()
    assert connected
    await socket.receive_from()  # the table
    await socket.receive_from()  # the counts

    await sync_to_async(publish_background_indexing)(BackgroundIndexing(kb.pk, "e5-small", 1, 2), kb.pk)

    banner = await socket.receive_from()
    assert 'id="kb-background"' in banner and "50%" in banner and 'hx-swap-oob="true"' in banner
    await socket.disconnect()
