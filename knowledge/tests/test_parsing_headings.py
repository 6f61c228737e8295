"""Numbered lines are headings only where the document's structure says so; no text is lost."""

from __future__ import annotations

import pytest

from knowledge.models import Document, DocumentStatus
from knowledge.parsing import parse_document
from knowledge.retrieval import params_for_kb, retrieve

from .test_ingest import _ingest


def _all_text(name: str, text: str) -> str:
    doc = parse_document(name, text.encode())
    return "\n".join(f"{s.index} {s.title}\n{s.text}" for s in doc.sections)


@pytest.mark.parametrize(
    "text",
    [
        "14 abc\n",
        "14 前卫 青岛中能青年队\n",
        "14 前卫 青岛中能青年队\n15 中场 北京国安\n16 后卫 上海申花\n",
        "1 苹果\n2 香蕉\n3 橙子\n",
        "年份 月份 产量\n2019 12 34.5\n2020 1 36.0\n",
    ],
)
def test_lists_tables_and_one_line_files_keep_every_word(text):
    kept = _all_text("notes.txt", text)
    for word in text.split():
        assert word in kept


def test_a_numbered_list_is_body_text_not_headings():
    doc = parse_document("squad.txt", "14 前卫 青岛中能青年队\n15 中场 北京国安\n".encode())
    assert [s.title for s in doc.sections if s.title] in ([], ["squad"])
    assert "15 中场 北京国安" in doc.sections[0].text


def test_numbered_headings_followed_by_body_still_make_sections():
    text = "1 Introduction\nThe scope of this note.\n\n2 Method\nWe measured twice.\n"
    doc = parse_document("note.txt", text.encode())
    assert [(s.index, s.title) for s in doc.sections] == [("1", "Introduction"), ("2", "Method")]


def test_a_heading_that_opens_subsections_stays_a_heading():
    text = "1 Setup\n1.1 Install\nRun the installer.\n1.2 Configure\nEdit the file.\n"
    doc = parse_document("guide.txt", text.encode())
    assert [(s.index, s.title) for s in doc.sections] == [("1", "Setup"), ("1.1", "Install"), ("1.2", "Configure")]


def test_a_markdown_heading_without_body_is_indexed_as_its_own_text():
    doc = parse_document("notes.md", b"# Notes\n\n## 1 Intro\n\nHello.\n\n## 2 Closing remarks\n")
    closing = next(s for s in doc.sections if s.title == "Closing remarks")
    assert closing.text == "2 Closing remarks"


@pytest.mark.django_db
@pytest.mark.parametrize(("text", "query"), [("14 abc\n", "abc"), ("14 前卫 青岛中能青年队\n", "青岛中能青年队")])
def test_a_one_line_file_ingests_and_is_found_by_its_words(kb, text, query):
    _ingest(kb, "one-line.txt", text.encode())

    document = Document.objects.get(kb=kb)
    assert document.status == DocumentStatus.READY, document.error
    result = retrieve(query, kb, params_for_kb(kb))
    assert [c.doc_id for c in result.candidates][:1] == [document.pk]


