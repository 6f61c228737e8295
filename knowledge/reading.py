"""A document as a person reads it: its sections in order, headings as headings, tables as
tables, and every child chunk's passage addressable (#chunk-<id>) so a citation opens the
document at the passage it quotes.

Built from the live parent chunks (the sections' text) and their children (the passages
search returns), so what is shown is what was indexed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentic_rag.llm.units import LIST_MARK, TABLE_SEPARATOR, is_heading_of, table_cells

from .models import Chunk


@dataclass(frozen=True)
class Block:
    kind: str  # "paragraph", "list", "table", "code"
    lines: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()  # a table's rows, its header first


@dataclass(frozen=True)
class Passage:
    chunk_id: int | None  # the child chunk it belongs to; None for text no child holds
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class ReadableSection:
    parent_id: int
    index: str
    title: str
    level: int  # 1 chapter, 2 section, 3 below
    passages: tuple[Passage, ...]


@dataclass(frozen=True)
class OutlineItem:
    """A parent chunk in the document's outline, and the page of the document it is on."""

    parent_id: int
    index: str
    title: str
    level: int
    page: int  # 1-based


def page_numbers(sizes: Sequence[int], budget: int, max_parents: int) -> list[int]:
    """The page (from 1) of each parent when parents of these sizes fill pages of `budget`
    characters and at most `max_parents` parents.

    Every page holds at least one parent, so a page is at most one parent over the budget,
    and a parent is at most CHUNK_PARENT_MAX_CHARS: a page's work is bounded whatever the
    document's size, and whatever its number of tiny sections.
    """
    pages, page, used, count = [], 1, 0, 0
    for size in sizes:
        if count and (used + size > budget or count == max_parents):
            page, used, count = page + 1, 0, 0
        used, count = used + size, count + 1
        pages.append(page)
    return pages


def outline_items(parents: Sequence[Chunk], pages: Sequence[int]) -> list[OutlineItem]:
    """The outline of a document's parents, one entry per section, each with its page."""
    items: list[OutlineItem] = []
    previous = None
    for parent, page in zip(parents, pages, strict=True):
        heading = (parent.section_index, parent.section_title)
        if heading != previous:
            items.append(OutlineItem(parent.pk, parent.section_index, parent.section_title, _level(parent), page))
        previous = heading
    return items


def visible_outline(items: Sequence[OutlineItem], page: int, limit: int) -> list[OutlineItem]:
    """At most `limit` outline items: all of them when they fit, else the current page's and,
    in the room left, the chapters on other pages, in document order."""
    if len(items) <= limit:
        return list(items)
    on_page = [position for position, item in enumerate(items) if item.page == page][:limit]
    chapters = [position for position, item in enumerate(items) if item.level == 1 and item.page != page]
    kept = sorted([*on_page, *chapters[: limit - len(on_page)]])
    return [items[position] for position in kept]


def readable_sections(parents: Iterable[Chunk]) -> list[ReadableSection]:
    """The document's sections in order; parents need their children prefetched in index order."""
    sections = []
    for parent in parents:
        text = _without_heading(parent.text, parent.section_title)
        passages = tuple(
            Passage(chunk_id, tuple(text_blocks(piece))) for chunk_id, piece in _pieces(text, parent.children.all())
        )
        sections.append(ReadableSection(parent.pk, parent.section_index, parent.section_title, _level(parent), passages))
    return sections


def _pieces(text: str, children: Sequence[Chunk]) -> list[tuple[int | None, str]]:
    """text cut at its children's passages: (child id, its part) in order, overlaps to the first.

    A child not found in the text (it was cleaned differently) gets an empty piece where the
    search stopped, so a link to it still lands in the right place.
    """
    pieces: list[tuple[int | None, str]] = []
    cursor = 0  # the end of what has been handed out
    start = -1  # where the previous child was found
    for child in children:
        passage = child.text.strip()
        found = text.find(passage, start + 1)
        if found < 0:
            pieces.append((child.pk, ""))
            continue
        if found > cursor:
            pieces.append((None, text[cursor:found]))
        end = found + len(passage)
        pieces.append((child.pk, text[max(found, cursor):end]))
        cursor, start = max(cursor, end), found
    if cursor < len(text):
        pieces.append((None, text[cursor:]))
    return [(chunk_id, piece) for chunk_id, piece in pieces if chunk_id is not None or piece.strip()]


def text_blocks(text: str) -> list[Block]:
    """Paragraphs, lists, tables and code of a plain-text passage, as ingestion stored them."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.strip().startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```")), len(lines))
            blocks.append(Block("code", tuple(lines[i + 1 : end])))
            i = end + 1
            continue
        run = _run(lines, i, _is_row)
        if len(run) >= 2:
            rows = tuple(tuple(table_cells(row)) for row in run if not TABLE_SEPARATOR.match(row))
            blocks.append(Block("table", rows=rows))
            i += len(run)
            continue
        run = _run(lines, i, lambda text: bool(LIST_MARK.match(text)))
        if run:
            blocks.append(Block("list", tuple(LIST_MARK.sub("", item) for item in run)))
            i += len(run)
            continue
        end = _paragraph_end(lines, i)
        blocks.append(Block("paragraph", tuple(lines[i:end])))
        i = end
    return blocks


def _paragraph_end(lines: list[str], start: int) -> int:
    """Where the paragraph opening at `start` ends: it always takes its first line, so a lone
    line that looks like a table row ("--mode bm25|vector|hybrid") is prose, and every pass
    of text_blocks' loop moves on."""
    end = start + 1
    while end < len(lines) and lines[end].strip() and not LIST_MARK.match(lines[end]) and not _opens_table(lines, end):
        end += 1
    return end


def _opens_table(lines: list[str], start: int) -> bool:
    return start + 1 < len(lines) and _is_row(lines[start]) and _is_row(lines[start + 1])


def _run(lines: list[str], start: int, accepts) -> list[str]:
    end = start
    while end < len(lines) and accepts(lines[end]):
        end += 1
    return lines[start:end]


def _is_row(line: str) -> bool:
    return "|" in line and len(table_cells(line)) >= 2


def _without_heading(text: str, title: str) -> str:
    first, _, rest = text.partition("\n")
    return rest.lstrip("\n") if is_heading_of(first, title) else text


def _level(parent: Chunk) -> int:
    if not parent.chapter_level_1 or parent.section_title == parent.chapter_level_1:
        return 1
    if not parent.chapter_level_2 or parent.section_title == parent.chapter_level_2:
        return 2
    return 3
