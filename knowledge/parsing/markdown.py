"""Markdown: ATX and setext headings, fences, tables and lists as paragraphs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .decoding import decode_text
from .document import Block, HeadingLines
from .headings import markup_heading
from .text import SENTENCE_END, flush_paragraph

_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# No two unbounded runs of spaces touch (each optional pipe takes the spaces after it), so a
# long line that is almost a rule fails in linear time.
_TABLE_RULE = re.compile(r"^\s*(?:\|\s*)?:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*(?:\|\s*)?$")
# YAML front matter is metadata, not content.
_FRONT_MATTER = re.compile(r"\A---\r?\n.*?\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
# Each pattern is linear in the line: a link's text holds no bracket and its target no
# parenthesis, and emphasis holds no mark of its own kind, so a failed match stops at the next
# "[", "(" or "__" instead of rescanning the rest of a long line from every opening mark.
_INLINE = (
    (re.compile(r"!?\[([^\[\]]*)\]\([^()]*\)"), r"\1"),  # links and images keep their text
    # __ only at word boundaries (not inside snake__case), and not around a dunder name
    # written without ticks ("__init__.py")
    (re.compile(r"\*\*(.+?)\*\*|(?<!\w)__(?!\w+__(?!\w))((?:(?!__).)+?)__(?!\w)"), lambda m: m[1] or m[2]),
)
_CODE_SPAN = re.compile(r"`([^`]+)`")
_INLINE_MARKS = ("[", "**", "__")
_QUOTE = re.compile(r"^\s*>\s?")
MAX_SETEXT_CHARS = 80


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
        elif atx := atx_heading(line):
            flush_paragraph(self.paragraph, self.blocks)
            self._add_heading(*atx, self.line_number)
        elif self.paragraph and (setext := _SETEXT.match(line)) and _is_setext_title(self.paragraph):
            text = " ".join(self.paragraph)
            self.paragraph.clear()  # a setext heading is the paragraph it underlines
            self._add_heading(1 if setext[1][0] == "=" else 2, text, self.paragraph_start)
        elif self.paragraph and _SETEXT.match(line):
            flush_paragraph(self.paragraph, self.blocks)  # a rule under a paragraph, not a title
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


def _is_setext_title(paragraph: list[str]) -> bool:
    """Whether a paragraph a rule underlines reads as a title: short, and not a sentence that has
    ended ("…返回回答。" over "---" is a paragraph and a rule, as its writer meant)."""
    text = " ".join(line.strip() for line in paragraph)
    return len(text) <= MAX_SETEXT_CHARS and not text.endswith((*SENTENCE_END, "."))


def atx_heading(line: str) -> tuple[int, str] | None:
    """An ATX heading's level and text ("## Setup ##" → 2, "Setup"), or None.

    Plain string work rather than a regex: a lazy heading text followed by optional spaces
    and closing marks backtracks quadratically over a long run of spaces.
    """
    marked = line.lstrip(" ")
    if len(line) - len(marked) > 3:
        return None
    level = len(marked) - len(marked.lstrip("#"))
    rest = marked[level:]
    if not 1 <= level <= 6 or (rest and rest[0] not in " \t"):
        return None
    text = rest.strip(" \t")
    unclosed = text.rstrip("#")
    if unclosed != text and unclosed[-1:] in (" ", "\t"):  # a closing sequence needs a space before it
        text = unclosed.rstrip(" \t")
    return level, text


def _markdown_line(line: str) -> str:
    stripped = line.strip()
    if stripped.startswith("|") and stripped.endswith("|"):
        return " | ".join(cell.strip() for cell in stripped[1:-1].split("|"))
    return _strip_inline(_QUOTE.sub("", line.rstrip()) if ">" in line else line.rstrip())


def _strip_inline(text: str) -> str:
    """text without links' targets, emphasis marks and code ticks; code spans keep their text
    as written (`__import__` is a name, not bold "import")."""
    if not any(mark in text for mark in _INLINE_MARKS):  # most lines: no pattern can match
        return text
    pieces = _CODE_SPAN.split(text)  # odd pieces are code spans' contents
    for i in range(0, len(pieces), 2):
        for pattern, replacement in _INLINE:
            pieces[i] = pattern.sub(replacement, pieces[i])
    return "".join(pieces)


def read_markdown(data: bytes) -> list[Block]:
    return markdown_blocks(decode_text(data))


def markdown_blocks(text: str) -> list[Block]:
    """The blocks of decoded Markdown text."""
    return _read(text).blocks


def looks_like_markdown(text: str) -> bool:
    """Whether text is written in Markdown: two ATX headings, a fenced block, or a table with its
    rule row. One mark alone is not enough: a plain text may hold a "#" line or a "```"."""
    headings = fences = 0
    previous = ""
    for line in text.splitlines():
        if (atx := atx_heading(line)) is not None and atx[1]:
            headings += 1
        elif _FENCE.match(line):
            fences += 1
        elif "|" in line and "|" in previous and _TABLE_RULE.match(line):
            return True
        if headings >= 2 or fences >= 2:
            return True
        previous = line
    return False


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
