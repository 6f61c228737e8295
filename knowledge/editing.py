"""A document's sections as written in its file, and rewriting one as a new version.

The parser knows a section only as plain text. For Markdown and plain text, the readers
also say which lines each heading was read from (`parsing.heading_lines`), so a section's
body is the lines between its heading and the next one: a rewrite splices new lines in
there and leaves every other byte of the file as it was.
"""

from __future__ import annotations

import codecs
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction

from .ingest import SubmitOutcome, newest_bytes, submit_document
from .models import Document
from .parsing import ParseError, Section, decode_text, heading_lines, parse_document

log = logging.getLogger(__name__)

EDITABLE_EXTENSIONS = frozenset({".md", ".markdown", ".txt"})
_FORMAT_NAMES = {".pdf": "PDF", ".docx": "Word", ".html": "HTML", ".htm": "HTML"}
_LINE_BREAKS = ("\r\n", "\n", "\r")


@dataclass(frozen=True)
class EditableSection:
    """A parsed section with its body as written in the file."""

    position: int  # 0-based order among parse_document(...).sections
    index: str
    title: str
    level: int
    chapter_level_1: str
    chapter_level_2: str
    text: str  # the parsed text, as indexed
    source: str  # the body as written in the file, heading excluded; "" when not editable


class SectionEditError(Exception):
    """A section edit that cannot be made; str(e) is a clear message for the user."""


class SectionNotFound(SectionEditError):
    pass


class NotEditable(SectionEditError):
    pass


class EditConflict(SectionEditError):
    """The document changed after the edit was proposed."""


@dataclass(frozen=True)
class _Body:
    """Where a section's body is in the file's lines, split around its blank lines."""

    first: int  # the line after the heading (or the first line of content)
    end: int  # the next heading's first line, or the line count
    lead: str  # blank lines after the heading
    core: str  # from the first to the last non-blank line, with their line breaks
    trail: str  # blank lines before the next heading

    @property
    def source(self) -> str:
        return self.core.removesuffix(_line_break(self.core))


