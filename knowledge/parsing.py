"""Turn uploaded files into titled, numbered sections of plain text."""

from __future__ import annotations

import codecs
import io
import re
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser

SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(
    {".md", ".markdown", ".txt", ".html", ".htm", ".pdf", ".docx"}
)


class ParseError(Exception):
    """A document that cannot be read; str(e) is a clear human-readable message for the user."""


@dataclass(frozen=True)
class Section:
    """One heading and the body text up to the next heading."""

    index: str  # "2.1": the heading's own number, else its position in the outline
    title: str  # heading text without its number; "" for text before the first heading
    level: int  # heading depth 1..6; 0 for the preamble and the document-title heading
    chapter_level_1: str  # title of the enclosing level-1 heading ("" if none)
    chapter_level_2: str  # title of the enclosing level-2 heading ("" if none)
    text: str  # paragraphs separated by blank lines; table rows as "cell | cell"


@dataclass(frozen=True)
class ParsedDocument:
    """A document's title and its sections in reading order."""

    title: str
    sections: tuple[Section, ...]

    @property
    def char_count(self) -> int:
        return sum(len(section.text) for section in self.sections)


@dataclass(frozen=True)
class _Heading:
    level: int  # 0 marks the document's own title
    title: str
    number: tuple[int, ...] = ()  # (2, 1) for "2.1", (2,) for "第二章" or "二、"


_Block = _Heading | str  # a str block is one paragraph (or a whole table / list)


# --- decoding ------------------------------------------------------------------------------

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE, whose BOM is its prefix
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_CONTROL_BYTES = bytes(b for b in range(32) if b not in b"\t\n\r\f\v\x1b")
# Wrongly decoded Chinese shows up as kana, bopomofo, Greek, box drawing or private-use code
# points; correctly decoded text has almost none of them.
_ODD_CHARS = re.compile(
    r"[^\x00-\x7f\u00a0-\u00ff\u2000-\u24ff\u3000-\u303f\u3200-\u33ff\u4e00-\u9fff\uff00-\uffef]"
)


