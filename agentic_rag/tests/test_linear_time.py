"""The reader's text routines take time linear in their input: units and sentences of evidence,
Markdown stripping, think blocks, prompt elements, cited answers, model JSON.

Evidence comes from uploaded documents and answers from models: a text of long runs (a line of
"**a ", a bracket left open over many sentences, thousands of unclosed tags) must not cost its
length squared. Each rewritten routine must give exactly what the one it replaced gave.
"""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentic_rag.llm import coverage, extractive, json_reply, reader, units
from agentic_rag.llm.base import Message
from agentic_rag.llm.extractive import ExtractiveProvider, find_evidence, find_question
from agentic_rag.llm.thinking import ThinkFilter, strip_think
from agentic_rag.tests.linear_time_support import (
    DOCUMENT_CHARS,
    MESSAGE_CHARS,
    cpu_seconds,
    linear_time_settings,
    long_texts,
)
from chat.pipeline import citations

DOCUMENT_SECONDS = 1.0
documents = long_texts(DOCUMENT_CHARS)


@linear_time_settings(max_examples=10)
@given(text=documents)
def test_it_splits_a_long_text_into_units_in_linear_time(text):
    found, seconds = cpu_seconds(units.split_units, text)
    assert seconds < DOCUMENT_SECONDS
    # A table row is written with its header's names (each at most 40 characters a cell).
    assert sum(len(unit.text) for unit in found) <= 50 * len(text)


@linear_time_settings(max_examples=10)
@given(text=documents)
def test_it_splits_sentences_in_linear_time(text):
    line = text.replace("\n", " ")
    found, seconds = cpu_seconds(units.split_sentences, line)
    assert seconds < DOCUMENT_SECONDS
    assert all(sentence in line for sentence in found[:50])
    assert sum(len(sentence) for sentence in found) <= len(line)


@linear_time_settings(max_examples=10)
@given(text=documents)
def test_it_strips_markdown_in_linear_time(text):
    found, seconds = cpu_seconds(units.strip_markdown, text)
    assert seconds < DOCUMENT_SECONDS
    assert len(found) <= len(text)


@linear_time_settings(max_examples=10)
@given(text=documents)
def test_it_removes_think_blocks_in_linear_time(text):
    text = text.replace("`", "<think>").replace("*", "</think>")
    found, seconds = cpu_seconds(strip_think, text)
    assert seconds < DOCUMENT_SECONDS
    assert len(found) <= len(text)


@linear_time_settings(max_examples=10)
@given(text=documents)
def test_it_reads_prompt_elements_and_cited_answers_in_linear_time(text):
    tags = {"`": "<document", "*": "<cite", "|": "<question>", "#": "</cite>", "_": "<documents"}
    for mark, tag in tags.items():
        text = text.replace(mark, tag)
    messages = [Message("user", text)]
    for function in (find_question, find_evidence):
        assert cpu_seconds(function, messages)[1] < DOCUMENT_SECONDS
    for function in (citations.find_citations, citations.display_answer, json_reply.parse_json_reply):
        assert cpu_seconds(function, text)[1] < DOCUMENT_SECONDS


