"""Graph extraction takes time linear in the text: mentions, sentences, relations, first sentences.

A document of many short sentences naming many entities must not cost the number of mentions
times the number of sentences (it did: each sentence looked through every mention of its
paragraph, each mention through every one taken before it). Each rewritten step gives what the
step it replaced gave.
"""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentic_rag.tests.linear_time_support import (
    DOCUMENT_CHARS,
    cpu_seconds,
    linear_time_settings,
    long_texts,
)
from graphrag import extraction
from graphrag.build import _SENTENCE_END, _SentenceEnds
from graphrag.extraction import Extraction, Triple, dictionary_for, extract, find_mentions
from graphrag.structure import code_identifiers, structural_facts
from knowledge.tests.hostile_text import HOSTILE_DOCUMENTS, cpu_budget, long_hostile_text, timed

DICTIONARY = dictionary_for(["3.2 Quality gate", "质量门控", "KB"], ["向量检索", "BM25"])
# jieba's part-of-speech pass costs some 15 µs a Chinese character: 100 kB of dense names takes
# about a second; the quadratic steps this guards against took minutes.
GRAPH_SECONDS = 3.0


@linear_time_settings(max_examples=10)
@given(text=long_texts(DOCUMENT_CHARS))
def test_it_extracts_from_a_long_text_in_linear_time(text):
    extract("预热", DICTIONARY)  # jieba loads its dictionaries on first use
    found, seconds = cpu_seconds(lambda t: extract(t, DICTIONARY), text)
    assert seconds < GRAPH_SECONDS
    assert sum(len(m.surface) for m in found.mentions) <= len(text)


