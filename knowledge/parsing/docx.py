"""DOCX: heading styles, paragraphs and tables in body order, in bounded memory and time.

A .docx is a zip of XML parts. Its XML parts are inflated here in bounded reads, counting
the bytes that come out whatever the archive declares, and its images and embedded files are
never inflated. The XML is counted (paragraphs, table cells, elements) by a streaming parse
before python-docx builds a tree, and python-docx then reads an uncompressed copy of those
parts, so it never inflates the upload itself. The body is read with precompiled XPath
instead of python-docx's proxies, which compile an XPath and scan every style per paragraph.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from dataclasses import dataclass

from django.conf import settings
from lxml import etree

from .document import Block, Heading, ParseError
from .headings import markup_heading
from .text import text_blocks

_DOCX_HEADING_STYLE = re.compile(r"^(?:heading|标题)\s*(\d)$", re.IGNORECASE)
_DOCX_TITLE_STYLES = frozenset({"title", "标题"})
_MB = 1024 * 1024
_CHUNK = 64 * 1024
# Word writes a few dozen parts, a few thousand with many images; each part of a zip costs
# memory before any is read, so an archive of a million empty parts is refused by its count.
_MAX_PARTS = 10_000
_CENTRAL_DIRECTORY_ENTRY = b"PK\x01\x02"
_XML_SUFFIXES = (".xml", ".rels")

_NS = {"w": "http://schemas.openxmlformats.org/wordprocessingml/2006/main"}
_W = f"{{{_NS['w']}}}"
_P, _TBL, _TR, _TC = _W + "p", _W + "tbl", _W + "tr", _W + "tc"
# What python-docx's Paragraph.text reads: the text-bearing children of runs, also in links.
_RUN_TEXT = ("br", "cr", "noBreakHyphen", "ptab", "t", "tab")
_PARAGRAPH_TEXT = etree.XPath(
    " | ".join(f"{run}/w:{tag}" for run in ("w:r", "w:hyperlink/w:r") for tag in _RUN_TEXT), namespaces=_NS
)
_STYLE_ID = etree.XPath("string(w:pPr/w:pStyle/@w:val)", namespaces=_NS)
_GRID_BEFORE = etree.XPath("number(w:trPr/w:gridBefore/@w:val)", namespaces=_NS)
_GRID_SPAN = etree.XPath("number(w:tcPr/w:gridSpan/@w:val)", namespaces=_NS)
# A w:vMerge without a value continues the merge, as one saying "continue" does.
_IS_MERGED_DOWN = etree.XPath("boolean(w:tcPr/w:vMerge[not(@w:val) or @w:val='continue'])", namespaces=_NS)


def read_docx(data: bytes) -> list[Block]:
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise ParseError("not a valid .docx (not a zip archive)")
    parts = inflate_xml_parts(data, settings.DOCX_MAX_EXPANDED_MB * _MB)
    check_element_counts(parts.values(), DocxLimits.from_settings())
    document = _open_document(parts)
    try:
        blocks = _body_blocks(document)
    # python-docx raises KeyError, ValueError, lxml errors... for broken packages.
    except Exception as error:
        raise ParseError("not a valid .docx (the Word document inside is damaged)") from error
    blocks = [block for block in blocks if block]
    if any(isinstance(block, Heading) for block in blocks):
        return blocks
    # Without heading styles, fall back to numbered lines as in plain text.
    return text_blocks(line for block in blocks for line in (*block.splitlines(), ""))


def inflate_xml_parts(data: bytes, max_bytes: int) -> dict[str, bytes]:
    """Inflate the archive's XML parts up to max_bytes in all, its other parts to b""."""
    if data.count(_CENTRAL_DIRECTORY_ENTRY) > _MAX_PARTS:
        raise ParseError(f"the .docx holds more than {_MAX_PARTS:,} parts, over the limit")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = [info for info in archive.infolist() if not info.is_dir()]
            _check_declared_size(members, max_bytes)
            budget = _ByteBudget(max_bytes)
            return {info.filename: _inflate(archive, info, budget) if _is_xml(info) else b"" for info in members}
    # zipfile raises these for damaged archives, RuntimeError for encrypted members.
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, zlib.error) as error:
        raise ParseError("not a valid .docx (the zip archive is damaged)") from error


def _is_xml(info: zipfile.ZipInfo) -> bool:
    return info.filename.lower().endswith(_XML_SUFFIXES)


def _check_declared_size(members: list[zipfile.ZipInfo], max_bytes: int) -> None:
    # What the archive declares is no bound (_inflate counts what comes out), but a bomb that
    # declares its size is refused here before any of it is inflated.
    declared = sum(info.file_size for info in members if _is_xml(info))
    if declared > max_bytes:
        limit = max_bytes // _MB
        raise ParseError(f"the .docx would expand to {declared / _MB:,.0f} MB, over the limit of {limit} MB")


@dataclass
class _ByteBudget:
    left: int

    def spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise ParseError("the .docx expands to more than its limit allows; it may be a zip bomb")


