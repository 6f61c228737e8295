"""Markdown: ATX and setext headings, fences, tables and lists as paragraphs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .decoding import decode_text
from .document import Block, HeadingLines
from .headings import markup_heading
from .text import flush_paragraph

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
# YAML front matter is metadata, not content.
_FRONT_MATTER = re.compile(r"\A---\r?\n.*?\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_INLINE = (
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),  # links and images keep their text
    # __ only at word boundaries (not inside snake__case), and not around a dunder name
    # written without ticks ("__init__.py")
    (re.compile(r"\*\*(.+?)\*\*|(?<!\w)__(?!\w+__(?!\w))(.+?)__(?!\w)"), lambda m: m[1] or m[2]),
)
_CODE_SPAN = re.compile(r"`([^`]+)`")


@dataclass
class _MarkdownReader:
    """Walk Markdown lines once, keeping the open paragraph and fence, and each heading's lines."""

    line_number: int  # of the line being fed, counted from the start of the file
    blocks: list[Block] = field(default_factory=list)
    heading_lines: list[tuple[int, int]] = field(default_factory=list)
    paragraph: list[str] = field(default_factory=list)
    paragraph_start: int = 0
    fence: str = ""

    def feed(self, line: str) -> None:
        if self.fence:
            self._feed_code(line)
        elif fence := _FENCE.match(line):
            flush_paragraph(self.paragraph, self.blocks)
            self.fence = fence[1]
        elif atx := _ATX.match(line):
            flush_paragraph(self.paragraph, self.blocks)
            self._add_heading(len(atx[1]), atx[2] or "", self.line_number)
        elif self.paragraph and (setext := _SETEXT.match(line)):
            text = " ".join(self.paragraph)
            self.paragraph.clear()  # a setext heading is the paragraph it underlines
            self._add_heading(1 if setext[1][0] == "=" else 2, text, self.paragraph_start)
        elif not line.strip() or _THEMATIC_BREAK.match(line):
            flush_paragraph(self.paragraph, self.blocks)
        elif not _TABLE_RULE.match(line):
            self._append(_markdown_line(line))
        self.line_number += 1

    def _feed_code(self, line: str) -> None:
        # Code keeps its lines verbatim: a "#" in it is a comment, not a heading.
        if line.strip().startswith(self.fence[0] * len(self.fence)) and not line.strip("`~ \t"):
            flush_paragraph(self.paragraph, self.blocks)
            self.fence = ""
        else:
            self._append(line.rstrip())

    def _append(self, text: str) -> None:
        if not self.paragraph:
            self.paragraph_start = self.line_number
        self.paragraph.append(text)

    def _add_heading(self, level: int, text: str, first_line: int) -> None:
        heading = markup_heading(level, _strip_inline(text))
        if heading is not None:
            self.blocks.append(heading)
            self.heading_lines.append((first_line, self.line_number + 1))


def _markdown_line(line: str) -> str:
    stripped = line.strip()
    if stripped.startswith("|") and stripped.endswith("|"):
        return " | ".join(cell.strip() for cell in stripped[1:-1].split("|"))
    return _strip_inline(re.sub(r"^\s*>\s?", "", line.rstrip()))


def _strip_inline(text: str) -> str:
    """text without links' targets, emphasis marks and code ticks; code spans keep their text
    as written (`__import__` is a name, not bold "import")."""
    pieces = _CODE_SPAN.split(text)  # odd pieces are code spans' contents
    for i in range(0, len(pieces), 2):
        for pattern, replacement in _INLINE:
            pieces[i] = pattern.sub(replacement, pieces[i])
    return "".join(pieces)


def read_markdown(data: bytes) -> list[Block]:
    return _read(decode_text(data)).blocks


def markdown_heading_lines(text: str) -> HeadingLines:
    """The lines of decoded Markdown that each heading read_markdown emits was read from."""
    return HeadingLines(_front_matter_lines(text), tuple(_read(text).heading_lines))


def _read(text: str) -> _MarkdownReader:
    skipped = _front_matter_lines(text)
    reader = _MarkdownReader(line_number=skipped)
    for line in text.splitlines()[skipped:]:
        reader.feed(line)
    flush_paragraph(reader.paragraph, reader.blocks)
    return reader


def _front_matter_lines(text: str) -> int:
    # The match ends at a line break (or the end), so its lines are whole lines of `text`.
    front_matter = _FRONT_MATTER.match(text)
    return len(front_matter[0].splitlines()) if front_matter else 0
