"""A fetched page as passages: its readable text (readability's main content, not the menus
and footers around it), cut by the knowledge base's own parser and chunker."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from knowledge.candidates import Candidate
from knowledge.chunking import chunk_document
from knowledge.parsing import ParseError, parse_document

from .fetch import Fetched

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
MAX_PASSAGES_PER_PAGE = 40  # a huge article's first passages; the rest would not reach a prompt


@dataclass(frozen=True)
class WebPassage:
    """One chunk of a fetched page: what a WEB evidence item quotes and links to."""

    url: str
    title: str
    text: str
    section: str = ""
    index: int = 0

    @property
    def chunk_id(self) -> int:
        """A stable id below zero, so it never equals a stored chunk's."""
        digest = hashlib.sha256(f"{self.url}#{self.index}".encode()).digest()
        return -(int.from_bytes(digest[:6], "big") + 1)

    def as_candidate(self, score: float) -> Candidate:
        return Candidate(
            chunk_id=self.chunk_id, doc_id=0, doc_name=self.title or self.url, text=self.text,
            index=self.index, section_title=self.section, score=score, scores={"web": score},
            sources={"web"}, metadata={"web_url": self.url, "web_title": self.title},
        )


def page_passages(fetched: Fetched, *, title: str = "") -> list[WebPassage]:
    """The page's readable text in chunks; none when it holds no text."""
    if fetched.content_type in HTML_TYPES:
        page_title, main = readable_html(fetched.text())
        name, data = "page.html", main.encode("utf-8")
        title = page_title or title
    else:
        name, data = "page.txt", fetched.body
    try:
        parsed = parse_document(name, data)
    except ParseError:
        return []
    passages = []
    for parent in chunk_document(parsed):
        for child in parent.children:
            passages.append(WebPassage(fetched.url, title, child.text, parent.section_title, child.index))
            if len(passages) >= MAX_PASSAGES_PER_PAGE:
                return passages
    return passages


def readable_html(html: str) -> tuple[str, str]:
    """The page's title and the HTML of its main content (readability's choice)."""
    from readability import Document  # imported when a page is read: web search is off by default

    document = Document(html)
    try:
        return " ".join(document.short_title().split()), document.summary(html_partial=True)
    except Exception:  # readability gives up on some markup (no body, empty tree): no passages
        return "", ""
