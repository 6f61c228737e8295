"""Hostile uploads end quickly with a clear refusal, in bounded time and memory, and fail alone."""

from __future__ import annotations

import io
import time
import zipfile

import pytest
from django.test import TestCase
from pypdf import PdfWriter

from knowledge.ingest import check_upload, clean_file_name, run_ingestion, submit_document
from knowledge.models import Document, DocumentStatus
from knowledge.parsing import ParseError, parse_document
from knowledge.parsing import docx as docx_parser

pytestmark = pytest.mark.django_db


def zip_bomb(expanded_mb: int) -> bytes:
    """A .docx-shaped zip whose document.xml expands to `expanded_mb` of zeros."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w") as member:
            zeros = b"0" * 2**20
            for _ in range(expanded_mb):
                member.write(zeros)
    return buffer.getvalue()


def test_a_zip_bomb_docx_is_refused_before_it_is_expanded(monkeypatch):
    monkeypatch.setattr(docx_parser, "MAX_EXPANDED_BYTES", 2 * 2**20)  # the real limit is 200 MB
    bomb = zip_bomb(20)
    assert len(bomb) < 100_000  # 20 MB of zeros fit in a few kilobytes

    started = time.perf_counter()
    with pytest.raises(ParseError, match=r"would expand to 20 MB, over the limit of 2 MB"):
        parse_document("bomb.docx", bomb)
    assert time.perf_counter() - started < 0.5


def test_a_pdf_of_5000_pages_is_refused_without_reading_them():
    writer = PdfWriter()
    for _ in range(5000):
        writer.add_blank_page(width=72, height=72)
    buffer = io.BytesIO()
    writer.write(buffer)

    started = time.perf_counter()
    with pytest.raises(ParseError, match="5,000 pages, over the limit of 2,000"):
        parse_document("huge.pdf", buffer.getvalue())
    assert time.perf_counter() - started < 5


def test_deeply_nested_html_parses_in_bounded_time():
    nested = "<div>" * 100_000 + "<p>Deep text survives.</p>" + "</div>" * 100_000

    started = time.perf_counter()
    parsed = parse_document("nested.html", nested.encode())

    assert any("Deep text survives." in section.text for section in parsed.sections)
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("name", ["../../etc/passwd.md", "a/../../" + "x" * 300 + ".md", "..\\..\\boot.ini.txt"])
def test_file_names_lose_their_path_tricks_and_stay_short(name):
    cleaned = clean_file_name(name)

    assert ".." not in cleaned.split("/") and not cleaned.startswith("/") and "\\" not in cleaned
    assert len(cleaned) <= 255 and cleaned.endswith((".md", ".txt"))


def test_a_60_mb_file_is_refused_before_it_is_read():
    assert check_upload("big.pdf", 60 * 2**20) == "the file is 60 MB, over the 50 MB limit"


def test_a_refused_docx_fails_alone_and_says_why(kb, monkeypatch):
    monkeypatch.setattr(docx_parser, "MAX_EXPANDED_BYTES", 2 * 2**20)
    ids = []
    for name, data in (("good.md", b"# 1 Good\n\nThis document is fine."), ("bomb.docx", zip_bomb(20))):
        queued: list[int] = []
        with TestCase.captureOnCommitCallbacks(execute=True):
            submit_document(kb, name, data, enqueue=queued.append)
        run_ingestion(queued[0])
        ids.append(queued[0])

    good, bomb = (Document.objects.get(pk=pk) for pk in ids)
    assert good.status == DocumentStatus.READY
    assert bomb.status == DocumentStatus.FAILED and "over the limit" in bomb.error
