"""Community reports: what global search maps the question over.

A community's report is its title, its summary and its passages: first the chunks of the
community that the question's words find (`question_passages`), then those its summary was
read from (its own `chunk_ids`, then its sub-communities'), each passage with the document it
belongs to, so an answer drawn from a report cites a chunk and a document.
Reports are loaded once per question, before any model is asked: the map calls then touch no
database.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from knowledge.analysis import analyze
from knowledge.models import Chunk, KnowledgeBase
from knowledge.search import get_backend

from .models import Community, Mention


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


def load_reports(
    communities: Sequence[Community], *, passages: int = 6, asked: Mapping[int, Sequence[int]] | None = None
) -> list[Report]:
    """The reports of `communities` (one KB's), in the same order, `passages` passages at most each.

    `asked`: chunks per community that the question found (`question_passages`), read first.
    """
    if not communities:
        return []
    ids = [c.pk for c in communities]
    chunk_lists = {c.pk: [*(asked or {}).get(c.pk, ()), *c.chunk_ids] for c in communities}
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



def question_passages(
    kb: KnowledgeBase, question: str, community_ids: Sequence[int], *, top_k: int = 200, per_community: int = 3
) -> dict[int, list[int]]:
    """The chunks the question's words find (BM25), grouped by the communities whose members they
    mention; the community whose chunks rank highest (the sum of 1 / (1 + rank)) first.

    A community's stored report was read from the chunks naming most of its members, which
    are often its introductions; these are the parts of it that the question is about.
    """
    tokens = analyze(question)
    if not tokens or not community_ids:
        return {}
    rank = {chunk_id: n for n, (chunk_id, _) in enumerate(get_backend().keyword(kb, tokens, level=Chunk.CHILD, top_k=top_k))}
    pairs = Mention.objects.filter(chunk_id__in=rank, entity__community_id__in=community_ids).values_list(
        "entity__community_id", "chunk_id"
    )
    found: dict[int, list[int]] = defaultdict(list)
    weight: dict[int, float] = defaultdict(float)
    for community_id, chunk_id in sorted(set(pairs), key=lambda pair: rank[pair[1]]):
        weight[community_id] += 1.0 / (1 + rank[chunk_id])
        if len(found[community_id]) < per_community:
            found[community_id].append(chunk_id)
    return dict(sorted(found.items(), key=lambda item: -weight[item[0]]))
