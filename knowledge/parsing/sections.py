"""Turn a reader's blocks into numbered sections with their chapters."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .document import Block, Heading, Section


@dataclass
class _OpenHeading:
    level: int
    index: str
    title: str
    line: str  # the heading as written: the text of a section that has no body
    children: int = 0

    @classmethod
    def of(cls, heading: Heading, index: str) -> _OpenHeading:
        return cls(heading.level, index, heading.title, heading.line or heading.title)


@dataclass
class _Outline:
    """The chain of headings enclosing the current position, for numbering and chapters."""

    stack: list[_OpenHeading] = field(default_factory=list)
    top_count: int = 0

    def enter(self, heading: Heading) -> _OpenHeading:
        if heading.level == 0:
            self.stack.clear()
            return _OpenHeading.of(heading, "")
        while self.stack and self.stack[-1].level >= heading.level:
            self.stack.pop()
        parent = self.stack[-1] if self.stack else None
        opened = _OpenHeading.of(heading, self._index(heading, parent))
        self.stack.append(opened)
        return opened

    def _index(self, heading: Heading, parent: _OpenHeading | None) -> str:
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


def build_sections(blocks: list[Block]) -> tuple[Section, ...]:
    outline = _Outline()
    sections: list[Section] = []
    current, body = _OpenHeading(0, "", "", ""), []
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
    # A heading with no body (a chapter that opens subsections, a last heading) is its own
    # text: only texts are chunked and indexed, so its words would otherwise be lost.
    text = "\n\n".join(body) or heading.line
    is_empty_preamble = not heading.title and heading.level == 0 and not text
    if not is_empty_preamble:
        sections.append(Section(heading.index, heading.title, heading.level, *chapters, text))


def _normalise_levels(blocks: list[Block]) -> list[Block]:
    """Treat a lone unnumbered top heading as the document title; start levels at 1."""
    headings = [b for b in blocks if isinstance(b, Heading) and b.level > 0]
    if not headings:
        return blocks
    top = min(h.level for h in headings)
    first = headings[0]
    is_title = first.level == top and not first.number and len(headings) > 1
    is_title = is_title and sum(h.level == top for h in headings) == 1
    if is_title:
        top = min(h.level for h in headings[1:])
    return [_shift_heading(b, top, is_title and b is first) for b in blocks]


def _shift_heading(block: Block, top: int, is_title: bool) -> Block:
    if isinstance(block, str) or block.level == 0:
        return block
    level = 0 if is_title else block.level - top + 1
    return replace(block, level=level)
