"""The parsed document's types: what every reader returns and chunking consumes."""

from __future__ import annotations

from dataclasses import dataclass


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
class Heading:
    level: int  # 0 marks the document's own title
    title: str
    number: tuple[int, ...] = ()  # (2, 1) for "2.1", (2,) for "第二章" or "二、"
    line: str = ""  # as written, number included ("第二章 总则"); "" when it is just the title


Block = Heading | str  # a str block is one paragraph (or a whole table / list)


@dataclass(frozen=True)
class HeadingLines:
    """Where a text reader found the headings it emitted, in lines of the decoded text.

    Lines are counted as `str.splitlines` counts them, so section editing can map each
    parsed section back to the lines it was read from.
    """

    content_start: int  # the first line that is content (after YAML front matter)
    headings: tuple[tuple[int, int], ...]  # per heading: its first line, the line after its last