@linear_time_settings(max_examples=15)
@given(question=long_texts(MESSAGE_CHARS))
def test_the_extractive_reader_answers_a_long_question_in_reasonable_time(question):
    evidence = "".join(
        f'<document id="{n}" doc="d{n}.md">{text}</document>'
        for n, text in enumerate(
            ["Retrieval fuses BM25 and vectors with RRF, k = 60. 检索融合两路结果。",
             "| Factor | Weight |\n|---|---|\n| recency | 0.2 |\n| quality | 0.3 |",
             "The reader quotes one to three units (sentences, items or rows) and cites each [1]."], 1
        )
    )
    prompt = f"<documents>{evidence}</documents><question>{_escape(question)}</question>"
    answer, seconds = cpu_seconds(ExtractiveProvider().answer, [Message("user", prompt)])
    assert seconds < 2.0
    assert answer.startswith(("(Extractive", "（抽取式", "(Tool"))


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# The worst texts found: each took seconds before (or, for the emphasis, ten of thousands).
WORST_LINES = {
    "bold openers": "**a " * (DOCUMENT_CHARS // 4),
    "underscore openers": "__a " * (DOCUMENT_CHARS // 4),
    "link openers": "[" * DOCUMENT_CHARS,
    "link targets": "[a](" * (DOCUMENT_CHARS // 4),
    "spaces in a table separator": "|" + " " * DOCUMENT_CHARS + "x",
    "one open bracket": "(" + "a. " * (DOCUMENT_CHARS // 3),
    "full stops": "." * DOCUMENT_CHARS + "!",
}


@pytest.mark.parametrize("line", WORST_LINES.values(), ids=WORST_LINES.keys())
def test_the_worst_lines_found_are_read_quickly(line):
    assert cpu_seconds(units.split_units, line)[1] < DOCUMENT_SECONDS / 2


def test_a_reply_of_many_digits_is_no_json_object():
    # json.loads raises ValueError, not JSONDecodeError, for an integer past 4,300 digits.
    assert json_reply.parse_json_reply("9" * 5000).step == "raw"


def test_many_think_blocks_are_removed_quickly():
    found, seconds = cpu_seconds(strip_think, "<think>x</think>y" * 6000)
    assert found == "y" * 6000
    assert seconds < 0.2


# --- the rewritten routines give what they replaced ------------------------------------------

OLD_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\s]*\)")
OLD_EMPHASIS = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|(?<!\w)__(?=\S)(?!\w+__(?!\w))(.+?)(?<=\S)__(?!\w)")
OLD_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$")


@linear_time_settings(max_examples=300)
@given(text=st.text(alphabet="[]()! a\nx", max_size=16))
def test_links_are_stripped_as_before(text):
    assert units._strip_links(text) == OLD_LINK.sub(r"\1", text)


@linear_time_settings(max_examples=300)
@given(text=st.text(alphabet="*_ a\n.é", max_size=16))
def test_emphasis_is_stripped_as_before(text):
    assert units._strip_emphasis(text) == OLD_EMPHASIS.sub(lambda m: m[1] or m[2], text)


@linear_time_settings(max_examples=300)
@given(text=st.text(alphabet="|-: \t\nx", max_size=16))
def test_table_separators_are_recognised_as_before(text):
    assert (units.TABLE_SEPARATOR.match(text) is None) == (OLD_TABLE_SEPARATOR.match(text) is None)


def _old_split_sentences(text: str) -> list[str]:
    def depth(start: int, end: int) -> int:
        level = 0
        for char in text[start:end]:
            if char in "（(":
                level += 1
            elif char in "）)" and level:
                level -= 1
        return level

    sentences, start = [], 0
    for match in re.finditer(r"""[。！？!?]+[”’」』"')\]]*|\.+[”’"')\]]*(?=\s|$)""", text):
        if depth(start, match.start()) > 0:
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [sentence for sentence in sentences if sentence]


@linear_time_settings(max_examples=300)
@given(text=st.text(alphabet="。.()（）a !\"'", max_size=20))
def test_sentences_are_split_as_before(text):
    assert units.split_sentences(text) == _old_split_sentences(text)


class _OldThinkFilter(ThinkFilter):
    """The filter as it was, cutting a shorter copy of the text at each tag."""

    def feed(self, chunk: str) -> str:
        from agentic_rag.llm.thinking import CLOSE_TAG, OPEN_TAG, _partial_tag_suffix

        text, self._pending, out = self._pending + chunk, "", []
        while text:
            if self._after_close:
                text = text.lstrip()
                if not text:
                    break
                self._after_close = False
            tag = CLOSE_TAG if self._inside else OPEN_TAG
            index = text.find(tag)
            if index >= 0:
                if not self._inside:
                    self._emit(out, text[:index])
                self._inside = not self._inside
                self._after_close = not self._inside and not self._has_output
                text = text[index + len(tag) :]
                continue
            held = _partial_tag_suffix(text, tag)
            if not self._inside:
                self._emit(out, text[: len(text) - held])
            self._pending = text[len(text) - held :]
            break
        return "".join(out)


@linear_time_settings(max_examples=300)
@given(chunks=st.lists(st.lists(st.sampled_from(["<think>", "</think>", "<", "/", "think>", " ", "\n", "a"]), max_size=6)
                       .map("".join), max_size=5))
def test_think_blocks_are_filtered_as_before(chunks):
    new, old = ThinkFilter(), _OldThinkFilter()
    assert [new.feed(c) for c in chunks] + [new.flush()] == [old.feed(c) for c in chunks] + [old.flush()]


@linear_time_settings(max_examples=300)
@given(a=st.text(alphabet="ab 中文c1", max_size=20), b=st.text(alphabet="ab 中文c1", max_size=20))
def test_feature_cosine_is_what_it_was(a, b):
    from agentic_rag.embeddings import hashing_features

    fa, fb = hashing_features(a), hashing_features(b)
    dot = sum(count * fb[f] for f, count in fa.items() if f in fb)
    expected = dot / math.sqrt(sum(c * c for c in fa.values()) * sum(c * c for c in fb.values())) if dot else 0.0
    assert extractive.feature_cosine(a, b) == expected


@linear_time_settings(max_examples=300)
@given(text=st.text(alphabet="12.5 a٣", max_size=12), question=st.text(alphabet="12.5 a٣", max_size=8))
def test_the_numbers_asked_are_removed_as_before(text, question):
    expected = text
    for number in set(re.findall(r"\d+(?:\.\d+)?", question)):
        expected = re.sub(rf"(?<![\d.]){re.escape(number)}(?![\d.])", " ", expected)
    assert reader._new_text(text, question) == expected


ELEMENT_PIECES = ["<document", "<documents", ">", "</document>", "</documents>", "<question", "</question>",
                  "<cite", "</cite>", "[1]", "[1,2", "]", "x", " ", "id='1'", "<"]
elements = st.lists(st.sampled_from(ELEMENT_PIECES), max_size=9).map("".join)


@linear_time_settings(max_examples=300)
@given(text=elements)
def test_prompt_elements_are_found_as_before(text):
    old_question = re.search(r"<question\b[^>]*>(.*?)</question>", text, re.DOTALL)
    old = old_question.group(1) if old_question else re.sub(r"<documents\b.*?</documents>", "", text, flags=re.DOTALL)
    assert find_question([Message("user", text)]) == extractive._unescape(old).strip()
    old_documents = re.findall(r"<document\b([^>]*)>(.*?)</document>", text, re.DOTALL)
    assert [e.text for e in find_evidence([Message("user", text)])] == [extractive._unescape(b) for _, b in old_documents]


@linear_time_settings(max_examples=300)
@given(text=elements)
def test_citation_marks_are_found_as_before(text):
    old = [(m.span(), m.groups()) for m in citations._MARK.finditer(text)]
    assert [(m.span(), m.groups()) for m in citations._marks(text)] == old


@linear_time_settings(max_examples=300)
@given(text=st.text(alphabet="a-_= \"'x.", max_size=14))
def test_attributes_are_read_as_before(text):
    old = re.findall(r"""\b([\w-]+)\s*=\s*(?:"([^"]*)"|'([^']*)')""", text)
    assert extractive._ATTRIBUTE.findall(text) == old


@linear_time_settings(max_examples=300)
@given(text=st.lists(st.sampled_from(["```", " ", "\t", "json", "JSON", "\n", "{", "}", "x", "`"]), max_size=9).map("".join))
def test_fenced_json_is_found_as_before(text):
    old = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
    assert [m.groups() for m in json_reply._FENCE.finditer(text)] == [m.groups() for m in old.finditer(text)]


OLD_FACTS = {
    "time": r"\d+(?:\.\d+)?\s*(?:ms|s|min(?:ute)?s?|h|days?|hours?|seconds?)\b|[\d一二三四五六七八九十百两]+\s*(?:毫秒|秒|分钟|小时|天)",
    "threshold": r"[<>≤≥]=?\s*\d|\d+(?:\.\d+)?\s*(?:以上|以下|以内)|至少|不超过|不低于|at (?:least|most)|above|below|\b\d+(?:\.\d+)?\b",
    "name": r"[A-Z][\w-]+|`|[a-z]+_[a-z_]+|[\u4e00-\u9fff]{2,}",
    "question end": r"[?？]\s*[”\"'」]*\s*$",
}
FACT_PIECES = ["1", "2.", "5", " ", "ms", "s", "h", "x", "秒", "三", "百", "以上", "<", "=", "a", "_", "b", "中", "?", "”", "\n"]


@linear_time_settings(max_examples=300)
@given(text=st.lists(st.sampled_from(FACT_PIECES), max_size=8).map("".join))
def test_the_fact_patterns_find_what_they_found(text):
    patterns = {**reader._FACT_PATTERNS, "question end": reader._QUESTION_END}
    for kind, old in OLD_FACTS.items():
        assert (patterns[kind].search(text) is None) == (re.search(old, text) is None), kind


def test_a_unit_of_many_digits_is_read_quickly():
    unit = "9" * DOCUMENT_CHARS
    _, seconds = cpu_seconds(lambda text: [p.search(text) for p in reader._FACT_PATTERNS.values()], unit)
    assert seconds < 0.5


@pytest.mark.parametrize("run", ["一", "十", "二十", "9", "9.", "v1.", "a1", "p99 "])
def test_a_quote_of_a_long_run_of_numerals_is_checked_for_the_fact_asked_quickly(run):
    quote = coverage.Quoted(run * (DOCUMENT_CHARS // len(run)))
    _, seconds = cpu_seconds(lambda question: coverage.lacks_fact(question, [quote]), "需要多少个版本？How many p99?")
    assert seconds < 0.5


@pytest.mark.parametrize("run", ["a", "a ", "A", "aB", "a-", "a_1 ", "中a", "p99"])
def test_the_names_of_a_long_question_are_found_quickly(run):
    question = "为什么" + run * (DOCUMENT_CHARS // len(run))
    _, seconds = cpu_seconds(coverage.asked_names, question)
    assert seconds < 0.5
    _, seconds = cpu_seconds(coverage.asked_names, "Why " + run * (DOCUMENT_CHARS // len(run)))
    assert seconds < 0.5
