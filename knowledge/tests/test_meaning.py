"""Ingestion encodes each document's units for the reader, which reads them instead of encoding."""

from __future__ import annotations

import numpy as np
import pytest

from agentic_rag.embeddings import HashingEmbedder, text_key
from knowledge.meaning import UnitVectorStore, document_words, store_unit_vectors, unit_texts
from knowledge.models import Chunk, UnitVector

from .test_terms import _ingest

pytestmark = pytest.mark.django_db
TEXT = "# 巡检\n\n守望进程每 30 秒巡检一次全部节点。发现失联即告警。\n\n- 告警发往值班群"


def test_ingestion_keeps_a_vector_of_every_unit_under_the_readers_encoder(kb, settings):
    settings.READER_ENCODER = "hashing-1024"  # deterministic and quick: the stage's code path, not USE's quality

    document = _ingest(kb, "巡检.md", TEXT)

    keys = set(UnitVector.objects.filter(document=document, encoder="hashing-1024").values_list("key", flat=True))
    assert text_key("守望进程每 30 秒巡检一次全部节点。") in keys
    texts = list(Chunk.objects.filter(document=document).values_list("text", flat=True))
    # and of its Chinese words, for knowledge.lexicon
    assert keys == set(unit_texts(texts)) | set(document_words(texts))


def test_without_a_readers_encoder_ingestion_keeps_no_vectors(kb):
    _ingest(kb, "巡检.md", TEXT)

    assert not UnitVector.objects.exists()


def test_the_store_returns_the_vectors_ingestion_kept_and_only_those(kb, settings):
    settings.READER_ENCODER = "hashing-1024"
    _ingest(kb, "巡检.md", TEXT)
    embedder = HashingEmbedder(1024)
    unit = "发现失联即告警。"

    found = UnitVectorStore().load("hashing-1024", [text_key(unit), text_key("not a unit")])

    assert list(found) == [text_key(unit)]
    assert np.dot(found[text_key(unit)], embedder.embed_query(unit)) == pytest.approx(1.0, abs=1e-2)


def test_a_document_encoded_already_is_not_encoded_again(kb, settings):
    settings.READER_ENCODER = "hashing-1024"
    document = _ingest(kb, "巡检.md", TEXT)

    texts = Chunk.objects.filter(document=document).values_list("text", flat=True)

    assert store_unit_vectors(document.pk, unit_texts(texts), HashingEmbedder(1024)) == 0


def test_ingestion_loads_the_encoders_question_side_before_the_first_question(kb, settings, monkeypatch):
    # The cross-language leg embeds questions with the query side of a lazily loaded encoder,
    # a model of its own: ingestion loads it, so the first search does not.
    settings.READER_ENCODER = "hashing-1024"
    asked: list[str] = []
    embed_query = HashingEmbedder.embed_query
    monkeypatch.setattr(HashingEmbedder, "embed_query", lambda self, text: asked.append(text) or embed_query(self, text))

    _ingest(kb, "巡检.md", TEXT)

    assert asked
