"""Every text path a document goes through terminates in time linear in its input, keeps its
words, and gives output bounded by its input: the readers, the chunker, the document display
and section editing. Hypothesis draws Markdown- and HTML-ish text; HOSTILE_DOCUMENTS are tried
on every run. `make fuzz` runs the same properties long."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentic_rag.llm.units import LIST_MARK
from knowledge.chunking import chunk_document, split_sentences
from knowledge.editing import NotEditable, SectionEditError, file_sections, replace_section
from knowledge.parsing import parse_document
from knowledge.parsing.document import ParseError
from knowledge.reading import text_blocks

from .hostile_text import HOSTILE_DOCUMENTS, cpu_budget, hostile_text, long_hostile_text, timed

READABLE = ["a.md", "a.txt", "a.html"]


@pytest.fixture(autouse=True, scope="module")
def _warm_tokenizers():
    # jieba loads its dictionary on first use (about 1 s): once, not in a timed call.
    chunk_document(parse_document("a.md", "# 标题\n\n中文和 English。".encode()))
WORD = re.compile(r"[^\W_]+")


def parsed_or_none(name: str, text: str):
    try:
        return parse_document(name, text.encode("utf-8", "surrogatepass"))
    except ParseError as error:
        assert str(error).strip()  # refused, with a reason the user can read
        return None


def block_text(blocks) -> str:
    return "\n".join([*(line for block in blocks for line in block.lines),
                      *(cell for block in blocks for row in block.rows for cell in row)])


# --- time: every path answers within a budget linear in its input ----------------------------


@pytest.mark.parametrize("name", sorted(HOSTILE_DOCUMENTS))
def test_each_hostile_document_is_read_chunked_shown_and_edited_in_linear_time(name):
    text = HOSTILE_DOCUMENTS[name]
    for file_name in ("doc.md", "doc.txt", "doc.html"):
        parsed, seconds = timed(parsed_or_none, file_name, text)
        assert seconds < cpu_budget(text), (file_name, seconds)
        if parsed is not None:
            _, seconds = timed(chunk_document, parsed)
            assert seconds < cpu_budget(text), ("chunking", file_name, seconds)
    _, seconds = timed(text_blocks, text)
    assert seconds < cpu_budget(text), ("display", seconds)
    _, seconds = timed(file_sections, "doc.md", text.encode())
    assert seconds < 2 * cpu_budget(text), ("editor", seconds)  # it parses, then maps lines


@given(long_hostile_text, st.sampled_from(READABLE))
def test_readers_and_the_chunker_answer_long_text_in_linear_time(text, name):
    parsed, seconds = timed(parsed_or_none, name, text)
    assert seconds < cpu_budget(text)
    if parsed is not None:
        _, seconds = timed(chunk_document, parsed)
        assert seconds < cpu_budget(text)


@given(long_hostile_text)
def test_the_display_and_sentence_splitting_answer_long_text_in_linear_time(text):
    for path in (text_blocks, split_sentences):
        _, seconds = timed(path, text)
        assert seconds < cpu_budget(text), path.__name__


# --- nothing lost, nothing invented ----------------------------------------------------------


@given(hostile_text, st.sampled_from(["a.md", "a.txt"]))
def test_chunks_keep_every_word_of_the_sections_and_stay_bounded(text, name):
    parsed = parsed_or_none(name, text)
    if parsed is None:
        return
    chunks = chunk_document(parsed)
    kept = " ".join(f"{p.section_index} {p.section_title} {p.text}" for p in chunks)
    for section in parsed.sections:
        for word in WORD.findall(section.text):
            assert word in kept, (word, section.text)
    # Children overlap by a sentence, and a parent holds its children's text once more.
    stored = sum(len(p.text) + sum(len(c.text) for c in p.children) for p in chunks)
    assert stored <= 4 * len(text) + 100


@given(hostile_text)
def test_the_display_keeps_every_word_and_adds_none(text):
    blocks = text_blocks(text)
    shown = block_text(blocks)
    assert len(shown) <= len(text)
    # List marks ("1.") and fence lines ("```python") are markup, not text the page shows.
    lines = [LIST_MARK.sub("", line) for line in text.splitlines() if not line.strip().startswith("```")]
    for word in WORD.findall("\n".join(lines)):
        assert word in shown, (word, text)


# --- editing round-trips the bytes -----------------------------------------------------------


@given(hostile_text, st.sampled_from(["a.md", "a.txt"]))
def test_writing_a_section_back_as_it_was_changes_no_byte(text, name):
    data = text.encode("utf-8")
    for section in file_sections(name, data):
        if not section.source.strip():
            continue
        try:
            new_data, _ = replace_section(name, data, section.position, section.source)
        except (NotEditable, SectionEditError):
            continue  # refused with a message, as a section whose lines cannot be matched is
        assert new_data == data
