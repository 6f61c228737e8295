"""Turn uploaded files into titled, numbered sections of plain text.

One module per format (`text`, `markdown`, `html`, `pdf`, `docx`) turns bytes into blocks,
headings and paragraphs; `sections` turns blocks into sections. `parse_document` picks the
reader by file extension; a .txt file written in Markdown is read as Markdown.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .decoding import decode_text
from .document import Block, Heading, HeadingLines, ParsedDocument, ParseError, Section
from .docx import read_docx
from .html import read_html
from .markdown import looks_like_markdown, markdown_blocks, markdown_heading_lines, read_markdown
from .pdf import read_pdf
from .sections import build_sections
from .text import text_blocks, text_heading_lines

SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(
    {".md", ".markdown", ".txt", ".html", ".htm", ".pdf", ".docx"}
)

__all__ = [
    "SUPPORTED_EXTENSIONS", "HeadingLines", "ParseError", "ParsedDocument", "Section",
    "decode_text", "heading_lines", "parse_document",
]


def _read_txt(data: bytes) -> list[Block]:
    """A .txt file's blocks: read as Markdown when it is written in Markdown (its headings then
    make sections and chapters as in a .md file), else as plain text."""
    text = decode_text(data)
    return markdown_blocks(text) if looks_like_markdown(text) else text_blocks(text.splitlines())


def _txt_heading_lines(text: str) -> HeadingLines:
    """Where _read_txt found each heading of a .txt file's decoded text."""
    return markdown_heading_lines(text) if looks_like_markdown(text) else text_heading_lines(text)


_READERS: dict[str, Callable[[bytes], list[Block]]] = {
    ".md": read_markdown,
    ".markdown": read_markdown,
    ".txt": _read_txt,
    ".html": read_html,
    ".htm": read_html,
    ".pdf": read_pdf,
    ".docx": read_docx,
}
# The readers that read a file line by line, so its headings can be traced back to lines.
_HEADING_LINES: dict[str, Callable[[str], HeadingLines]] = {
    ".md": markdown_heading_lines,
    ".markdown": markdown_heading_lines,
    ".txt": _txt_heading_lines,
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
    title = next((b.title for b in blocks if isinstance(b, Heading)), stem)
    return ParsedDocument(title, build_sections(blocks))


def heading_lines(name: str, text: str) -> HeadingLines | None:
    """Where parse_document found each heading in the file's decoded text; None if not read by lines."""
    reader = _HEADING_LINES.get(_split_name(name)[1])
    return reader(text) if reader else None


def _split_name(name: str) -> tuple[str, str]:
    base = re.split(r"[\\/]", name)[-1]
    stem, dot, extension = base.rpartition(".")
    if not dot:
        return base, ""
    return stem or base, "." + extension.lower()
