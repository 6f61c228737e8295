"""An upload racing a move to another embedder ends under the KB's embedder, found by search."""

from __future__ import annotations

import pytest

import agentic_rag.embeddings as embeddings
from knowledge.indexing import reembed_knowledge_base
from knowledge.ingest import Stage, pipeline_stages, run_ingestion
from knowledge.models import Chunk, Document, DocumentStatus, SearchEntry
from knowledge.progress import BackgroundIndexing, background_indexing, publish_background_indexing
from knowledge.retrieval import RetrievalParams, retrieve
from knowledge.tasks import upgrade_embeddings

from .factories import GUIDE_MD
from .test_ingest import _ingest, _submit

NOTE = "Formwork inspection happens before every concrete pour on the viaduct."


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
    from django.db import connection

    def run(*args, **kwargs):
        try:
            work(*args, **kwargs)
        finally:
            connection.close()

    return run


@pytest.mark.django_db(transaction=True)
def test_uploads_in_threads_during_an_upgrade_all_end_under_the_new_embedder(kb, small_hashing, settings):
    import threading

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


@pytest.mark.django_db
def test_the_upgrade_task_reports_its_progress_and_clears_it(kb, small_hashing, settings, monkeypatch):
    settings.EMBEDDER_UPGRADE = "hashing-512"
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    seen = []
    monkeypatch.setattr("knowledge.tasks.publish_background_indexing", lambda state, kb_id: seen.append(state))

    upgrade_embeddings.apply(args=[kb.pk])

    progress = [state for state in seen if state is not None]
    assert progress and all(state.embedder == "hashing-512" for state in progress)
    assert progress[-1].percent == 100 and seen[-1] is None


@pytest.mark.django_db
def test_the_kb_page_shows_background_indexing_only_while_it_runs(alice_client, kb):
    page = alice_client.get(kb.get_absolute_url())
    assert b"Indexing in the background" not in page.content

    publish_background_indexing(BackgroundIndexing(kb.pk, "e5-small", 30, 120), kb.pk)
    page = alice_client.get(kb.get_absolute_url())
    assert b"Indexing in the background with e5-small: 25%" in page.content

    publish_background_indexing(None, kb.pk)
    assert background_indexing(kb.pk) is None
    assert b"Indexing in the background" not in alice_client.get(kb.get_absolute_url()).content


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
