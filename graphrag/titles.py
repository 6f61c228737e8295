"""A document's title: the name other documents write when they refer to it.

A Markdown document's first heading is its title (the parser records it as the first chunk's
section). A plain-text article (an encyclopedia entry, a news item) has no heading but often
starts with its title on a line of its own; the build makes that line the section its chunks
sit in and a name of the KB's dictionary, so that another document writing it mentions the
title's entity. `graphrag.search.linked_documents` follows those mentions from the documents
a search ranks first to the documents they name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db.models.functions import Substr

from knowledge.models import Chunk, KnowledgeBase

MAX_TITLE_CHARS = 40
# A first line that ends like a sentence or a clause is the text's start, not its title.
_SENTENCE_END = re.compile(r"[。．.!！?？;；:：,，、]$")


def title_line(text: str) -> str | None:
    """The text's first line when it reads as a title: short, on a line of its own, not a sentence."""
    first, newline, rest = text.lstrip().partition("\n")
    first = first.strip()
    if not newline or not rest.strip() or not 2 <= len(first) <= MAX_TITLE_CHARS or _SENTENCE_END.search(first):
        return None
    return first


@dataclass(frozen=True)
class DocumentTitle:
    chunk_id: int  # the document's first child chunk
    title: str
    from_heading: bool  # False: the text's first line


def document_title(first_chunk_text: str, chapter: str, section: str) -> DocumentTitle | None:
    """The title of a document from its first child chunk: its heading, else a title line (chunk id 0)."""
    heading = (chapter or section).strip()
    if heading:
        return DocumentTitle(0, heading, True)
    line = title_line(first_chunk_text)
    return DocumentTitle(0, line, False) if line else None


def document_titles(kb: KnowledgeBase) -> dict[int, DocumentTitle]:
    """Per live document of the KB that has a title: the title and its first child chunk."""
    rows = (
        Chunk.objects.filter(kb=kb).live().children().order_by("document_id", "index")
        .annotate(head=Substr("text", 1, MAX_TITLE_CHARS + 80))
        .values_list("document_id", "id", "head", "chapter_level_1", "section_title")
    )
    titles: dict[int, DocumentTitle] = {}
    seen: set[int] = set()
    for document_id, chunk_id, head, chapter, section in rows.iterator(chunk_size=2000):
        if document_id in seen:
            continue
        seen.add(document_id)
        title = document_title(head, chapter, section)
        if title:
            titles[document_id] = DocumentTitle(chunk_id, title.title, title.from_heading)
    return titles