WORST = {
    "a name a sentence": "KB。" * (DOCUMENT_CHARS // 3),
    # The structure passes: one long table, heading, key-value line and path each.
    "a table of one cell a row": "| a | b |\n" + "| x |\n" * (DOCUMENT_CHARS // 6),
    "a row of many cells": "| h | type |\n|" + "`a.py` + " * (DOCUMENT_CHARS // 9),
    "headings only": "# 标题\n" * (DOCUMENT_CHARS // 5),
    "deep headings": "#" * DOCUMENT_CHARS,
    "a key-value line of many pairs": "字段：x，" + "类型：int，" * (DOCUMENT_CHARS // 7),
    "a path without end": "`" + "a/" * (DOCUMENT_CHARS // 2),
    "dots and slashes": "a./-" * (DOCUMENT_CHARS // 4),
    "calls": "f()" * (DOCUMENT_CHARS // 3),
    "Chinese names": "质量门控。" * (DOCUMENT_CHARS // 5),
    "spaces between a stage and a shortcut": "Stage 1 " + " " * DOCUMENT_CHARS + "→ Shortcut A",
}


def test_the_worst_texts_found_are_read_in_time():
    extract("预热", DICTIONARY)
    for text in WORST.values():
        assert cpu_seconds(lambda t: extract(t, DICTIONARY), text)[1] < GRAPH_SECONDS


def _old_find_mentions(text: str, structure=None) -> list[extraction.Mention]:
    """find_mentions as it was: each mention compared with every one taken before it."""
    strong = [
        extraction.Mention(s, extraction.normalise(s), DICTIONARY.type_of(extraction.normalise(s)) or "concept", start)
        for s, start in DICTIONARY.find(text)
    ] + extraction._special_mentions(text)
    strong += [extraction.Mention(m.surface, extraction.normalise(m.surface), m.type, m.start) for m in (structure.mentions if structure else ())]
    strong += [extraction.Mention(m.surface, extraction.normalise(m.surface), m.type, m.start) for m in code_identifiers(text)]
    weak = extraction._english_names(text)
    if not text.isascii():
        for run in re.finditer(r"[\u4e00-\u9fff]+", text):
            weak.extend(extraction._chinese_noun_phrases(run.group(0), run.start()))
    chosen, taken = [], []
    for mention in strong + weak:
        span = (mention.start, mention.start + len(mention.surface))
        if mention.key and 0 <= span[0] and span[1] <= len(text) and not any(span[0] < end and start < span[1] for start, end in taken):
            kind = DICTIONARY.type_of(mention.key) or mention.type
            chosen.append(extraction.Mention(mention.surface, mention.key, kind, mention.start))
            taken.append(span)
    return sorted(chosen, key=lambda m: m.start)


PIECES = ["KB", "BM25", "质量门控", "向量检索", "Stage 5", " → ", "Shortcut B", "使用", "uses", "GraphRAG", "。", ". ",
          "\n", "\n\n", " ", "S3", "L2 层", "P1", "`code.py`", "Quality Gate", "rank-bm25", "e5", "，",
          "## 2.1 实体提取\n", "| name | type |\n", "| top_k | int |\n", "字段：top_k，类型：int", "retrieve()", " 调用 "]
texts = st.lists(st.sampled_from(PIECES), max_size=14).map("".join)


@linear_time_settings(max_examples=300)
@given(text=texts)
def test_mentions_are_chosen_as_before(text):
    assert find_mentions(text, DICTIONARY) == _old_find_mentions(text)


@linear_time_settings(max_examples=300)
@given(text=texts)
def test_relations_are_read_as_before(text):
    result, old = extract(text, DICTIONARY), Extraction()
    seen: set[Triple] = set()
    for paragraph in extraction._PARAGRAPHS.split(text):
        structure = structural_facts(paragraph)
        mentions = _old_find_mentions(paragraph, structure)
        old.mentions.extend(mentions)
        keys = {m.key for m in mentions}
        for subject, relation, value in structure.relations:
            source = next((m.key for m in mentions if m.start == subject.start), extraction.normalise(subject.surface))
            target = next((m.key for m in mentions if m.start == value.start), extraction.normalise(value.surface))
            triple = Triple(source, relation, target)
            if source in keys and target in keys and source != target and triple not in seen:
                seen.add(triple)
                old.relations.append(triple)
        for sentence in extraction._SENTENCE.finditer(paragraph):
            inside = [m for m in mentions if sentence.start() <= m.start < sentence.end()]
            for left, right in itertools.pairwise(inside):
                gap = paragraph[left.start + len(left.surface) : right.start]
                if left.key == right.key:
                    continue
                arrow = left.type == "stage" and right.type == "shortcut" and _old_arrow(gap)
                relation = extraction.TRIGGERS if arrow else extraction._pair_relation(left, right, gap)
                triple = Triple(left.key, relation, right.key) if relation else None
                if triple and triple not in seen:
                    seen.add(triple)
                    old.relations.append(triple)
    assert result.mentions == old.mentions
    assert result.relations == old.relations


def _old_arrow(gap: str) -> bool:
    return re.search(r"\s*(?:→|->|=>|⇒|触发|triggers?)\s*", gap) is not None


@linear_time_settings(max_examples=300)
@given(text=st.text(alphabet="a.。 \n;!", min_size=1, max_size=14), data=st.data())
def test_the_sentence_around_a_name_is_the_one_it_was(text, data):
    at = data.draw(st.integers(0, len(text) - 1))
    start = max((m.end() for m in _SENTENCE_END.finditer(text, 0, at)), default=0)
    end = next((m.start() for m in _SENTENCE_END.finditer(text, at + 1)), len(text))
    assert _SentenceEnds(text).sentence_at(at) == text[start:end]


@linear_time_settings(max_examples=10)
@given(text=long_texts(DOCUMENT_CHARS))
def test_the_structure_of_a_long_text_is_read_in_linear_time(text):
    found, seconds = cpu_seconds(lambda t: (structural_facts(t), list(code_identifiers(t))), text)
    assert seconds < GRAPH_SECONDS
    facts, identifiers = found
    assert len(facts.mentions) + len(identifiers) <= len(text)


@pytest.mark.parametrize("name", sorted(HOSTILE_DOCUMENTS))
def test_each_hostile_document_is_read_for_the_graph_in_linear_time(name):
    """The documents every other text path is tried on, through the graph's extraction and its
    structure pass; jieba tags Chinese at some 15 µs a character, so the budget is twice the
    text paths' (a quadratic pass on these takes minutes)."""
    text = HOSTILE_DOCUMENTS[name]
    extract("预热", DICTIONARY)
    found, seconds = timed(extract, text, DICTIONARY)
    assert seconds < 2 * cpu_budget(text), seconds
    assert sum(len(m.surface) for m in found.mentions) <= len(text)
    _, seconds = timed(structural_facts, text)
    assert seconds < cpu_budget(text), seconds


@linear_time_settings(max_examples=10)
@given(text=long_hostile_text)
def test_long_hostile_text_is_read_for_the_graph_in_linear_time(text):
    extract("预热", DICTIONARY)
    _, seconds = timed(extract, text, DICTIONARY)
    assert seconds < 2 * cpu_budget(text)
