"""Group a KB's entities into communities and summarise each one.

Detection is Louvain modularity (networkx) on the undirected entity graph, whose edge weight
is the sum of its relations' weights. On the docs KB Louvain and greedy modularity reach a
similar modularity but Louvain is several times faster and its cost grows gently with the
graph (figures in docs/05-graphrag.md), so Louvain is the default and greedy modularity stays
selectable (`GRAPH_COMMUNITY_METHOD`). A community larger than `split_above` is split once
more into level-1 communities.

Summaries are extractive offline: the community's most mentioned members, its explicit
relations, and the sentences of the chunks that mention most of its members. With a model
configured, the model rewrites that material into a short paragraph.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import networkx as nx
from django.db import transaction

from knowledge.models import Chunk, KnowledgeBase

from .models import Community, Entity, Mention, Relation

METHODS = ("louvain", "greedy")
_SENTENCE = re.compile(r"[^。！？!?\n]+[。！？!?]?")


@dataclass(frozen=True)
class CommunityParams:
    method: str = "louvain"
    split_above: int = 40  # members; a larger community gets level-1 sub-communities
    seed: int = 7  # Louvain is randomised; a fixed seed gives one graph the same communities


def entity_graph(kb: KnowledgeBase) -> nx.Graph:
    """The KB's entities as nodes, their relations merged into weighted undirected edges."""
    graph = nx.Graph()
    graph.add_nodes_from(Entity.objects.filter(kb=kb).values_list("id", flat=True))
    weights: Counter[tuple[int, int]] = Counter()
    for source, target, weight in Relation.objects.filter(kb=kb).values_list("source_id", "target_id", "weight"):
        if source != target:
            weights[(min(source, target), max(source, target))] += weight
    graph.add_weighted_edges_from((a, b, w) for (a, b), w in weights.items())
    return graph


def detect(graph: nx.Graph, params: CommunityParams) -> list[set[int]]:
    """Partition the graph's nodes; isolated nodes each stay alone and are dropped."""
    if graph.number_of_edges() == 0:
        return []
    if params.method == "greedy":
        found = nx.community.greedy_modularity_communities(graph, weight="weight")
    else:
        found = nx.community.louvain_communities(graph, weight="weight", seed=params.seed)
    return sorted((set(c) for c in found if len(c) > 1), key=len, reverse=True)


def recompute(
    kb: KnowledgeBase,
    touched: set[int] | None,
    params: CommunityParams = CommunityParams(),
    *,
    summarise: Callable[[str, list[str]], str] | None = None,
) -> int:
    """Recompute the communities holding `touched` entities (all when None); return how many."""
    graph = entity_graph(kb)
    if touched is None or not Community.objects.filter(kb=kb).exists():
        scope_nodes = set(graph.nodes)
        stale = Community.objects.filter(kb=kb)
    else:
        stale_ids = set(
            Entity.objects.filter(kb=kb, id__in=touched, community__isnull=False).values_list("community_id", flat=True)
        )
        stale = Community.objects.filter(kb=kb, level=0, id__in=stale_ids)
        members = set(Entity.objects.filter(community__in=stale).values_list("id", flat=True))
        scope_nodes = (members | touched) & set(graph.nodes)
    groups = detect(graph.subgraph(scope_nodes), params)
    names = dict(Entity.objects.filter(kb=kb, id__in=scope_nodes).values_list("id", "name"))
    counts = dict(Entity.objects.filter(kb=kb, id__in=scope_nodes).values_list("id", "mention_count"))
    with transaction.atomic():
        Entity.objects.filter(kb=kb, id__in=scope_nodes).update(community=None)
        Community.objects.filter(parent__in=stale).delete()
        stale.delete()
        written = 0
        for group in groups:
            top = _write(kb, group, graph, names, counts, level=0, parent=None, summarise=summarise)
            written += 1
            Entity.objects.filter(id__in=group).update(community=top)
            if len(group) > params.split_above:
                for sub in detect(graph.subgraph(group), params):
                    if len(sub) < len(group):
                        _write(kb, sub, graph, names, counts, level=1, parent=top, summarise=summarise)
                        written += 1
    return written


def _write(kb, group, graph, names, counts, *, level, parent, summarise) -> Community:
    ranked = sorted(group, key=lambda e: (-counts.get(e, 0), names.get(e, "")))
    title = " · ".join(names[e] for e in ranked[:3] if e in names)
    chunk_ids, material = _material(kb, ranked, graph, names)
    summary = "\n".join(material)
    if summarise is not None and material:
        summary = summarise(title, material) or summary
    return Community.objects.create(
        kb=kb, level=level, parent=parent, title=title[:300], summary=summary,
        rank=float(sum(counts.get(e, 0) for e in group)), size=len(group), chunk_ids=chunk_ids,
    )


def _material(kb, ranked: list[int], graph: nx.Graph, names: dict[int, str]) -> tuple[list[int], list[str]]:
    """The chunks that mention most of the community's leading members, and their best sentences."""
    leaders = ranked[:12]
    by_chunk: dict[int, set[int]] = defaultdict(set)
    for entity_id, chunk_id in Mention.objects.filter(entity_id__in=leaders).values_list("entity_id", "chunk_id")[:2000]:
        by_chunk[chunk_id].add(entity_id)
    best = sorted(by_chunk, key=lambda c: (-len(by_chunk[c]), c))[:3]
    texts = dict(Chunk.objects.filter(id__in=best).values_list("id", "text"))
    lines = [f"Members: {', '.join(names[e] for e in ranked[:8] if e in names)}"]
    lines.extend(_relations_line(kb, ranked[:20], names))
    member_names = [names[e].lower() for e in leaders if e in names]
    for chunk_id in best:
        sentence = _best_sentence(texts.get(chunk_id, ""), member_names)
        if sentence:
            lines.append(sentence)
    return best, lines


def _relations_line(kb, members: list[int], names: dict[int, str]) -> Iterable[str]:
    explicit = Relation.objects.filter(kb=kb, source_id__in=members, target_id__in=members, weight__gte=Relation.EXPLICIT)
    pairs = list(dict.fromkeys((s, r, t) for s, r, t in explicit.values_list("source_id", "relation", "target_id")[:5]))
    if pairs:
        yield "Relations: " + "; ".join(f"{names.get(s, s)} {r} {names.get(t, t)}" for s, r, t in pairs)


def _best_sentence(text: str, member_names: list[str]) -> str:
    sentences = [s.strip(" #>*-|") for s in _SENTENCE.findall(text)]
    scored = [(sum(name in s.lower() for name in member_names), s) for s in sentences if len(s) >= 12]
    scored = [pair for pair in scored if pair[0]]
    return max(scored, key=lambda pair: pair[0])[1][:240] if scored else ""
