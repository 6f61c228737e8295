"""HTML: headings, block elements and tables, skipping scripts and styles."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

from django.conf import settings

from .decoding import decode_text
from .document import Block, ParseError
from .headings import markup_heading
from .text import flush_paragraph

# Not "head": HTML may omit </head>, and skipping to a close tag that never comes loses the page.
_HTML_SKIP = frozenset({"script", "style", "noscript", "template", "title"})
_BR = "\ue000"  # marks <br> until whitespace is collapsed; str.split() would eat a real "\n"
_HTML_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_HTML_BLOCKS = frozenset(
    ["p", "div", "section", "article", "header", "footer", "main", "aside", "nav", "blockquote", "pre", "dl", "dt", "dd", "figure", "figcaption", "caption", "form", "address", "hr", "li", "ul", "ol", "table", "tr", "td", "th"]
) | frozenset(_HTML_HEADINGS)


class _HtmlReader(HTMLParser):
    """Collect headings, paragraphs, list items and table rows in document order."""

    def __init__(self, *, max_elements: int) -> None:
        super().__init__(convert_charrefs=True)
        # Work grows with the tags, not the bytes: "<p>" is three bytes, so the file size
        # alone lets through millions of elements.
        self.elements_left = max_elements
        self.max_elements = max_elements
        self.blocks: list[Block] = []
        self.text: list[str] = []
        self.skip_depth = 0
        self.pre_depth = 0
        self.list_lines: list[str] = []
        self.list_depth = 0
        self.tables: list[_HtmlTable] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements_left -= 1
        if self.elements_left < 0:
            raise ParseError(f"the HTML has more than {self.max_elements:,} elements, over the limit; split it")
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
            heading = markup_heading(_HTML_HEADINGS[tag], "".join(self.text))
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
        flush_paragraph(self.list_lines, self.blocks)

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
                flush_paragraph(self.list_lines, self.blocks)
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


def read_html(data: bytes) -> list[Block]:
    reader = _HtmlReader(max_elements=settings.HTML_MAX_ELEMENTS)
    reader.feed(decode_text(data))
    reader.close()
    return reader.blocks
