"""The reader weighs units by a sentence encoder's similarity to the question, when it has one."""

from __future__ import annotations

import numpy as np
import pytest

from agentic_rag.embeddings import EncoderSimilarity, text_key
from agentic_rag.llm.reader import Passage, read
from knowledge.analysis import analyze

ANSWER = "对话历史注入：最近 3 轮（6 条消息）注入系统提示词。"
PASSAGE = f"意图缓存使用 LRU 策略保存结果。{ANSWER}向量库每天凌晨备份一次。"
QUESTION = "How many turns of conversation history are injected?"


class FakeEncoder:
    """Says the answer means the question; everything else nothing. Counts what it encodes."""

    name = "fake"
    dims = 2

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def embed_passages(self, texts):
        self.encoded.extend(texts)
        return np.array([[1.0, 0.0] if t in (QUESTION, ANSWER) else [0.0, 1.0] for t in texts], dtype=np.float32)

    def embed_query(self, text):
        return self.embed_passages([text])[0]


def test_without_an_encoder_an_english_question_quotes_no_chinese_sentence():
    reading = read(QUESTION, [Passage("1", PASSAGE, 0)], tokenize=analyze)

    assert reading.picks == ()


def test_with_an_encoder_it_quotes_the_chinese_sentence_that_means_the_question():
    encoder = EncoderSimilarity(FakeEncoder())

    reading = read(QUESTION, [Passage("1", PASSAGE, 0)], tokenize=analyze, encoder=encoder)

    assert [pick.unit.text for pick in reading.picks][:1] == [ANSWER]


def test_a_key_in_english_words_over_chinese_evidence_does_not_keep_the_encoder_away():
    # "conversation: history" shares the question's words, but is a key, not an English answer.
    keyed = f"{PASSAGE}\nconversation: history"

    reading = read(QUESTION, [Passage("1", keyed, 0)], tokenize=analyze, encoder=EncoderSimilarity(FakeEncoder()))

    assert [pick.unit.text for pick in reading.picks][:1] == [ANSWER]


def test_a_line_setting_the_value_asked_for_answers_in_english():
    question = "What vector threshold does the next-show RAG agent use?"
    setting = '"vector_threshold": 0.7,'
    topical = "在 next-show 的 RAG Agent 内部使用 Graph 编排实现 pipeline 功能。"

    class Topical(FakeEncoder):
        def embed_passages(self, texts):
            self.encoded.extend(texts)
            return np.array([[1.0, 0.0] if t in (question, topical) else [0.0, 1.0] for t in texts], dtype=np.float32)

    reading = read(question, [Passage("1", f"{topical}\n{setting}", 0)], tokenize=analyze, encoder=EncoderSimilarity(Topical()))

    assert [pick.unit.text for pick in reading.picks][:1] == [setting]


def test_english_prose_that_covers_the_question_is_read_for_its_words():
    prose = "The conversation history injected into the prompt holds the last turns."
    fake = FakeEncoder()

    reading = read(QUESTION, [Passage("1", f"{PASSAGE}\n{prose}", 0)], tokenize=analyze, encoder=EncoderSimilarity(fake))

    assert [pick.unit.text for pick in reading.picks][:1] == [prose]
    assert fake.encoded == []  # its words answer: the encoder is not asked


def test_the_units_are_encoded_once_in_one_batch_and_remembered():
    fake = FakeEncoder()
    encoder = EncoderSimilarity(fake)

    read(QUESTION, [Passage("1", PASSAGE, 0)], tokenize=analyze, encoder=encoder)
    first = list(fake.encoded)
    read(QUESTION, [Passage("1", PASSAGE, 0)], tokenize=analyze, encoder=encoder)

    assert ANSWER in first and len(first) == len(set(first))
    assert fake.encoded == first  # the second reading encoded nothing


def test_vectors_the_store_holds_are_not_encoded_again():
    class Store:
        def load(self, encoder, keys):
            return {key: np.array([1.0, 0.0], dtype=np.float32) for key in keys if key == text_key(ANSWER)}

    fake = FakeEncoder()
    encoder = EncoderSimilarity(fake, Store())

    assert encoder(QUESTION, ANSWER) == pytest.approx(1.0)
    assert ANSWER not in fake.encoded and QUESTION in fake.encoded


def test_it_forgets_the_least_recently_used_texts_past_its_bound():
    fake = FakeEncoder()
    encoder = EncoderSimilarity(fake, max_texts=2)

    encoder.prepare(["a", "b", "c"])
    encoder.prepare(["a"])

    assert fake.encoded.count("a") == 2 and fake.encoded.count("c") == 1


def test_a_sentence_in_the_questions_language_that_covers_it_is_read_by_its_words():
    english = "Conversation history injection: the last 3 turns of history are injected."
    fake = FakeEncoder()

    reading = read(QUESTION, [Passage("1", f"{PASSAGE} {english}", 0)], tokenize=analyze, encoder=EncoderSimilarity(fake))

    assert [pick.unit.text for pick in reading.picks][:1] == [english]
    assert fake.encoded == []  # the encoder was not needed
