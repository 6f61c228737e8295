"""DOCX (python-docx): heading styles, paragraphs and tables in body order."""

from __future__ import annotations

import io
import re
import zipfile

from .document import Block, Heading, ParseError
from .headings import markup_heading
from .text import text_blocks

_DOCX_HEADING_STYLE = re.compile(r"^(?:heading|标题)\s*(\d)$", re.IGNORECASE)
# A .docx is a zip: refuse one whose parts would expand past this (a zip bomb) before reading
# any of them. zipfile never reads a member past its declared size, so the sum is a bound.
MAX_EXPANDED_BYTES = 200 * 1024 * 1024
_DOCX_TITLE_STYLES = frozenset({"title", "标题"})


def read_docx(data: bytes) -> list[Block]:
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise ParseError("not a valid .docx (not a zip archive)")
    _check_expanded_size(data)
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
        blocks = [_docx_block(item) for item in document.iter_inner_content()]
    # python-docx raises KeyError, ValueError, lxml errors... for broken packages.
    except Exception as error:
        message = "not a valid .docx (the Word document inside is missing or damaged)"
        raise ParseError(message) from error
    blocks = [block for block in blocks if block]
    if any(isinstance(block, Heading) for block in blocks):
        return blocks
    # Without heading styles, fall back to numbered lines as in plain text.
    return text_blocks(line for block in blocks for line in (*block.splitlines(), ""))


def _check_expanded_size(data: bytes) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            expanded = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError) as error:
        raise ParseError("not a valid .docx (the zip archive is damaged)") from error
    if expanded > MAX_EXPANDED_BYTES:
        limit_mb = MAX_EXPANDED_BYTES // (1024 * 1024)
        raise ParseError(f"the .docx would expand to {expanded / 2**20:,.0f} MB, over the limit of {limit_mb} MB")


def _docx_block(item) -> Block | None:
    from docx.table import Table

    if isinstance(item, Table):
        return _docx_table_text(item)
    name = (item.style.name if item.style is not None else "") or ""
    if name.strip().lower() in _DOCX_TITLE_STYLES:
        return markup_heading(0, item.text)
    if match := _DOCX_HEADING_STYLE.match(name.strip()):
        return markup_heading(min(int(match[1]), 6), item.text)
    return item.text.strip()


def _docx_table_text(table) -> str:
    rows = []
    for row in table.rows:
        cells, previous = [], None
        for cell in row.cells:
            if cell._tc is not previous:  # a merged cell is repeated once per grid column
                cells.append(" ".join(cell.text.split()))
            previous = cell._tc
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)