def outline_window(sections: list[EditableSection], selected: int, limit: int) -> list[EditableSection]:
    """At most `limit` sections for an outline: all when they fit, else those around the
    selected one and, in the room left, the chapters, in document order."""
    if len(sections) <= limit:
        return sections
    first = max(0, min(selected - limit // 2, len(sections) - limit // 2 * 2))
    near = set(range(first, first + limit // 2 * 2))
    chapters = [s.position for s in sections if s.level <= 1 and s.position not in near]
    kept = sorted(near | set(chapters[: limit - len(near)]))
    return [sections[position] for position in kept]


def is_editable(document: Document) -> bool:
    return _extension(document.name) in EDITABLE_EXTENSIONS


def document_sections(document: Document) -> list[EditableSection]:
    """The sections of the document's newest version, with their bodies as written; [] if unreadable."""
    return file_sections(document.name, newest_bytes(document))


def file_sections(name: str, data: bytes) -> list[EditableSection]:
    """The sections of a file, with their bodies as written; [] if the file does not parse."""
    try:
        sections = parse_document(name, data).sections
    except ParseError:
        return []
    sources = [""] * len(sections)
    if _extension(name) in EDITABLE_EXTENSIONS:
        try:
            sources = [body.source for body in _bodies(name, decode_text(data), len(sections))]
        except SectionEditError:
            log.warning("the sections of %s do not map to its lines", name)
    return [
        EditableSection(position, **dataclasses.asdict(section), source=source)
        for position, (section, source) in enumerate(zip(sections, sources, strict=True))
    ]


def accept_section_edit(
    document: Document,
    position: int,
    new_body: str,
    *,
    base_sha256: str,
    user,
    enqueue: Callable[[int], None],
    note: str = "",
) -> SubmitOutcome:
    """Submit the document with one section rewritten as its next version.

    `base_sha256` is the document's hash when the edit was proposed: if the document has
    changed since, the edit would undo that change, so it is refused with EditConflict.
    """
    _check_edit(document.name, new_body)
    with transaction.atomic():
        current = Document.objects.select_for_update().select_related("kb").filter(pk=document.pk).first()
        if current is None or current.sha256 != base_sha256:
            raise EditConflict("The document has changed since this edit was proposed; reload it and try again.")
        data = newest_bytes(current)
        new_data, section = replace_section(current.name, data, position, new_body)
        if new_data == data:
            raise SectionEditError("The new text is the same as the section's current text; nothing to save.")
        return submit_document(
            current.kb,
            current.name,
            new_data,
            enqueue=enqueue,
            source=current.source,
            user=user,
            note=note or f"edited section {_label(section)}",
        )


def _label(section: Section) -> str:
    return " ".join(filter(None, [section.index, section.title])) or "before the first heading"


def _check_edit(name: str, new_body: str) -> None:
    _check_editable(name)
    limit = settings.MAX_SECTION_EDIT_CHARS
    if len(new_body) > limit:
        raise SectionEditError(
            f"The new text has {len(new_body):,} characters, over the limit of {limit:,} for one section."
        )
    if not new_body.strip():
        raise SectionEditError("The new text is empty; a section keeps at least some text.")


def _check_editable(name: str) -> None:
    extension = _extension(name)
    if extension not in EDITABLE_EXTENSIONS:
        kind = _FORMAT_NAMES.get(extension, extension.lstrip(".").upper())
        raise NotEditable(
            f"{kind} documents can be asked about but not rewritten in place; only Markdown and text files can."
        )


def _extension(name: str) -> str:
    return Path(name).suffix.lower()


def replace_section(name: str, data: bytes, position: int, new_body: str) -> tuple[bytes, Section]:
    """The file with one section's body replaced, as UTF-8 (the rest left as it was), and that section."""
    _check_editable(name)
    sections = _sections(name, data)
    if not 0 <= position < len(sections):
        raise SectionNotFound(f"The document has no section {position + 1}; it has {len(sections)}.")
    text = decode_text(data)
    body = _bodies(name, text, len(sections))[position]
    new_lines = _trimmed_lines(new_body)
    if new_lines == body.core.splitlines():
        return data, sections[position]
    lines = text.splitlines(keepends=True)
    spliced = _splice(body, new_lines, lines)
    new_text = "".join(lines[: body.first]) + spliced + "".join(lines[body.end :])
    # A UTF-8 file keeps its BOM and every other byte; another encoding becomes UTF-8,
    # which the parser tries first.
    bom = codecs.BOM_UTF8 if data.startswith(codecs.BOM_UTF8) else b""
    new_data = bom + new_text.encode("utf-8")
    _check_only_section_changed(sections, _sections(name, new_data), position)
    return new_data, sections[position]


def _sections(name: str, data: bytes) -> tuple[Section, ...]:
    try:
        return parse_document(name, data).sections
    except ParseError as error:
        raise SectionEditError(f"The document cannot be read: {error}.") from error


def _bodies(name: str, text: str, section_count: int) -> list[_Body]:
    """Each section's body in `text`: the lines between its heading and the next one."""
    outline = heading_lines(name, text)
    lines = text.splitlines(keepends=True)
    starts = [first for first, _ in outline.headings]
    ends = [*starts[1:], len(lines)]  # one more than the headings when there are none
    regions = [(after, end) for (_, after), end in zip(outline.headings, ends, strict=False)]
    # Text before the first heading is a section when it has any (sections.build_sections).
    if section_count == len(regions) + 1:
        regions.insert(0, (outline.content_start, starts[0] if starts else len(lines)))
    if section_count != len(regions):
        raise NotEditable("This document's sections could not be matched to its lines, so it cannot be rewritten here.")
    return [_body(lines, first, end) for first, end in regions]


def _body(lines: list[str], first: int, end: int) -> _Body:
    core_first = first
    while core_first < end and not lines[core_first].strip():
        core_first += 1
    core_end = end
    while core_end > core_first and not lines[core_end - 1].strip():
        core_end -= 1
    return _Body(
        first,
        end,
        "".join(lines[first:core_first]),
        "".join(lines[core_first:core_end]),
        "".join(lines[core_end:end]),
    )


def _trimmed_lines(body: str) -> list[str]:
    """The body's lines without the blank lines before and after them."""
    lines = body.splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _splice(body: _Body, new_lines: list[str], lines: list[str]) -> str:
    """The body's new text in the file's line breaks, its blank lines around it kept.

    Without a blank line before the next heading, a setext heading's title would run into
    the body's last paragraph.
    """
    newline = next((b for b in map(_line_break, lines) if b in _LINE_BREAKS), "\n")
    is_last = body.end == len(lines)
    after_heading = newline if body.first and not _line_break(lines[body.first - 1]) else ""
    end = _line_break(body.core) if body.core else newline
    core = newline.join(new_lines) + end if new_lines else ""
    trail = body.trail or ("" if is_last else newline)
    return after_heading + body.lead + core + trail


def _line_break(text: str) -> str:
    """The line break that ends `text` ("" if none)."""
    if not text:
        return ""
    last = text.splitlines(keepends=True)[-1]
    return last[len(last.splitlines()[0]) :]


def _check_only_section_changed(before: tuple[Section, ...], after: tuple[Section, ...], position: int) -> None:
    # A heading in the new text, a code fence it leaves open, or (in plain text) a numbered
    # line that now reads differently would change other sections than the one edited.
    kept = [dataclasses.replace(section, text="") if i == position else section for i, section in enumerate(after)]
    expected = [dataclasses.replace(section, text="") if i == position else section for i, section in enumerate(before)]
    if kept != expected:
        raise SectionEditError(
            "The new text would change the document's other sections (does it add a heading or "
            "leave a code block open?); only this section's body can be rewritten here."
        )