def decode_text(data: bytes) -> str:
    """Decode text bytes of unknown encoding, preferring UTF-8, then GB18030 or Big5."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(encoding, errors="replace")
    if _is_binary(data):
        raise ParseError("binary content, not a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return _decode_legacy_chinese(data)


def _is_binary(data: bytes) -> bool:
    if b"\x00" in data:
        return True
    sample = data[:8192]
    control = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    return control > len(sample) * 0.05


def _decode_legacy_chinese(data: bytes) -> str:
    simplified = _try_decode(data, "gb18030")
    traditional = _try_decode(data, "big5") or _try_decode(data, "cp950")
    if simplified is None or traditional is None:
        return simplified or traditional or _decode_best_guess(data)
    # Big5 bytes nearly always decode as GB18030 too, so "it decodes" decides nothing.
    odd_simplified, odd_traditional = _odd_count(simplified), _odd_count(traditional)
    if odd_simplified != odd_traditional:
        return simplified if odd_simplified < odd_traditional else traditional
    return traditional if _is_big5_guess(data) else simplified


def _try_decode(data: bytes, encoding: str) -> str | None:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        return None


def _odd_count(text: str) -> int:
    return len(_ODD_CHARS.findall(text))


def _is_big5_guess(data: bytes) -> bool:
    """Ask charset-normalizer to settle short texts that both decodings read cleanly."""
    from charset_normalizer import from_bytes

    best = from_bytes(data, cp_isolation=["gb18030", "big5"]).best()
    return best is not None and best.encoding in ("big5", "cp950")


def _decode_best_guess(data: bytes) -> str:
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    return str(best) if best is not None else data.decode("utf-8", errors="replace")


# --- heading numbers -----------------------------------------------------------------------

_CN_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6,
              "七": 7, "八": 8, "九": 9}  # fmt: skip
_CN_NUM = "[零〇一二两三四五六七八九十百]+"
_SPACE = r"[\s\u3000]"
_CHAPTER = re.compile(
    rf"^第{_SPACE}*({_CN_NUM}|\d+){_SPACE}*(编|篇|部分|章|节|条){_SPACE}*[:：]?{_SPACE}*(.*)$"
)
_CN_ITEM = re.compile(rf"^({_CN_NUM})[、.．]{_SPACE}*(\S.*)$")
_CN_PAREN = re.compile(rf"^[（(]({_CN_NUM})[）)]{_SPACE}*(\S.*)$")
_DOTTED = re.compile(rf"^(\d{{1,2}}(?:[.．]\d{{1,3}}){{0,5}})([.．、]?)({_SPACE}*)(\S.*)$")
# Style ranks order heading kinds from outermost to innermost; dotted numbers add their depth.
_CHAPTER_RANKS = {"编": 0, "篇": 0, "部分": 0, "章": 1, "节": 2, "条": 3}
_CN_ITEM_RANK, _CN_PAREN_RANK, _DOTTED_RANK = 4, 5, 5


@dataclass(frozen=True)
class _Numbered:
    number: tuple[int, ...]
    title: str
    rank: int
    is_list_like: bool  # "1." and "1、" also start list items, so plain text does not trust them


def _cn_to_int(numeral: str) -> int:
    if numeral.isdigit():
        return int(numeral)
    total, digit = 0, 0
    for char in numeral:
        if char in "十百":
            total += (digit or 1) * (10 if char == "十" else 100)
            digit = 0
        else:
            digit = _CN_DIGITS[char]
    return total + digit


def _parse_numbered(line: str) -> _Numbered | None:
    """Split "2.1 施工准备", "第二章 总则", "一、概述" or "（一）范围" into number and title."""
    if match := _CHAPTER.match(line):
        numeral, kind, title = match.groups()
        number = (_cn_to_int(numeral),)
        return _Numbered(number, title.strip() or line, _CHAPTER_RANKS[kind], False)
    if match := _CN_PAREN.match(line):
        return _Numbered((_cn_to_int(match[1]),), match[2].strip(), _CN_PAREN_RANK, False)
    if match := _CN_ITEM.match(line):
        return _Numbered((_cn_to_int(match[1]),), match[2].strip(), _CN_ITEM_RANK, False)
    if match := _DOTTED.match(line):
        return _parse_dotted(match)
    return None


def _parse_dotted(match: re.Match[str]) -> _Numbered | None:
    number, delimiter, space, title = match.groups()
    parts = tuple(int(part) for part in re.split("[.．]", number))
    # "3D打印" and "20年来" are words, not numbered titles; "2.1施工准备" is numbered.
    is_glued = not delimiter and not space and (len(parts) == 1 or not _is_cjk(title[0]))
    if is_glued or title[0].isdigit():
        return None
    is_list_like = len(parts) == 1 and bool(delimiter)
    return _Numbered(parts, title.strip(), _DOTTED_RANK + len(parts), is_list_like)


def _is_cjk(char: str) -> bool:
    return "\u4e00" <= char <= "\u9fff"


def _markup_heading(level: int, text: str) -> _Heading | None:
    """Build a heading whose level the markup gives; its number, if any, comes from the text."""
    text = " ".join(text.split())
    if not text:
        return None
    numbered = _parse_numbered(text)
    if numbered is None or not numbered.title:
        return _Heading(level, text)
    return _Heading(level, numbered.title, numbered.number)


# --- plain text and PDF text ---------------------------------------------------------------

_SENTENCE_END = tuple("。！？!?；;：:，,、")
_TOC_LEADER = re.compile(r"\.{4,}|…{2,}|·{4,}|\s\d+$")


def _text_heading(line: str) -> _Numbered | None:
    """Return the numbering of a short line that reads as a numbered heading."""
    line = line.strip()
    if not 2 <= len(line) <= 40 or line.endswith(_SENTENCE_END) or _TOC_LEADER.search(line):
        return None
    numbered = _parse_numbered(line)
    if numbered is None or numbered.is_list_like or "|" in numbered.title:
        return None
    has_letter = re.search(r"[^\W\d_]", numbered.title) is not None
    return numbered if has_letter and len(numbered.title) <= 30 else None


def _text_blocks(lines: Iterable[str]) -> list[_Block]:
    """Split lines into numbered headings and blank-line separated paragraphs."""
    lines = list(lines)
    numbered = [_text_heading(line) for line in lines]
    levels = _levels_by_rank({n.rank for n in numbered if n is not None})
    blocks: list[_Block] = []
    paragraph: list[str] = []
    for line, heading in zip(lines, numbered, strict=True):
        if heading is not None or not line.strip():
            _flush_paragraph(paragraph, blocks)
        if heading is not None:
            blocks.append(_Heading(levels[heading.rank], heading.title, heading.number))
        elif line.strip():
            paragraph.append(line.rstrip())
    _flush_paragraph(paragraph, blocks)
    return blocks


def _levels_by_rank(ranks: set[int]) -> dict[int, int]:
    # A document with only "一、" and "（一）" headings gets levels 1 and 2, not 5 and 6.
    return {rank: min(position + 1, 6) for position, rank in enumerate(sorted(ranks))}


def _flush_paragraph(paragraph: list[str], blocks: list[_Block]) -> None:
    text = "\n".join(paragraph).strip()
    if text:
        blocks.append(text)
    paragraph.clear()


def _read_text(data: bytes) -> list[_Block]:
    return _text_blocks(decode_text(data).splitlines())


# --- Markdown --------------------------------------------------------------------------------

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_INLINE = (
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),  # links and images keep their text
    (re.compile(r"(\*\*|__)(.+?)\1"), r"\2"),
    (re.compile(r"`([^`]+)`"), r"\1"),
)


@dataclass
class _MarkdownReader:
    """Walk Markdown lines once, keeping the open paragraph and fence."""

    blocks: list[_Block] = field(default_factory=list)
    paragraph: list[str] = field(default_factory=list)
    fence: str = ""

    def feed(self, line: str) -> None:
        if self.fence:
            self._feed_code(line)
        elif fence := _FENCE.match(line):
            _flush_paragraph(self.paragraph, self.blocks)
            self.fence = fence[1]
        elif atx := _ATX.match(line):
            _flush_paragraph(self.paragraph, self.blocks)
            self._add_heading(len(atx[1]), atx[2] or "")
        elif self.paragraph and (setext := _SETEXT.match(line)):
            text = " ".join(self.paragraph)
            self.paragraph.clear()  # a setext heading is the paragraph it underlines
            self._add_heading(1 if setext[1][0] == "=" else 2, text)
        elif not line.strip() or _THEMATIC_BREAK.match(line):
            _flush_paragraph(self.paragraph, self.blocks)
        elif not _TABLE_RULE.match(line):
            self.paragraph.append(_markdown_line(line))

    def _feed_code(self, line: str) -> None:
        # Code keeps its lines verbatim: a "#" in it is a comment, not a heading.
        if line.strip().startswith(self.fence[0] * len(self.fence)) and not line.strip("`~ \t"):
            _flush_paragraph(self.paragraph, self.blocks)
            self.fence = ""
        else:
            self.paragraph.append(line.rstrip())

    def _add_heading(self, level: int, text: str) -> None:
        heading = _markup_heading(level, _strip_inline(text))
        if heading is not None:
            self.blocks.append(heading)


def _markdown_line(line: str) -> str:
    stripped = line.strip()
    if stripped.startswith("|") and stripped.endswith("|"):
        return " | ".join(cell.strip() for cell in stripped[1:-1].split("|"))
    return _strip_inline(re.sub(r"^\s*>\s?", "", line.rstrip()))


def _strip_inline(text: str) -> str:
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    return text


def _read_markdown(data: bytes) -> list[_Block]:
    text = decode_text(data)
    # YAML front matter is metadata, not content.
    text = re.sub(r"\A---\r?\n.*?\r?\n---[ \t]*(?:\r?\n|\Z)", "", text, flags=re.DOTALL)
    reader = _MarkdownReader()
    for line in text.splitlines():
        reader.feed(line)
    _flush_paragraph(reader.paragraph, reader.blocks)
    return reader.blocks


# --- HTML ------------------------------------------------------------------------------------

# Not "head": HTML may omit </head>, and skipping to a close tag that never comes loses the page.
_HTML_SKIP = frozenset({"script", "style", "noscript", "template", "title"})
_BR = "\ue000"  # marks <br> until whitespace is collapsed; str.split() would eat a real "\n"
_HTML_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_HTML_BLOCKS = frozenset(
    ["p", "div", "section", "article", "header", "footer", "main", "aside", "nav", "blockquote", "pre", "dl", "dt", "dd", "figure", "figcaption", "caption", "form", "address", "hr", "li", "ul", "ol", "table", "tr", "td", "th"]
) | frozenset(_HTML_HEADINGS)


class _HtmlReader(HTMLParser):
    """Collect headings, paragraphs, list items and table rows in document order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[_Block] = []
        self.text: list[str] = []
        self.skip_depth = 0
        self.pre_depth = 0
        self.list_lines: list[str] = []
        self.list_depth = 0
        self.tables: list[_HtmlTable] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HTML_SKIP:
            self.skip_depth += 1
        elif tag == "br":
            self.text.append(_BR)
        elif tag in _HTML_BLOCKS:
            self._flush()
            self._open_block(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in _HTML_SKIP:
            self.skip_depth = max(0, self.skip_depth - 1)
        elif tag in _HTML_HEADINGS and not self.tables:
            heading = _markup_heading(_HTML_HEADINGS[tag], "".join(self.text))
            self.text.clear()
            self.blocks.extend([heading] if heading else [])
        elif tag in _HTML_BLOCKS:
            self._flush()
            self._close_block(tag)

    def handle_data(self, data: str) -> None:
        if not self.skip_depth:
            self.text.append(data)

    def close(self) -> None:
        super().close()
        self._flush()
        while self.tables:  # tables left open by sloppy markup
            self._close_block("table")
        _flush_paragraph(self.list_lines, self.blocks)

    def _open_block(self, tag: str) -> None:
        if tag == "pre":
            self.pre_depth += 1
        elif tag in ("ul", "ol"):
            self.list_depth += 1
        elif tag == "table":
            self.tables.append(_HtmlTable())
        elif self.tables and tag in ("tr", "td", "th"):
            self.tables[-1].open(tag)

    def _close_block(self, tag: str) -> None:
        if tag == "pre":
            self.pre_depth = max(0, self.pre_depth - 1)
        elif tag in ("ul", "ol"):
            self.list_depth = max(0, self.list_depth - 1)
            if not self.list_depth:
                _flush_paragraph(self.list_lines, self.blocks)
        elif tag == "table" and self.tables:
            self._emit(self.tables.pop().text(), is_table=True)
        elif self.tables and tag in ("tr", "td", "th"):
            self.tables[-1].close(tag)

    def _flush(self) -> None:
        raw = "".join(self.text)
        self.text.clear()
        if self.pre_depth:
            text = raw.replace(_BR, "\n").strip("\n")
        else:
            text = "\n".join(" ".join(line.split()) for line in raw.split(_BR)).strip()
        if text:
            self._emit(text, is_table=False)

    def _emit(self, text: str, *, is_table: bool) -> None:
        if self.tables:
            self.tables[-1].add_text(text.replace("\n", "; ") if is_table else text)
        elif self.list_depth and not is_table:
            self.list_lines.append("  " * (self.list_depth - 1) + "- " + text)
        elif text:
            self.blocks.append(text)


@dataclass
class _HtmlTable:
    """Rows of one table; cells are "|"-joined when their row closes."""

    rows: list[str] = field(default_factory=list)
    cells: list[str] | None = None
    cell: list[str] | None = None

    def open(self, tag: str) -> None:
        self.close("tr" if tag == "tr" else "td")
        if self.cells is None:
            self.cells = []
        if tag != "tr":
            self.cell = []

    def close(self, tag: str) -> None:
        if self.cell is not None:
            self.cells = (self.cells or []) + [" ".join(self.cell)]
            self.cell = None
        if tag == "tr" and self.cells is not None:
            if any(self.cells):
                self.rows.append(" | ".join(self.cells))
            self.cells = None

    def add_text(self, text: str) -> None:
        if self.cell is None:
            self.open("td")  # text outside any cell, such as a caption, becomes a cell
        self.cell.append(text)

    def text(self) -> str:
        self.close("tr")
        return "\n".join(self.rows)


def _read_html(data: bytes) -> list[_Block]:
    reader = _HtmlReader()
    reader.feed(decode_text(data))
    reader.close()
    return reader.blocks


# --- PDF -------------------------------------------------------------------------------------

_PAGE_NUMBER = re.compile(
    r"^\s*(?:[-–—]\s*\d{1,4}\s*[-–—]|\d{1,4}|第\s*\d+\s*页.*|\d+\s*/\s*\d+)\s*$"
)
_PARAGRAPH_END = tuple("。！？!?；:：")


def _read_pdf(data: bytes) -> list[_Block]:
    if b"%PDF" not in data[:1024]:
        raise ParseError("not a valid PDF (no %PDF header)")
    pages = _pdf_page_texts(_open_pdf(data))
    if not "".join(pages).strip():
        raise ParseError("the PDF has no extractable text (scanned images?)")
    lines = [line for page in pages for line in page.splitlines() if not _PAGE_NUMBER.match(line)]
    return _text_blocks(_reflow_pdf_lines(lines))


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
        if not line or _text_heading(line):
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


# --- DOCX ------------------------------------------------------------------------------------

_DOCX_HEADING_STYLE = re.compile(r"^(?:heading|标题)\s*(\d)$", re.IGNORECASE)
_DOCX_TITLE_STYLES = frozenset({"title", "标题"})


def _read_docx(data: bytes) -> list[_Block]:
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise ParseError("not a valid .docx (not a zip archive)")
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
        blocks = [_docx_block(item) for item in document.iter_inner_content()]
    # python-docx raises KeyError, ValueError, lxml errors... for broken packages.
    except Exception as error:
        message = "not a valid .docx (the Word document inside is missing or damaged)"
        raise ParseError(message) from error
    blocks = [block for block in blocks if block]
    if any(isinstance(block, _Heading) for block in blocks):
        return blocks
    # Without heading styles, fall back to numbered lines as in plain text.
    return _text_blocks(line for block in blocks for line in (*block.splitlines(), ""))


def _docx_block(item) -> _Block | None:
    from docx.table import Table

    if isinstance(item, Table):
        return _docx_table_text(item)
    name = (item.style.name if item.style is not None else "") or ""
    if name.strip().lower() in _DOCX_TITLE_STYLES:
        return _markup_heading(0, item.text)
    if match := _DOCX_HEADING_STYLE.match(name.strip()):
        return _markup_heading(min(int(match[1]), 6), item.text)
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


# --- sections --------------------------------------------------------------------------------


@dataclass
class _OpenHeading:
    level: int
    index: str
    title: str
    children: int = 0


@dataclass
class _Outline:
    """The chain of headings enclosing the current position, for numbering and chapters."""

    stack: list[_OpenHeading] = field(default_factory=list)
    top_count: int = 0

    def enter(self, heading: _Heading) -> _OpenHeading:
        if heading.level == 0:
            self.stack.clear()
            return _OpenHeading(0, "", heading.title)
        while self.stack and self.stack[-1].level >= heading.level:
            self.stack.pop()
        parent = self.stack[-1] if self.stack else None
        opened = _OpenHeading(heading.level, self._index(heading, parent), heading.title)
        self.stack.append(opened)
        return opened

    def _index(self, heading: _Heading, parent: _OpenHeading | None) -> str:
        siblings = parent.children if parent else self.top_count
        position = heading.number[-1] if heading.number else siblings + 1
        if parent:
            parent.children = position
        else:
            self.top_count = position
        if len(heading.number) > 1 or parent is None:
            return ".".join(map(str, heading.number or (position,)))
        return f"{parent.index}.{position}"

    def chapter(self, level: int) -> str:
        return next((h.title for h in self.stack if h.level == level), "")


def _build_sections(blocks: list[_Block]) -> tuple[Section, ...]:
    outline = _Outline()
    sections: list[Section] = []
    current, body = _OpenHeading(0, "", ""), []
    chapters = ("", "")
    for block in _normalise_levels(blocks):
        if isinstance(block, str):
            body.append(block)
            continue
        _close_section(sections, current, chapters, body)
        current, body = outline.enter(block), []
        chapters = (outline.chapter(1), outline.chapter(2)) if block.level else ("", "")
    _close_section(sections, current, chapters, body)
    return tuple(sections)


def _close_section(
    sections: list[Section], heading: _OpenHeading, chapters: tuple[str, str], body: list[str]
) -> None:
    text = "\n\n".join(body)
    is_empty_preamble = not heading.title and heading.level == 0 and not text
    if not is_empty_preamble:
        sections.append(Section(heading.index, heading.title, heading.level, *chapters, text))


def _normalise_levels(blocks: list[_Block]) -> list[_Block]:
    """Treat a lone unnumbered top heading as the document title; start levels at 1."""
    headings = [b for b in blocks if isinstance(b, _Heading) and b.level > 0]
    if not headings:
        return blocks
    top = min(h.level for h in headings)
    first = headings[0]
    is_title = first.level == top and not first.number and len(headings) > 1
    is_title = is_title and sum(h.level == top for h in headings) == 1
    if is_title:
        top = min(h.level for h in headings[1:])
    return [_shift_heading(b, top, is_title and b is first) for b in blocks]


def _shift_heading(block: _Block, top: int, is_title: bool) -> _Block:
    if isinstance(block, str) or block.level == 0:
        return block
    level = 0 if is_title else block.level - top + 1
    return _Heading(level, block.title, block.number)


# --- entry point -----------------------------------------------------------------------------

_READERS: dict[str, Callable[[bytes], list[_Block]]] = {
    ".md": _read_markdown,
    ".markdown": _read_markdown,
    ".txt": _read_text,
    ".html": _read_html,
    ".htm": _read_html,
    ".pdf": _read_pdf,
    ".docx": _read_docx,
}


def parse_document(name: str, data: bytes) -> ParsedDocument:
    """Parse an uploaded file into sections, choosing the reader by file extension."""
    stem, extension = _split_name(name)
    reader = _READERS.get(extension)
    if reader is None:
        shown = f"'{extension}'" if extension else "(no extension)"
        supported = ", ".join(sorted(SUPPORTED_EXTENSIONS))
        raise ParseError(f"unsupported file type {shown}; supported types: {supported}")
    if not data.strip():
        raise ParseError("the file is empty")
    try:
        blocks = reader(data)
    except ParseError:
        raise
    # Malformed input can reach library code paths we cannot list; the user still needs a
    # message, and the cause stays chained for the log.
    except Exception as error:
        message = f"could not read the {extension} file ({type(error).__name__})"
        raise ParseError(message) from error
    if not blocks:
        raise ParseError("the file is empty")
    title = next((b.title for b in blocks if isinstance(b, _Heading)), stem)
    return ParsedDocument(title, _build_sections(blocks))


def _split_name(name: str) -> tuple[str, str]:
    base = re.split(r"[\\/]", name)[-1]
    stem, dot, extension = base.rpartition(".")
    if not dot:
        return base, ""
    return stem or base, "." + extension.lower()
