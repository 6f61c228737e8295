from __future__ import annotations

import numpy as np
import pytest
from django.core.management import call_command

import agentic_rag.embeddings as embeddings
from knowledge.editing import replace_section
from knowledge.indexing import embed_unique, index_text, reembed_knowledge_base
from knowledge.models import Chunk, KnowledgeBase, SearchEntry
from knowledge.retrieval import RetrievalParams, retrieve
from knowledge.tasks import ingest_document, resume_embedding_upgrades

from .factories import GUIDE_MD
from .test_ingest import _ingest, _submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_hashing(monkeypatch):
    monkeypatch.setitem(embeddings._BUILDERS, "hashing-512", lambda options: embeddings.HashingEmbedder(512))
    embeddings.clear_embedder_cache()
    yield embeddings.get_embedder("hashing-512")
    embeddings.clear_embedder_cache()


def test_it_records_the_embedder_and_indexes_every_chunk(kb):
    _ingest(kb, "guide.md", GUIDE_MD.encode())

    kb.refresh_from_db()
    assert kb.embedder == "hashing-1024"
    entries = SearchEntry.objects.filter(kb=kb)
    assert entries.count() == kb.chunks.count()
    assert {e.dims for e in entries} == {1024} and all(e.tokens for e in entries)


def test_it_reembeds_incrementally_and_switches_the_kb(kb, small_hashing):
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    seen = []

    first = reembed_knowledge_base(kb, small_hashing, batch_size=2, on_batch=lambda done, total: seen.append((done, total)))
    again = reembed_knowledge_base(kb, small_hashing)

    kb.refresh_from_db()
    assert first == kb.chunks.count() and again == 0
    assert seen[-1] == (first, first)
    assert kb.embedder == "hashing-512"
    assert set(SearchEntry.objects.filter(kb=kb).values_list("embedder", flat=True)) == {"hashing-512"}
    assert retrieve("parsers Markdown", kb, RetrievalParams(mode="vector")).candidates


def test_it_upgrades_the_kb_in_the_background_after_ingestion(kb, small_hashing, settings):
    settings.EMBEDDER_UPGRADE = "hashing-512"
    outcome, queued = _submit(kb, "guide.md", GUIDE_MD.encode())

    ingest_document.apply(args=[queued[0]])

    kb.refresh_from_db()
    assert kb.embedder == "hashing-512"
    assert SearchEntry.objects.filter(kb=kb, embedder="hashing-512").count() == kb.chunks.count()


def test_reembed_command_switches_the_kb(kb, small_hashing, capsys):
    _ingest(kb, "guide.md", GUIDE_MD.encode())

    call_command("reembed", "--kb", kb.slug, "--embedder", "hashing-512")

    assert KnowledgeBase.objects.get(pk=kb.pk).embedder == "hashing-512"
    assert "now searches with hashing-512" in capsys.readouterr().out


