"""The retrieval candidate: one chunk on its way through recall, fusion, rerank and the gate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Candidate:
    """A chunk found by one or more recall paths, with every score it collected.

    Mutable on purpose: post-processors adjust `score` and add to `scores` on hot paths,
    where copying a dataclass per step would cost more than the step itself.
    """

    chunk_id: int
    doc_id: int
    doc_name: str
    text: str
    level: int = 1  # 0 parent, 1 child (knowledge.models.Chunk.PARENT / CHILD)
    parent_id: int | None = None
    index: int = 0  # order within its document, per level
    section_index: str = ""
    section_title: str = ""
    chapter_level_1: str = ""
    chapter_level_2: str = ""
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    # The text's search tokens, space-separated, analysed once at indexing time. A string,
    # not a tuple: 100k chunks' token tuples cost gigabytes of small strings.
    tokens: str = ""
    doc_title: str | None = None  # its document's title, when the search loaded it (None: not loaded)
    score: float = 0.0  # the current ranking score
    scores: dict[str, float] = field(default_factory=dict)  # per leg and stage: "bm25", "vector", "rrf", ...
    sources: set[str] = field(default_factory=set)  # recall paths that found it
    notes: list[str] = field(default_factory=list)  # why a stage changed it, for the playground

    def copy(self) -> Candidate:
        """A copy whose containers are its own.

        `dataclasses.replace` re-runs __init__ and costs ~10 µs; fusion copies every hit of
        every leg, so this copies the instance dict instead (~1 µs).
        """
        clone = object.__new__(Candidate)
        clone.__dict__.update(self.__dict__)
        clone.metadata, clone.scores = dict(self.metadata), dict(self.scores)
        clone.sources, clone.notes = set(self.sources), list(self.notes)
        return clone

    @property
    def key(self) -> str:
        """The dedup key: document::parent::chunk."""
        return f"{self.doc_id}::{self.parent_id or ''}::{self.chunk_id}"

    @property
    def section(self) -> str:
        return " ".join(part for part in (self.section_index, self.section_title) if part)

    def as_result(self, rank: int) -> dict[str, Any]:
        """The stable retrieval-result contract: callers rely on these keys."""
        return {
            "chunk_id": self.chunk_id,
            "doc_id": self.doc_id,
            "doc_name": self.doc_name,
            "text": self.text,
            "score": self.score,
            "scores": dict(self.scores),
            "section": self.section,
            "rank": rank,
        }
