"""Query and document analysis take time linear in the text: tokens, tags, query expansion.

A query is a chat message (up to 4,000 characters) and tags are read from whole chunks; a long
run of one character must not make a pattern retry from each of its characters. The term
patterns of query expansion must find what they found before they skipped ahead.
"""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from agentic_rag.tests.linear_time_support import (
    DOCUMENT_CHARS,
    MESSAGE_CHARS,
    cpu_seconds,
    linear_time_settings,
    long_texts,
)
from knowledge import fusion
from knowledge.analysis import analyze
from knowledge.fusion import expand_query
from knowledge.tagging import extract_tags

# jieba segments some 150 kB of Chinese a second; a quadratic pattern took minutes.
DOCUMENT_SECONDS = 1.5


@linear_time_settings(max_examples=10)
@given(text=long_texts(DOCUMENT_CHARS))
def test_it_tokenizes_a_long_text_in_linear_time(text):
    analyze("预热")  # jieba loads its dictionary on first use
    tokens, seconds = cpu_seconds(analyze, text)
    assert seconds < DOCUMENT_SECONDS
    assert sum(len(token) for token in tokens) <= 2 * len(text)  # jieba's search mode repeats sub-words


@linear_time_settings(max_examples=10)
@given(text=long_texts(DOCUMENT_CHARS))
def test_it_tags_a_long_text_in_linear_time(text):
    extract_tags("预热")  # jieba loads its dictionaries on first use
    tags, seconds = cpu_seconds(extract_tags, text)
    assert seconds < DOCUMENT_SECONDS
    assert len(tags) <= 8


@linear_time_settings(max_examples=20)
@given(query=long_texts(MESSAGE_CHARS))
def test_it_expands_a_long_query_in_linear_time(query):
    variants, seconds = cpu_seconds(expand_query, query)
    assert seconds < 0.5
    assert variants[0] == query


def test_a_long_query_without_known_terms_is_expanded_quickly():
    expand_query("预热")  # the term patterns compile once
    for query in ("，" * MESSAGE_CHARS, "的" * MESSAGE_CHARS, "a " * (MESSAGE_CHARS // 2)):
        assert cpu_seconds(expand_query, query)[1] < 0.05


def _old_pattern(pairs: list[tuple[str, str]], *, english: bool) -> re.Pattern[str]:
    """The term pattern as it was: the alternatives alone, tried at every position."""
    ordered = sorted(dict(reversed(pairs)).items(), key=lambda pair: -len(pair[0]))
    body = "|".join(f"(?P<g{i}>{fusion._source(term, english)})" for i, (term, _) in enumerate(ordered))
    if english:
        body = rf"(?<![A-Za-z])(?:{body})(?![A-Za-z])"
    return re.compile(body, re.IGNORECASE if english else 0)


PAIRS = list(fusion.CROSS_LANG_TERMS.items())
WORDS = [word for pair in PAIRS for word in pair] + ["a", " ", "中", "ing", "s", "ſ", "K", "İ", "x", "，"]


@linear_time_settings(max_examples=300)
@given(query=st.lists(st.sampled_from(WORDS), max_size=6).map("".join))
def test_the_term_patterns_find_what_they_found(query):
    chinese, english = fusion._compiled_terms(tuple(PAIRS), ())
    for new, old in ((chinese, _old_pattern(PAIRS, english=False)),
                     (english, _old_pattern([(en, zh) for zh, en in PAIRS], english=True))):
        found = [(m.span(), m.lastgroup) for m in new.pattern.finditer(query)]
        assert found == [(m.span(), m.lastgroup) for m in old.finditer(query)]