class CountingEmbedder:
    """Wraps an embedder and remembers every text it was asked to embed."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.embedded = inner, inner.name, []

    def embed_passages(self, texts):
        self.embedded.extend(texts)
        return self.inner.embed_passages(texts)


def test_it_embeds_each_distinct_text_once(small_hashing):
    counting = CountingEmbedder(small_hashing)
    texts = ["one paragraph", "another", "one paragraph"]

    vectors = embed_unique(counting, texts)

    assert counting.embedded == ["one paragraph", "another"]
    assert vectors.shape == (3, 512)
    assert (vectors[0] == vectors[2]).all() and not (vectors[0] == vectors[1]).all()


def test_a_one_paragraph_document_costs_one_embedding(kb, small_hashing, monkeypatch):
    counting = CountingEmbedder(small_hashing)
    monkeypatch.setattr("knowledge.indexing.embedder_for", lambda kb: counting)

    _ingest(kb, "note.txt", b"A single paragraph about wind tunnels and boundary layers.")

    entries = SearchEntry.objects.filter(kb=kb)
    assert entries.count() == 2 and len(counting.embedded) == 1


def test_a_new_version_embeds_only_the_chunks_that_changed(kb, monkeypatch):
    counting = CountingEmbedder(embeddings.get_embedder("hashing-1024"))
    monkeypatch.setattr("knowledge.indexing.embedder_for", lambda kb: counting)
    document = _ingest(kb, "guide.md", GUIDE_MD.encode()).document
    before = _live_entries(document)
    counting.embedded.clear()
    edited = replace_section("guide.md", GUIDE_MD.encode(), 1, "Parsers also read zeppelin manifests.")[0]

    _ingest(kb, "guide.md", edited)

    after = _live_entries(document)
    reused = after.keys() & before.keys()
    assert counting.embedded and all("zeppelin" in text for text in counting.embedded)
    # Each changed text was embedded once, the changed section's parent and child sharing theirs.
    assert len(reused) >= 2 and {text for _, text in after.keys() - reused} == set(counting.embedded)
    assert len(counting.embedded) == len(set(counting.embedded)) < len(after.keys() - reused)
    for key in reused:
        assert np.array_equal(after[key][0], before[key][0]) and after[key][1] == before[key][1]
    job = document.jobs.get(version=2)
    assert (job.embedded_chunks, job.reused_chunks) == (len(after) - len(reused), len(reused))


def _live_entries(document) -> dict[tuple[int, str], tuple[np.ndarray, str]]:
    entries = SearchEntry.objects.filter(chunk__in=Chunk.objects.live().filter(document=document))
    return {(e.level, index_text(e.chunk)): (e.embedding, e.tokens) for e in entries.select_related("chunk")}


def test_it_resumes_upgrades_of_kbs_filled_outside_the_server(kb, small_hashing, settings):
    _ingest(kb, "guide.md", GUIDE_MD.encode())  # as a management command would: no upgrade yet
    settings.EMBEDDER_UPGRADE = "hashing-512"
    empty = KnowledgeBase.objects.create(slug="empty", name="Empty", owner=kb.owner)

    started = resume_embedding_upgrades.apply().get()

    assert started == [kb.pk]
    kb.refresh_from_db()
    assert kb.embedder == "hashing-512" and KnowledgeBase.objects.get(pk=empty.pk).embedder == ""
    assert resume_embedding_upgrades.apply().get() == []  # nothing left to do


def test_the_server_resumes_upgrades_once_on_its_first_request(settings, monkeypatch):
    import asyncio

    from agentic_rag import asgi

    calls = []
    monkeypatch.setattr(asgi, "dispatch", lambda task, *args: calls.append(task.name))
    monkeypatch.setattr(asgi, "start_sweeper", lambda sweep, interval_s: calls.append(sweep.__name__))
    monkeypatch.setattr(asgi, "_started", False)
    settings.BACKGROUND_TASKS = "thread"

    asyncio.run(asgi.on_first_request())
    asyncio.run(asgi.on_first_request())

    assert calls == ["knowledge.tasks.resume_embedding_upgrades", "sweep_stalled_ingestions"]


def test_a_broker_that_is_down_does_not_fail_the_first_request(settings, monkeypatch, caplog):
    import asyncio

    from agentic_rag import asgi

    def broker_down(task, *args):
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(asgi, "dispatch", broker_down)
    monkeypatch.setattr(asgi, "start_sweeper", lambda sweep, interval_s: None)
    monkeypatch.setattr(asgi, "_started", False)
    settings.BACKGROUND_TASKS = "celery"

    asyncio.run(asgi.on_first_request())

    assert "could not resume embedding upgrades" in caplog.text


def test_a_titled_section_of_one_child_costs_one_embedding_even_across_batches(kb, small_hashing):
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    chunks = list(Chunk.objects.filter(kb=kb))
    texts = [index_text(chunk) for chunk in chunks]
    counting = CountingEmbedder(small_hashing)

    reembed_knowledge_base(kb, counting, batch_size=1)  # a parent and its child never share a batch

    assert any(chunk.level == Chunk.CHILD and chunk.section_title for chunk in chunks)
    assert len(set(texts)) < len(texts)  # single-child sections: the child's text is its parent's
    assert sorted(counting.embedded) == sorted(set(texts))
    assert SearchEntry.objects.filter(kb=kb, embedder=counting.name).count() == len(chunks)
