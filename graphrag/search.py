"""Query a KB's graph: entities named in a question, local, global and path search, and PPR.

The graph of a KB is loaded once into arrays (`GraphIndex`) and kept per process until a
build changes it, so a query costs a few array operations, not a walk over the ORM.

- `match_entities`: the entities a question names, found with the build's own extractor and
  disambiguation (dictionary of the KB's entity names and aliases, then string recall).
- `personalised_pagerank`: HippoRAG-style random walk with restart over entities ↔ chunks,
  seeded at the question's entities (rarer entities weigh more). It scores chunks that are
  one or two hops away from what the question names: the graph leg of `retrieve()`.
- `linked_documents`: the documents whose titles (graphrag.titles) a ranking's best documents
  mention; hybrid+graph moves them up behind its strongest hits.
- `local_search`: matched entities, their strongest neighbours and relations, their chunks.
- `global_search` / `global_answer`: the question mapped over the best community reports, the
  partial answers reduced into one cited answer (map_reduce.py); `choose_communities` picks the
  communities whose members the question's best chunks mention, then those `rank_communities`
  scores by the question's words in their summaries (what global search was before).
- `path_search`: the shortest weighted path between two named entities, with its evidence.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np
from django.db.models import Max, Q

from knowledge.analysis import analyze
from knowledge.models import KnowledgeBase

from .disambiguation import DisambiguationParams, EntityIndex, link, name_vectors
from .extraction import TermDictionary, find_mentions, normalise
from .map_reduce import GlobalAnswer, GlobalParams, Point, map_reports, reduce_partials
from .models import Community, Entity, GraphDocument, Mention, Relation
from .reports import load_reports, question_passages
from .titles import document_titles


@dataclass
class GraphIndex:
    """One KB's graph as arrays: entity rows 0..E-1, chunk rows E..E+C-1."""

    version: tuple
    entity_ids: np.ndarray
    chunk_ids: np.ndarray
    names: list[str]
    mention_counts: np.ndarray
    documents_of: np.ndarray  # per entity: in how many chunks it is mentioned
    # Directed edges (both directions stored) with transition probabilities.
    sources: np.ndarray
    targets: np.ndarray
    probabilities: np.ndarray
    row_of_entity: dict[int, int]
    dictionary: TermDictionary
    entities: EntityIndex
    key_row: dict[str, int] = field(default_factory=dict)
    # Entity rows that are the title of exactly one document: (that document, its first chunk).
    titled: dict[int, tuple[int, int]] = field(default_factory=dict)
    # Per document: the rows of the other documents' titles it mentions.
    titles_named_by: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.entity_ids) + len(self.chunk_ids)


_cache: dict[int, GraphIndex] = {}
_cache_lock = threading.Lock()


def graph_version(kb: KnowledgeBase) -> tuple:
    """Changes whenever a build writes to the KB's graph."""
    latest = GraphDocument.objects.filter(kb=kb).aggregate(at=Max("built_at"))["at"]
    return (latest, Entity.objects.filter(kb=kb).count(), Relation.objects.filter(kb=kb).count())


def graph_index(kb: KnowledgeBase) -> GraphIndex | None:
    """The KB's graph as arrays (None when it has no graph), rebuilt when a build moved it."""
    version = graph_version(kb)
    if version[1] == 0:
        return None
    with _cache_lock:
        cached = _cache.get(kb.pk)
        if cached is not None and cached.version == version:
            return cached
    index = _load(kb, version)
    with _cache_lock:
        _cache[kb.pk] = index
    return index


