"""Community reports: what global search maps the question over.

A community's report is its title, its summary and the passages its summary was read from
(its own `chunk_ids`, then its sub-communities'), each passage with the document it belongs
to, so an answer drawn from a report cites a chunk and a document.
Reports are loaded once per question, before any model is asked: the map calls then touch no
database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from knowledge.models import Chunk

from .models import Community


@dataclass(frozen=True)
class Passage:
    chunk_id: int
    document_id: int
    document_name: str
    text: str


@dataclass(frozen=True)
class Report:
    community_id: int
    title: str
    summary: str
    passages: tuple[Passage, ...]

    def passage(self, chunk_id: int) -> Passage | None:
        return next((p for p in self.passages if p.chunk_id == chunk_id), None)


def load_reports(communities: Sequence[Community], *, passages: int = 6) -> list[Report]:
    """The reports of `communities` (one KB's), in the same order, `passages` passages at most each."""
    if not communities:
        return []
    ids = [c.pk for c in communities]
    chunk_lists = {c.pk: list(c.chunk_ids) for c in communities}
    for parent_id, chunk_ids in Community.objects.filter(parent_id__in=ids).order_by("-rank").values_list(
        "parent_id", "chunk_ids"
    ):
        chunk_lists[parent_id].extend(chunk_ids)
    chunk_lists = {pk: list(dict.fromkeys(found))[:passages] for pk, found in chunk_lists.items()}
    wanted = {chunk_id for found in chunk_lists.values() for chunk_id in found}
    # A chunk a later ingestion replaced is gone: its community cites what is still there.
    rows = Chunk.objects.filter(kb_id=communities[0].kb_id, id__in=wanted).values_list(
        "id", "document_id", "document__name", "text"
    )
    by_id = {row[0]: Passage(*row) for row in rows}
    return [
        Report(
            community_id=c.pk,
            title=c.title,
            summary=c.summary,
            passages=tuple(by_id[i] for i in chunk_lists[c.pk] if i in by_id),
        )
        for c in communities
    ]

