from __future__ import annotations

import pytest
from django.core.management import call_command

import agentic_rag.embeddings as embeddings
from knowledge.indexing import reembed_knowledge_base
from knowledge.models import KnowledgeBase, SearchEntry
from knowledge.retrieval import RetrievalParams, retrieve
from knowledge.tasks import ingest_document

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
