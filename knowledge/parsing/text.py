"""Plain text (and text extracted from PDF and DOCX): numbered headings and paragraphs."""

from __future__ import annotations

import re
from collections.abc import Iterable

from .decoding import decode_text
from .document import Block, Heading
from .headings import Numbered, parse_numbered

_SENTENCE_END = tuple("。！？!?；;：:，,、")
_TOC_LEADER = re.compile(r"\.{4,}|…{2,}|·{4,}|\s\d+$")


def text_heading(line: str) -> Numbered | None:
    """Return the numbering of a short line that reads as a numbered heading."""
    line = line.strip()
    if not 2 <= len(line) <= 40 or line.endswith(_SENTENCE_END) or _TOC_LEADER.search(line):
        return None
    numbered = parse_numbered(line)
    if numbered is None or numbered.is_list_like or "|" in numbered.title:
        return None
    has_letter = re.search(r"[^\W\d_]", numbered.title) is not None
    return numbered if has_letter and len(numbered.title) <= 30 else None


def text_blocks(lines: Iterable[str]) -> list[Block]:
    """Split lines into numbered headings and blank-line separated paragraphs."""
    lines = list(lines)
    numbered = _with_structure([text_heading(line) for line in lines], lines)
    levels = _levels_by_rank({n.rank for n in numbered if n is not None})
    blocks: list[Block] = []
    paragraph: list[str] = []
    for line, heading in zip(lines, numbered, strict=True):
        if heading is not None or not line.strip():
            flush_paragraph(paragraph, blocks)
        if heading is not None:
            blocks.append(Heading(levels[heading.rank], heading.title, heading.number))
        elif line.strip():
            paragraph.append(line.rstrip())
    flush_paragraph(paragraph, blocks)
    return blocks


def _with_structure(numbered: list[Numbered | None], lines: list[str]) -> list[Numbered | None]:
    """Keep a numbered line as a heading only when body text or a subsection follows it.

    "14 前卫 青岛中能青年队" followed by "15 中场 …" is a list, and "14 abc" alone is a
    one-line note: read as headings, their text had no body and was lost.
    """
    kept: list[Numbered | None] = []
    for position, heading in enumerate(numbered):
        following = next(
            ((numbered[i], lines[i]) for i in range(position + 1, len(lines)) if lines[i].strip()), None
        )
        if heading is not None and following is not None:
            next_heading, _ = following
            is_followed_by_body = next_heading is None
            # an inner kind of heading ("第二章" then "一、", "1" then "1.1") opens a subsection
            opens_subsection = next_heading is not None and next_heading.rank > heading.rank
            heading = heading if is_followed_by_body or opens_subsection else None
        elif heading is not None:
            heading = None  # the last line: nothing follows it
        kept.append(heading)
    return kept


def _levels_by_rank(ranks: set[int]) -> dict[int, int]:
    # A document with only "一、" and "（一）" headings gets levels 1 and 2, not 5 and 6.
    return {rank: min(position + 1, 6) for position, rank in enumerate(sorted(ranks))}


def flush_paragraph(paragraph: list[str], blocks: list[Block]) -> None:
    text = "\n".join(paragraph).strip()
    if text:
        blocks.append(text)
    paragraph.clear()


def read_text(data: bytes) -> list[Block]:
    return text_blocks(decode_text(data).splitlines())