def _load(kb: KnowledgeBase, version: tuple) -> GraphIndex:
    rows = list(Entity.objects.filter(kb=kb).values_list("id", "key", "name", "aliases", "mention_count", "type", "embedding"))
    entity_ids = np.array([r[0] for r in rows], dtype=np.int64)
    row_of_entity = {entity_id: i for i, entity_id in enumerate(entity_ids.tolist())}
    mentions = list(Mention.objects.filter(entity__kb=kb).values_list("entity_id", "chunk_id", "count", "document_id"))
    chunk_ids = np.array(sorted({c for _, c, _, _ in mentions}), dtype=np.int64)
    row_of_chunk = {chunk_id: len(rows) + i for i, chunk_id in enumerate(chunk_ids.tolist())}
    weights: dict[tuple[int, int], float] = defaultdict(float)
    chunks_per_entity = np.zeros(len(rows))
    for entity_id, chunk_id, count, _ in mentions:
        e, c = row_of_entity[entity_id], row_of_chunk[chunk_id]
        weights[(e, c)] += 1.0 + math.log(count)
        weights[(c, e)] += 1.0 + math.log(count)
        chunks_per_entity[e] += 1
    # A walk leaving a chunk prefers its rarer names (HippoRAG's node specificity): a name that
    # half the KB mentions leads nowhere in particular, one that two articles share joins them.
    # Squared: on the CMRC bridge set recall@10 0.9336 -> 0.9375 against the plain inverse (a
    # cube gained nothing more), the docs sets unchanged (docs/05-graphrag.md, "Measured").
    specificity = 1.0 / np.log(2.0 + chunks_per_entity) ** 2
    for (source, target) in list(weights):
        if source >= len(rows):
            weights[(source, target)] *= specificity[target]
    for source, target, weight in Relation.objects.filter(kb=kb).values_list("source_id", "target_id", "weight"):
        a, b = row_of_entity.get(source), row_of_entity.get(target)
        if a is not None and b is not None and a != b:
            weights[(a, b)] += weight
            weights[(b, a)] += weight
    pairs = np.array(list(weights.keys()), dtype=np.int64).reshape(-1, 2)
    values = np.fromiter(weights.values(), dtype=np.float64, count=len(weights))
    out = np.bincount(pairs[:, 0], weights=values, minlength=len(rows) + len(chunk_ids)) if len(values) else np.zeros(1)
    probabilities = values / out[pairs[:, 0]] if len(values) else values
    key_row = {r[1]: i for i, r in enumerate(rows)}
    titled, titles_named_by = _title_links(kb, key_row, [(row_of_entity[e], d) for e, _, _, d in mentions])
    terms = {name: kind for _, _, name, aliases, _, kind, _ in rows for name in [name, *aliases]}
    entities = EntityIndex(name_vectors)
    for _, key, name, _, _, _, vector in rows:
        entities.add(key, name, np.frombuffer(vector, dtype=np.float32) if vector else None)
    return GraphIndex(
        version=version,
        entity_ids=entity_ids,
        chunk_ids=chunk_ids,
        names=[r[2] for r in rows],
        mention_counts=np.array([r[4] for r in rows], dtype=np.float64),
        documents_of=chunks_per_entity,
        sources=pairs[:, 0],
        targets=pairs[:, 1],
        probabilities=probabilities,
        row_of_entity=row_of_entity,
        dictionary=TermDictionary(terms),
        entities=entities,
        key_row=key_row,
        titled=titled,
        titles_named_by=titles_named_by,
    )


def _title_links(
    kb: KnowledgeBase, key_row: dict[str, int], mentions: list[tuple[int, int]]
) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, ...]]]:
    """The entities that title one document each, and per document the other titles it mentions.

    A title two documents share names neither of them (two "Introduction"s), so it leads nowhere.
    """
    by_row: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for document_id, title in document_titles(kb).items():
        row = key_row.get(normalise(title.title))
        if row is not None:
            by_row[row].append((document_id, title.chunk_id))
    titled = {row: documents[0] for row, documents in by_row.items() if len(documents) == 1}
    named: dict[int, set[int]] = defaultdict(set)
    for row, document_id in mentions:
        if row in titled and titled[row][0] != document_id:
            named[document_id].add(row)
    return titled, {document_id: tuple(sorted(rows)) for document_id, rows in named.items()}


def match_entities(query: str, index: GraphIndex, params: DisambiguationParams = DisambiguationParams()) -> list[int]:
    """Rows of the entities the question names, in the order it names them."""
    rows: list[int] = []
    for mention in find_mentions(query, index.dictionary):
        found = link(mention.key, mention.surface, index.entities, params)
        row = None if found.new else index.key_row.get(found.key)
        if row is not None and row not in rows:
            rows.append(row)
    return rows


def personalised_pagerank(
    index: GraphIndex, seeds: list[int], *, damping: float = 0.5, iterations: int = 30
) -> np.ndarray:
    """Visit probabilities of a walk that restarts at `seeds` (weighted by rarity)."""
    restart = np.zeros(index.size)
    for row in seeds:
        # A rare entity says more about the question than one mentioned everywhere.
        restart[row] += 1.0 / math.log(2 + index.documents_of[row])
    if restart.sum() == 0:
        return restart
    restart /= restart.sum()
    scores = restart.copy()
    for _ in range(iterations):
        spread = np.bincount(index.targets, weights=scores[index.sources] * index.probabilities, minlength=index.size)
        updated = (1 - damping) * restart + damping * spread
        if np.abs(updated - scores).sum() < 1e-6:
            return updated
        scores = updated
    return scores


