"""PDF (pypdf): page texts without page numbers, wrapped lines joined."""

from __future__ import annotations

import io
import re

from django.conf import settings

from .document import Block, ParseError
from .text import text_blocks, text_heading

_PAGE_NUMBER = re.compile(
    r"^\s*(?:[-–—]\s*\d{1,4}\s*[-–—]|\d{1,4}|第\s*\d+\s*页.*|\d+\s*/\s*\d+)\s*$"
)
_PARAGRAPH_END = tuple("。！？!?；:：")


def read_pdf(data: bytes) -> list[Block]:
    if b"%PDF" not in data[:1024]:
        raise ParseError("not a valid PDF (no %PDF header)")
    reader = _open_pdf(data)
    try:
        count = len(reader.pages)
    except Exception as error:  # same reason as in _open_pdf
        raise ParseError("not a valid PDF (its page list is damaged)") from error
    # Reading text takes time per page: a PDF longer than the limit is refused before any is read.
    if count > settings.PDF_MAX_PAGES:
        raise ParseError(f"the PDF has {count:,} pages, over the limit of {settings.PDF_MAX_PAGES:,}; split it")
    pages = _pdf_page_texts(reader)
    if not "".join(pages).strip():
        raise ParseError("the PDF has no extractable text (scanned images?)")
    lines = [line for page in pages for line in page.splitlines() if not _PAGE_NUMBER.match(line)]
    return text_blocks(_reflow_pdf_lines(lines))


def _open_pdf(data: bytes):
    from pypdf import PasswordType, PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        is_locked = reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED
    # pypdf raises many exception types on malformed files; all mean the same to the user.
    except Exception as error:
        raise ParseError("not a valid PDF (the file is damaged or truncated)") from error
    if is_locked:
        raise ParseError("the PDF is password-protected; upload an unprotected copy")
    return reader


def _pdf_page_texts(reader) -> list[str]:
    try:
        return [page.extract_text() or "" for page in reader.pages]
    except Exception as error:  # same reason as in _open_pdf
        raise ParseError("not a valid PDF (a page could not be read)") from error


def _reflow_pdf_lines(lines: list[str]) -> list[str]:
    """Join lines the PDF wrapped; end a paragraph after a sentence-final line."""
    out: list[str] = []
    current = ""
    for line in (raw.strip() for raw in lines):
        if not line or text_heading(line):
            out += [current, line, ""] if current else [line, ""]
            current = ""
            continue
        current = _join_wrapped(current, line)
        if line.endswith(_PARAGRAPH_END):
            out += [current, ""]
            current = ""
    return out + [current]


def _join_wrapped(left: str, right: str) -> str:
    if not left:
        return right
    is_latin_seam = left[-1].isascii() and right[0].isascii() and not left.endswith("-")
    return left + (" " if is_latin_seam else "") + right
