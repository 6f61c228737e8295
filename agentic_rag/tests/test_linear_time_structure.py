"""The structure the reader and ingestion read (lead-ins and their blocks, headings, drawings,
key-value lines, Markdown in a .txt) costs time linear in the text, whatever its shape."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentic_rag.llm import units
from agentic_rag.llm.extractive import simple_tokenize
from agentic_rag.llm.reader import Passage, read
from agentic_rag.tests.linear_time_support import DOCUMENT_CHARS, cpu_seconds, linear_time_settings, long_texts
from knowledge.chunking import ChunkingParams, chunk_document
from knowledge.parsing import parse_document
from knowledge.parsing.markdown import looks_like_markdown

SECONDS = 1.5
PIECES = ("输出字段:\n", "- a：1\n", "\n\n", "│ └─ ", "7.6 质量门控\n", "## 3.2\n", "```\n", "| k | 60 |\n", "a: b, ", "1.", ":", "：")
structured = st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map(
    lambda pieces: ("".join(pieces) * (DOCUMENT_CHARS // len("".join(pieces)) + 1))[:DOCUMENT_CHARS]
)


@linear_time_settings(max_examples=10)
@given(text=st.one_of(structured, long_texts(DOCUMENT_CHARS)))
def test_units_of_a_long_structured_text_take_linear_time(text):
    found, seconds = cpu_seconds(units.split_units, text)
    assert seconds < SECONDS
    assert all(u.block < len(found) for u in found)


@linear_time_settings(max_examples=10)
@given(text=structured)
def test_markdown_detection_takes_linear_time(text):
    assert cpu_seconds(looks_like_markdown, text)[1] < SECONDS


@pytest.mark.parametrize("piece", ["输出字段:\n\n", "a:\n\n" + "，" * 50 + "\n\n", "- 字段：值\n"])
def test_a_long_run_of_lead_ins_is_chunked_and_read_in_linear_time(piece):
    text = "## 概览\n" + piece * (DOCUMENT_CHARS // len(piece))
    doc = parse_document("long.txt", text.encode())
    assert cpu_seconds(lambda _: chunk_document(doc, ChunkingParams()), "")[1] < 2 * SECONDS
    passage = Passage("1", text[:20_000], 0, "概览")
    reading, seconds = cpu_seconds(lambda q: read(q, [passage], tokenize=simple_tokenize), "输出哪些字段？")
    assert seconds < 2 * SECONDS
    assert sum(len(p.unit.text) for p in reading.picks) <= 2000