def linked_documents(kb: KnowledgeBase, doc_ids: list[int]) -> list[tuple[int, int, float]]:
    """The documents whose titles `doc_ids` (a ranking's best documents, best first) mention:
    (document, its first chunk, strength), strongest first, none of `doc_ids` among them.

    A mention from a higher-ranked document, and of a rarer title, weighs more; a document
    that mentions many titles spreads its weight over them.
    """
    index = graph_index(kb)
    if index is None or not index.titled:
        return []
    ranked = set(doc_ids)
    strength: dict[int, float] = defaultdict(float)
    chunk_of: dict[int, int] = {}
    for rank, doc_id in enumerate(doc_ids):
        rows = index.titles_named_by.get(doc_id, ())
        for row in rows:
            target, chunk_id = index.titled[row]
            if target not in ranked:
                strength[target] += 1.0 / (rank + 1) / len(rows) / math.log(2 + index.documents_of[row])
                chunk_of[target] = chunk_id
    return sorted(((d, chunk_of[d], s) for d, s in strength.items()), key=lambda link: -link[2])


def chunk_hits(kb: KnowledgeBase, query: str, top_k: int) -> list[tuple[int, float]]:
    """The graph leg: chunks ranked by PPR from the question's entities."""
    index = graph_index(kb)
    if index is None:
        return []
    seeds = match_entities(query, index)
    if not seeds:
        return []
    scores = personalised_pagerank(index, seeds)[len(index.entity_ids) :]
    order = np.argsort(-scores)[:top_k]
    return [(int(index.chunk_ids[i]), float(scores[i])) for i in order if scores[i] > 0]


@dataclass(frozen=True)
class GraphFact:
    """A relation as evidence: who, how, whom, and the chunks that state it."""

    source: str
    relation: str
    target: str
    weight: float
    chunk_ids: tuple[int, ...]

    @property
    def text(self) -> str:
        return f"{self.source} —{self.relation}→ {self.target}"


@dataclass
class LocalResult:
    entities: list[Entity]
    neighbours: list[Entity]
    facts: list[GraphFact]
    chunk_ids: list[int]


def local_search(kb: KnowledgeBase, query: str, *, neighbours: int = 8, facts: int = 10, chunks: int = 8) -> LocalResult:
    """Entities named in the question, their strongest neighbours and relations, their chunks."""
    index = graph_index(kb)
    if index is None:
        return LocalResult([], [], [], [])
    rows = match_entities(query, index)
    ids = [int(index.entity_ids[r]) for r in rows]
    if not ids:
        return LocalResult([], [], [], [])
    relations = list(
        Relation.objects.filter(Q(source_id__in=ids) | Q(target_id__in=ids), kb=kb).order_by("-weight", "id")[:300]
    )
    strength: dict[int, float] = defaultdict(float)
    for relation in relations:
        other = relation.target_id if relation.source_id in ids else relation.source_id
        if other not in ids:
            strength[other] += relation.weight
    neighbour_ids = sorted(strength, key=lambda e: -strength[e])[:neighbours]
    by_id = Entity.objects.in_bulk(ids + neighbour_ids)
    explicit = sorted((r for r in relations if r.weight >= Relation.EXPLICIT), key=lambda r: -len(r.evidence))
    fact_list = [
        GraphFact(by_id[r.source_id].name, r.relation, by_id[r.target_id].name, r.weight, tuple(r.evidence))
        for r in explicit
        if r.source_id in by_id and r.target_id in by_id
    ][:facts]
    scores = personalised_pagerank(index, rows)[len(index.entity_ids) :]
    chunk_ids = [int(index.chunk_ids[i]) for i in np.argsort(-scores)[:chunks] if scores[i] > 0]
    return LocalResult([by_id[e] for e in ids if e in by_id], [by_id[e] for e in neighbour_ids if e in by_id], fact_list, chunk_ids)


@dataclass(frozen=True)
class CommunityAnswer:
    community: Community
    score: float
    chunk_ids: tuple[int, ...]
    points: tuple[Point, ...] = ()  # its partial answer, when the question was mapped over it


def rank_communities(kb: KnowledgeBase, query: str) -> list[CommunityAnswer]:
    """Every top-level community, scored by the question's words in its title and summary."""
    terms = set(analyze(query))
    index = graph_index(kb)
    named = {int(index.entity_ids[r]) for r in match_entities(query, index)} if index else set()
    communities = list(Community.objects.filter(kb=kb, level=0))
    member_of = dict(Entity.objects.filter(kb=kb, id__in=named).values_list("id", "community_id")) if named else {}
    answers = []
    for community in communities:
        words = set(analyze(f"{community.title} {community.summary}"))
        overlap = len(terms & words) / (len(terms) or 1)
        named_here = sum(1 for c in member_of.values() if c == community.pk)
        # With no term in common the community's size decides: "what themes exist" asks for all.
        score = overlap + named_here + 0.01 * math.log(1 + community.rank)
        answers.append(CommunityAnswer(community, score, tuple(community.chunk_ids)))
    return sorted(answers, key=lambda a: -a.score)


