"""Plain text (and text extracted from PDF and DOCX): numbered headings and paragraphs."""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import pairwise

from .document import Block, Heading, HeadingLines
from .headings import Numbered, parse_numbered

SENTENCE_END = tuple("。！？!?；;：:，,、")  # a line ending in one of these is not a heading
_TOC_LEADER = re.compile(r"\.{4,}|…{2,}|·{4,}|\s\d+$")
_MAX_NUMBER_GAP = 3


def text_heading(line: str) -> Numbered | None:
    """Return the numbering of a short line that reads as a numbered heading."""
    line = line.strip()
    if not 2 <= len(line) <= 40 or line.endswith(SENTENCE_END) or _TOC_LEADER.search(line):
        return None
    numbered = parse_numbered(line)
    if numbered is None or numbered.is_list_like or "|" in numbered.title:
        return None
    has_letter = re.search(r"[^\W\d_]", numbered.title) is not None
    return numbered if has_letter and len(numbered.title) <= 30 else None


def numbered_lines(lines: list[str]) -> list[Numbered | None]:
    """For each line, its numbering when it reads as a heading in context, else None."""
    return _in_sequence(_outside_lists([text_heading(line) for line in lines], lines))


def text_blocks(lines: Iterable[str]) -> list[Block]:
    """Split lines into numbered headings and blank-line separated paragraphs."""
    lines = list(lines)
    numbered = numbered_lines(lines)
    levels = _levels_by_rank({n.rank for n in numbered if n is not None})
    blocks: list[Block] = []
    paragraph: list[str] = []
    for line, heading in zip(lines, numbered, strict=True):
        if heading is not None or not line.strip():
            flush_paragraph(paragraph, blocks)
        if heading is not None:
            blocks.append(Heading(levels[heading.rank], heading.title, heading.number, line.strip()))
        elif line.strip():
            paragraph.append(line.rstrip())
    flush_paragraph(paragraph, blocks)
    return blocks


def _outside_lists(numbered: list[Numbered | None], lines: list[str]) -> list[Numbered | None]:
    """Drop numbered lines in a row that read as a list, or that no body text follows.

    Lines in a row with nothing between them are headings only when each opens a
    subsection of the one before ("1 Setup" / "1.1 Install") or closes one ("1.2" / "2").
    Two of a kind in a row ("14 前卫 青岛中能青年队" / "15 中场 …") make a list.
    """
    kept = list(numbered)
    for run, is_followed_by_body in _runs(numbered, lines):
        ranks = [kept[position].rank for position in run]
        is_list = any(rank == next_rank for rank, next_rank in pairwise(ranks))
        if is_list or not is_followed_by_body:
            for position in run:
                kept[position] = None
    return kept


def _runs(numbered: list[Numbered | None], lines: list[str]) -> list[tuple[list[int], bool]]:
    """Group the positions of numbered lines with only blank lines between; say if text follows."""
    runs: list[tuple[list[int], bool]] = []
    run: list[int] = []
    for position, (heading, line) in enumerate(zip(numbered, lines, strict=True)):
        if heading is not None:
            run.append(position)
        elif line.strip() and run:
            runs.append((run, True))
            run = []
    return [*runs, (run, False)] if run else runs


def _in_sequence(numbered: list[Numbered | None]) -> list[Numbered | None]:
    """Drop headings whose number does not continue the numbering of their kind.

    "1 apples" after "2 Method" restarts a list, and a lone "14 abc" begins nothing.
    """
    kept: list[Numbered | None] = []
    latest: dict[int, tuple[int, ...]] = {}  # by rank, within the enclosing heading
    for heading, following in zip(numbered, _following(numbered), strict=True):
        if heading is not None and _continues(latest.get(heading.rank), heading, following):
            latest = {rank: number for rank, number in latest.items() if rank < heading.rank}
            latest[heading.rank] = heading.number
            kept.append(heading)
        else:
            kept.append(None)
    return kept


def _following(numbered: list[Numbered | None]) -> list[Numbered | None]:
    """Return, for each line, the next numbered line after it."""
    following: list[Numbered | None] = []
    upcoming = None
    for heading in reversed(numbered):
        following.append(upcoming)
        upcoming = heading if heading is not None else upcoming
    return following[::-1]


def _continues(previous: tuple[int, ...] | None, heading: Numbered, following: Numbered | None) -> bool:
    """Whether a heading continues its kind's numbering, or begins numbering that goes on."""
    if previous is not None:
        return _is_successor(previous, heading.number)
    if heading.number[-1] <= 1:
        return True
    # An excerpt may begin at "3 Results": it is a heading when "4 …" or "3.1 …" comes next.
    if following is None:
        return False
    if following.rank == heading.rank:
        return _is_successor(heading.number, following.number)
    return following.rank > heading.rank


def _is_successor(previous: tuple[int, ...], number: tuple[int, ...]) -> bool:
    """Whether `number` may come next after `previous`: 2 → 3, 2.1 → 2.2, 1.3 → 2.1."""
    if number[:-1] == previous[:-1]:
        # A small gap is a heading the length rules did not take ("3 <a long title>").
        return 0 < number[-1] - previous[-1] <= _MAX_NUMBER_GAP
    return number[:-1] > previous[:-1] and number[-1] <= 1


def _levels_by_rank(ranks: set[int]) -> dict[int, int]:
    # A document with only "一、" and "（一）" headings gets levels 1 and 2, not 5 and 6.
    return {rank: min(position + 1, 6) for position, rank in enumerate(sorted(ranks))}


def flush_paragraph(paragraph: list[str], blocks: list[Block]) -> None:
    text = "\n".join(paragraph).strip()
    if text:
        blocks.append(text)
    paragraph.clear()


def text_heading_lines(text: str) -> HeadingLines:
    """The lines of decoded plain text that text_blocks takes as headings (one line each)."""
    numbered = numbered_lines(text.splitlines())
    return HeadingLines(0, tuple((line, line + 1) for line, heading in enumerate(numbered) if heading is not None))
