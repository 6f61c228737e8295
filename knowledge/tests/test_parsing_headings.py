"""Numbered lines are headings only where the document's structure says so; no text is lost."""

from __future__ import annotations

import pytest

from knowledge.chunking import chunk_document
from knowledge.models import Document, DocumentStatus
from knowledge.parsing import parse_document
from knowledge.retrieval import params_for_kb, retrieve

from .test_ingest import _ingest

SQUAD = "14 前卫 青岛中能青年队\n15 中场 北京国安\n16 后卫 上海申花\n"


def _indexed_text(name: str, text: str) -> str:
    """Return the text of every chunk the document becomes, as the search indexes see it."""
    parents = chunk_document(parse_document(name, text.encode()))
    return "\n".join(part for p in parents for part in (p.text, *(c.text for c in p.children)))


def _outline(name: str, text: str) -> list[tuple[str, str]]:
    return [(s.index, s.title) for s in parse_document(name, text.encode()).sections]


@pytest.mark.parametrize(
    "text",
    [
        "14 abc\n",
        "14 前卫 青岛中能青年队\n",
        SQUAD,
        SQUAD + "\n球队简介：这是一支年轻的队伍。\n",
        "1 苹果\n2 香蕉\n3 橙子\n",
        "Intro paragraph.\n\n1 apples\n2 bananas\n3 cherries\n",
        "年份 月份 产量\n2019 12 34.5\n2020 1 36.0\n",
        "2019 12 34.5\n2020 1 36.0\n2021 3 38.2\n",
        "1 Fruits\n1.1 apple\n1.2 pear\n2 Greens\n2.1 kale\n\nPrices change weekly.\n",
        "14 abc\nA note about the number fourteen.\n",
    ],
)
def test_it_keeps_every_word_of_lists_tables_and_one_line_files(text):
    indexed = _indexed_text("notes.txt", text)
    assert [word for word in text.split() if word not in indexed] == []


@pytest.mark.parametrize(
    "text",
    [
        SQUAD,
        SQUAD + "\n球队简介：这是一支年轻的队伍。\n",
        "1 苹果\n2 香蕉\n3 橙子\n",
        "Intro paragraph.\n\n1 apples\n2 bananas\n3 cherries\n",
        "年份 月份 产量\n2019 12 34.5\n2020 1 36.0\n",
        "1 Fruits\n1.1 apple\n1.2 pear\n2 Greens\n2.1 kale\n\nPrices change weekly.\n",
        "14 abc\nA note about the number fourteen.\n",
    ],
)
def test_it_reads_numbered_lines_without_heading_structure_as_body(text):
    doc = parse_document("squad.txt", text.encode())
    assert [(s.index, s.title, s.text) for s in doc.sections] == [("", "", text.strip())]


def test_it_reads_a_number_that_restarts_its_sequence_as_body():
    text = "1 Introduction\nWhy we care.\n2 Method\nWe counted.\n1 apples and pears\nThe first item.\n"
    doc = parse_document("note.txt", text.encode())
    assert _outline("note.txt", text) == [("1", "Introduction"), ("2", "Method")]
    assert doc.sections[1].text == "We counted.\n1 apples and pears\nThe first item."


def test_it_still_makes_sections_of_numbered_headings_with_body():
    text = "1 Introduction\nThe scope of this note.\n\n2 Method\nWe measured twice.\n"
    assert _outline("note.txt", text) == [("1", "Introduction"), ("2", "Method")]


def test_it_makes_sections_of_an_excerpt_whose_numbering_goes_on():
    text = "3 Results\nIt worked.\n\n4 Discussion\nWhy it worked.\n\n6 Outlook\nNext steps.\n"
    assert _outline("excerpt.txt", text) == [("3", "Results"), ("4", "Discussion"), ("6", "Outlook")]


def test_it_keeps_a_heading_that_opens_subsections():
    text = "1 Setup\n1.1 Install\nRun the installer.\n1.2 Configure\nEdit the file.\n"
    assert _outline("guide.txt", text) == [("1", "Setup"), ("1.1", "Install"), ("1.2", "Configure")]


def test_it_keeps_an_empty_subsection_before_the_next_chapter():
    text = "1 Setup\nPrepare.\n1.1 Install\nRun it.\n1.2 Tuning\n2 Usage\nCall it.\n"
    assert _outline("guide.txt", text) == [
        ("1", "Setup"), ("1.1", "Install"), ("1.2", "Tuning"), ("2", "Usage")
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "text", "headings"),
    [
        ("guide.txt", "1 Setup\n1.1 Install\nRun the installer.\n", ["Setup", "Install"]),
        ("plan.txt", "第二章 施工部署\n一、施工准备\n（一）技术准备\n组织图纸会审。\n", ["第二章 施工部署", "一、施工准备", "技术准备"]),
        ("guide.md", "# Guide\n\n## Setup\n\n### Install\n\nRun the installer.\n", ["Guide", "Setup", "Install"]),
        ("notes.md", "# Notes\n\n## 1 Intro\n\nHello.\n\n## 2 Closing remarks\n", ["Notes", "Intro", "2 Closing remarks"]),
    ],
)
def test_it_keeps_the_text_of_headings_without_body_in_a_chunk(name, text, headings):
    indexed = _indexed_text(name, text)
    assert [heading for heading in headings if heading not in indexed] == []


def test_it_makes_a_markdown_heading_without_body_its_own_text():
    doc = parse_document("notes.md", b"# Notes\n\n## 1 Intro\n\nHello.\n\n## 2 Closing remarks\n")
    closing = next(s for s in doc.sections if s.title == "Closing remarks")
    assert closing.text == "2 Closing remarks"


def test_it_trusts_markdown_headings_without_a_numbering_sequence():
    text = "# Notes\n\n## 14 abc\n\nBody.\n\n## 3 xyz\n\nMore.\n"
    assert _outline("notes.md", text) == [("", "Notes"), ("14", "abc"), ("3", "xyz")]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("text", "query"),
    [("14 abc\n", "abc"), ("14 前卫 青岛中能青年队\n", "青岛中能青年队"), (SQUAD, "上海申花")],
)
def test_it_ingests_a_short_file_that_a_keyword_search_finds(kb, text, query):
    _ingest(kb, "one-line.txt", text.encode())

    document = Document.objects.get(kb=kb)
    assert document.status == DocumentStatus.READY, document.error
    result = retrieve(query, kb, params_for_kb(kb, mode="bm25"))
    assert [c.doc_id for c in result.candidates][:1] == [document.pk]


@pytest.mark.django_db
def test_it_indexes_a_chapter_title_without_body_for_keyword_search(kb):
    _ingest(kb, "guide.md", b"# Guide\n\n## Deployment\n\n### Install\n\nRun the installer.\n")

    result = retrieve("deployment", kb, params_for_kb(kb, mode="bm25"))
    assert [c.text for c in result.candidates][:1] == ["Deployment"]