def choose_communities(kb: KnowledgeBase, query: str, limit: int) -> tuple[list[CommunityAnswer], dict[int, list[int]]]:
    """The `limit` communities to map the question over, and the chunks of each it found.

    Communities whose members the question's best chunks mention come first (`question_passages`
    order); the rest follow in `rank_communities` order.
    """
    ranked = rank_communities(kb, query)
    asked = question_passages(kb, query, [a.community.pk for a in ranked])
    priority = {pk: n for n, pk in enumerate(asked)}
    position = {a.community.pk: n for n, a in enumerate(ranked)}
    chosen = sorted(ranked, key=lambda a: (priority.get(a.community.pk, len(priority)), position[a.community.pk]))[:limit]
    return chosen, {a.community.pk: asked[a.community.pk] for a in chosen if a.community.pk in asked}


def global_search(
    kb: KnowledgeBase, query: str, *, top: int = 4, llm: Any = None, params: GlobalParams | None = None
) -> list[CommunityAnswer]:
    """The communities whose reports answer the question best, each with the chunks its answer cites first.

    The question is mapped over the best-ranked community reports (by the model when `llm`
    has one, extractively otherwise); a community whose report helps more comes first.
    """
    params = params or GlobalParams.from_settings()
    ranked, asked = choose_communities(kb, query, max(top, params.communities))
    reports = load_reports([a.community for a in ranked], passages=params.passages_per_report, asked=asked)
    partials = {p.community_id: p for p in map_reports(query, reports, llm=llm, params=params).partials}
    order = {a.community.pk: n for n, a in enumerate(ranked)}
    answers = []
    for answer in ranked:
        partial = partials.get(answer.community.pk)
        points = partial.points if partial else ()
        cited = [chunk_id for point in points for chunk_id in point.chunk_ids]
        chunk_ids = tuple(dict.fromkeys([*cited, *answer.community.chunk_ids]))
        answers.append(CommunityAnswer(answer.community, partial.helpfulness if partial else 0, chunk_ids, points))
    return sorted(answers, key=lambda a: (-a.score, order[a.community.pk]))[:top]


def global_answer(kb: KnowledgeBase, query: str, *, llm: Any = None, params: GlobalParams | None = None) -> GlobalAnswer:
    """Map the question over the best community reports, reduce the partial answers into one cited answer."""
    params = params or GlobalParams.from_settings()
    timings: dict[str, float] = {}
    started = time.perf_counter()
    ranked, asked = choose_communities(kb, query, params.communities)
    reports = load_reports([a.community for a in ranked], passages=params.passages_per_report, asked=asked)
    timings["reports"] = _ms_since(started)
    outcome = map_reports(query, reports, llm=llm, params=params)
    timings["map"] = _ms_since(started) - timings["reports"]
    answer = reduce_partials(query, outcome, reports, llm=llm, params=params)
    timings["reduce"] = _ms_since(started) - timings["reports"] - timings["map"]
    timings["total"] = _ms_since(started)
    answer.timings_ms = {k: round(v, 1) for k, v in timings.items()}
    return answer


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def path_search(kb: KnowledgeBase, query: str, *, max_hops: int = 4) -> list[GraphFact]:
    """The strongest path between the first two entities the question names, as facts."""
    index = graph_index(kb)
    rows = match_entities(query, index) if index else []
    if len(rows) < 2:
        return []
    start, end = int(index.entity_ids[rows[0]]), int(index.entity_ids[rows[1]])
    graph = nx.Graph()
    best: dict[tuple[int, int], Relation] = {}
    for relation in Relation.objects.filter(kb=kb).only("source_id", "target_id", "relation", "weight", "evidence"):
        pair = (min(relation.source_id, relation.target_id), max(relation.source_id, relation.target_id))
        if pair not in best or relation.weight > best[pair].weight:
            best[pair] = relation
    for (a, b), relation in best.items():
        graph.add_edge(a, b, cost=1.0 / relation.weight)  # explicit relations are shorter
    try:
        path = nx.shortest_path(graph, start, end, weight="cost")
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        return []
    if len(path) - 1 > max_hops:
        return []
    names = dict(Entity.objects.filter(id__in=path).values_list("id", "name"))
    facts = []
    for a, b in zip(path, path[1:], strict=False):
        relation = best[(min(a, b), max(a, b))]
        source, target = (a, b) if relation.source_id == a else (b, a)
        facts.append(GraphFact(names[source], relation.relation, names[target], relation.weight, tuple(relation.evidence)))
    return facts
