"""Hostile uploads end quickly with a clear refusal, in bounded time and memory, and fail alone."""

from __future__ import annotations

import io
import struct
import time
import tracemalloc
import zipfile

import docx
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


def test_a_zip_bomb_docx_is_refused_before_it_is_expanded(settings):
    settings.DOCX_MAX_EXPANDED_MB = 2
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


def test_a_refused_docx_fails_alone_and_says_why(kb, settings):
    settings.DOCX_MAX_EXPANDED_MB = 2
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


def lying_docx_bomb(expanded_mb: int, *, claimed: int = 1000) -> bytes:
    """A real .docx whose document.xml expands to `expanded_mb` of zeros but claims, in both
    of its headers, to expand to `claimed` bytes."""
    plain = io.BytesIO()
    docx.Document().save(plain)
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(plain.getvalue())) as source, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            if info.filename != "word/document.xml":
                out.writestr(info.filename, source.read(info))
        with out.open("word/document.xml", "w") as member:
            for _ in range(expanded_mb):
                member.write(b"0" * 2**20)
    data = bytearray(buffer.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        info = archive.getinfo("word/document.xml")
        central = archive.start_dir
    struct.pack_into("<I", data, info.header_offset + 22, claimed)  # the local header's size
    entry = data.index(b"PK\x01\x02", central)
    while data[entry + 46 : entry + 46 + len(info.filename)] != info.filename.encode():
        entry = data.index(b"PK\x01\x02", entry + 4)
    struct.pack_into("<I", data, entry + 24, claimed)  # the central directory's size
    return bytes(data)


def test_a_zip_bomb_lying_about_its_size_is_refused_in_bounded_memory():
    bomb = lying_docx_bomb(100)
    with zipfile.ZipFile(io.BytesIO(bomb)) as archive:
        assert archive.getinfo("word/document.xml").file_size == 1000  # the lie the check sees

    tracemalloc.start()
    try:
        with pytest.raises(ParseError, match=r"not a valid \.docx"):
            parse_document("liar.docx", bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20  # a plain read inflates all 100 MB at once


def test_parts_are_counted_as_they_inflate_not_as_declared(settings, monkeypatch):
    # zipfile stops at the declared size, so no archive reaches this count; it stays the bound
    # if that ever changes.
    settings.DOCX_MAX_EXPANDED_MB = 2
    monkeypatch.setattr(docx_parser, "_check_declared_size", lambda members, max_bytes: None)

    with pytest.raises(ParseError, match="expands to more than its limit allows"):
        parse_document("bomb.docx", zip_bomb(20))


def test_images_and_embedded_files_are_never_inflated():
    document = docx.Document()
    document.add_heading("Report", 1)
    document.add_paragraph("The figures follow.")
    plain = io.BytesIO()
    document.save(plain)
    bundled = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(plain.getvalue())) as source, zipfile.ZipFile(bundled, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            out.writestr(info, source.read(info))
        with out.open("word/media/huge.bin", "w") as member:
            for _ in range(60):
                member.write(b"\0" * 2**20)

    tracemalloc.start()
    try:
        parsed = parse_document("report.docx", bundled.getvalue())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [section.title for section in parsed.sections] == ["Report"]
    assert "The figures follow." in parsed.sections[0].text
    assert peak < 30 * 2**20  # the 60 MB part is not read


def test_a_docx_compressed_with_bzip2_is_refused():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_BZIP2) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
    with pytest.raises(ParseError, match="a compression Word does not write"):
        parse_document("odd.docx", buffer.getvalue())


def docx_with_body(xml: bytes) -> bytes:
    """A real python-docx document whose body starts with `xml`."""
    plain = io.BytesIO()
    docx.Document().save(plain)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(plain.getvalue())) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "word/document.xml":
                data = data.replace(b"<w:body>", b"<w:body>" + xml, 1)
            target.writestr(info.filename, data)
    return out.getvalue()


def test_a_docx_of_629k_empty_paragraphs_is_refused_quickly():
    data = docx_with_body(b"<w:p/>" * 629_000)
    assert len(data) < 100_000

    started = time.perf_counter()
    with pytest.raises(ParseError, match="more than 100,000 paragraphs, over the limit"):
        parse_document("empty.docx", data)
    assert time.perf_counter() - started < 5  # python-docx reading them one by one is far slower


PARAGRAPH = b"<w:p><w:r><w:t>Words.</w:t></w:r></w:p>"
CELL = b"<w:tc>" + PARAGRAPH + b"</w:tc>"


@pytest.mark.parametrize(
    ("setting", "limit", "body", "what"),
    [
        ("DOCX_MAX_PARAGRAPHS", 50, PARAGRAPH * 51, "50 paragraphs"),
        ("DOCX_MAX_TABLE_CELLS", 20, b"<w:tbl><w:tr>" + CELL * 21 + b"</w:tr></w:tbl>", "20 table cells"),
        ("DOCX_MAX_ELEMENTS", 300, b"<w:p>" + b"<w:r><w:t>a</w:t></w:r>" * 150 + b"</w:p>", "300 XML elements"),
    ],
)
def test_docx_element_limits_refuse_and_name_the_limit(settings, setting, limit, body, what):
    setattr(settings, setting, limit)

    with pytest.raises(ParseError, match=f"more than {what}, over the limit"):
        parse_document("big.docx", docx_with_body(body))


def test_a_docx_within_the_limits_still_reads_its_tables(settings):
    settings.DOCX_MAX_PARAGRAPHS = 50
    row = b"<w:tr>" + CELL * 2 + b"</w:tr>"

    parsed = parse_document("ok.docx", docx_with_body(PARAGRAPH * 10 + b"<w:tbl>" + row * 5 + b"</w:tbl>"))

    assert "Words. | Words." in parsed.sections[0].text


def test_the_pdf_page_limit_is_a_setting(settings):
    settings.PDF_MAX_PAGES = 3
    writer = PdfWriter()
    for _ in range(4):
        writer.add_blank_page(width=72, height=72)
    buffer = io.BytesIO()
    writer.write(buffer)

    with pytest.raises(ParseError, match="4 pages, over the limit of 3"):
        parse_document("long.pdf", buffer.getvalue())


def test_html_with_too_many_elements_is_refused_and_says_so(settings):
    settings.HTML_MAX_ELEMENTS = 1000

    with pytest.raises(ParseError, match="more than 1,000 elements, over the limit"):
        parse_document("flood.html", b"<p>x</p>" * 1001)
    assert parse_document("fine.html", b"<p>x</p>" * 1000).sections