def _inflate(archive: zipfile.ZipFile, info: zipfile.ZipInfo, budget: _ByteBudget) -> bytes:
    # Only deflate is bounded per read: zipfile inflates bzip2 and LZMA reads whole. Word
    # writes neither.
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise ParseError("not a valid .docx (a part uses a compression Word does not write)")
    pieces = []
    with archive.open(info) as member:
        while piece := member.read(_CHUNK):
            budget.spend(len(piece))
            pieces.append(piece)
    return b"".join(pieces)


@dataclass(frozen=True)
class DocxLimits:
    """How many paragraphs, table cells and XML elements a .docx may hold in all its parts."""

    paragraphs: int
    table_cells: int
    elements: int

    @classmethod
    def from_settings(cls) -> DocxLimits:
        return cls(settings.DOCX_MAX_PARAGRAPHS, settings.DOCX_MAX_TABLE_CELLS, settings.DOCX_MAX_ELEMENTS)


class _ElementCounter:
    """An lxml parser target that counts elements as they stream by, building no tree."""

    def __init__(self, limits: DocxLimits) -> None:
        self.limits = limits
        self.paragraphs = self.table_cells = self.elements = 0

    def start(self, tag: str, attrib: dict) -> None:
        self.elements += 1
        self.paragraphs += tag == _P
        self.table_cells += tag == _TC
        limits = self.limits
        for count, limit, what in (
            (self.paragraphs, limits.paragraphs, "paragraphs"),
            (self.table_cells, limits.table_cells, "table cells"),
            (self.elements, limits.elements, "XML elements"),
        ):
            if count > limit:
                raise ParseError(f"the .docx has more than {limit:,} {what}, over the limit; split it")

    def close(self) -> None:
        return None


def check_element_counts(parts, limits: DocxLimits) -> None:
    """Refuse XML parts holding more elements than the limits, before any tree is built."""
    counter = _ElementCounter(limits)
    for xml in parts:
        if not xml:
            continue
        parser = etree.XMLParser(target=counter, resolve_entities=False, no_network=True)
        try:
            parser.feed(xml)
            parser.close()
        except etree.XMLSyntaxError as error:
            raise ParseError("not a valid .docx (a part is not well-formed XML)") from error


def _open_document(parts: dict[str, bytes]):
    import docx

    stored = io.BytesIO()
    with zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    try:
        return docx.Document(stored)
    # Same reason as in read_docx.
    except Exception as error:
        raise ParseError("not a valid .docx (the Word document inside is missing or damaged)") from error


def _body_blocks(document) -> list[Block | None]:
    styles = _paragraph_style_names(document)
    body = document.element.body
    return [
        _paragraph_block(item, styles) if item.tag == _P else _table_text(item)
        for item in body.iterchildren(_P, _TBL)
    ]


@dataclass(frozen=True)
class _StyleNames:
    by_id: dict[str, str]
    default: str


def _paragraph_style_names(document) -> _StyleNames:
    # As python-docx resolves a paragraph's style: its id among paragraph styles, else the default.
    from docx.enum.style import WD_STYLE_TYPE

    styles = document.styles
    by_id = {s.style_id: s.name or "" for s in styles if s.type == WD_STYLE_TYPE.PARAGRAPH}
    default = styles.default(WD_STYLE_TYPE.PARAGRAPH)
    return _StyleNames(by_id, (default.name or "") if default is not None else "")


def _paragraph_block(paragraph, styles: _StyleNames) -> Block | None:
    name = styles.by_id.get(_STYLE_ID(paragraph), styles.default).strip()
    text = _paragraph_text(paragraph)
    if name.lower() in _DOCX_TITLE_STYLES:
        return markup_heading(0, text)
    if match := _DOCX_HEADING_STYLE.match(name):
        return markup_heading(min(int(match[1]), 6), text)
    return text.strip()


def _paragraph_text(paragraph) -> str:
    # python-docx's element classes turn <w:tab/> into "\t", a line <w:br/> into "\n", and so on.
    return "".join(str(element) for element in _PARAGRAPH_TEXT(paragraph))


def _table_text(table) -> str:
    rows = []
    above: dict[int, str] = {}  # by grid column: the text a vertically merged cell repeats
    for row in table.iterchildren(_TR):
        cells, column = [], _grid_count(_GRID_BEFORE(row), empty=0)
        for cell in row.iterchildren(_TC):
            text = above.get(column, "") if _IS_MERGED_DOWN(cell) else _cell_text(cell)
            above[column] = text
            cells.append(text)
            column += _grid_count(_GRID_SPAN(cell), empty=1)
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _cell_text(cell) -> str:
    return " ".join(word for paragraph in cell.iterchildren(_P) for word in _paragraph_text(paragraph).split())


def _grid_count(value: float, *, empty: int) -> int:
    return int(value) if value == value and value >= 0 else empty  # NaN: the attribute is absent
