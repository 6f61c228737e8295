"""Values the stages pass each other: conversation turns and numbered evidence."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

_CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
PREVIEW_CHARS = 200


@dataclass(frozen=True)
class Turn:
    role: Literal["user", "assistant"]
    content: str
    query: str = ""  # a user turn as rewritten into a standalone question, when it was

    @property
    def standalone(self) -> str:
        return self.query or self.content


@dataclass(frozen=True)
class EvidenceItem:
    """What `[n]` in an answer points at: a KB chunk, a tool's output or a web page's passage."""

    n: int
    source: Literal["KB", "TOOL", "WEB", "MEMORY"]
    doc: str  # the document's name, the tool's, or the web page's title
    text: str
    doc_id: int | None = None
    chunk_id: int | None = None
    section: str = ""
    score: float = 0.0
    url: str = ""  # the chunk on its document's page, or the web page itself
    graph: str = ""  # the relation or community the graph agent chose this chunk for
    title: str = ""  # a KB chunk's document's title (its Markdown heading or the parser's)

    def as_event(self) -> dict[str, Any]:
        """The evidence panel's fields (a preview, not the whole text)."""
        preview = self.text if len(self.text) <= PREVIEW_CHARS else self.text[: PREVIEW_CHARS - 1] + "…"
        return {
            "n": self.n,
            # Shown apart from other chunks in the evidence panel; to the prompt it is a KB chunk.
            "source": "GRAPH" if self.graph else self.source,
            "doc": self.doc,
            "doc_id": self.doc_id,
            "chunk_id": self.chunk_id,
            "section": self.section,
            "score": round(self.score, 4),
            "preview": preview,
            "chars": len(self.text),  # what the prompt holds: a long chunk is cut to the gate's budget
            "url": self.url,
        }

    def as_stored(self) -> dict[str, Any]:
        return {**self.as_event(), "text": self.text}


def language_of(text: str) -> Literal["zh", "en"]:
    """ "zh" when text has Chinese characters, else "en"."""
    return "zh" if _CJK.search(text) else "en"


def user_turns(history: tuple[Turn, ...] | list[Turn], last: int) -> list[Turn]:
    """The user's turns among the last `last` exchanges, oldest first."""
    return [turn for turn in history[-2 * last :] if turn.role == "user"] if last > 0 else []
