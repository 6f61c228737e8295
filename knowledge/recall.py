"""Multipath retrieval: four recall paths over parent chunks, fused by rank.

1. parent hybrid (weight 1.0): keyword + vector over parents, top 30, fused as the KB's
   hybrid is (not a fixed 0.7/0.3 weighting; the KB's own, tuned or default, fusion
   measured better: cranfield-beir nDCG@10 0.387 -> 0.401 after tuning);
2. child locator (0.8): vector hits on children, grouped by their parent;
3. tag match (1.2): a vector search over the parents whose (or whose children's) tags
   contain a high-value query keyword, cosine × 0.7 so tags cannot swamp the other paths.
   A keyword in the tags of more than 5% of the KB's chunks is a general word (such as
   验收、标准; the KB's own statistics find them, not a fixed list);
   without that filter the path ranked whole corpora by cosine under the highest weight;
4. same chapter (0.5): vector search restricted to the chapter in scope, or else to the
   chapter of path 1's best hit.

A path at weight 0 is left out of fusion: it neither scores nor earns a candidate the
multi-source bonus. It is run only when the params ask for `unfused_paths` (the playground
shows it): on PostgreSQL, running the paths at weight 0 took multipath on cranfield-beir
from 33 to 95 ms a query.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .candidates import Candidate
from .fusion import FusionParams, fuse
from .models import Chunk
from .tagging import extract_tags

if TYPE_CHECKING:
    from .retrieval import RetrievalParams, SearchContext

Paths = dict[str, tuple[float, list[Candidate]]]


@dataclass(frozen=True)
class PathWeights:
    """The paths' weights and bonuses; a KB's tuning may lower those that hurt it.

    `bonus_scale` multiplies the additive bonuses (multi-source, scope, tag exact and
    partial). They are sized against `w / (60 + rank)`, whose best is 1/61 = 0.0164 per path, so at
    scale 1 a +0.08 tag match outranks any path's first place.
    """

    parent_hybrid: float = 1.0
    child_locator: float = 0.8
    tag_match: float = 1.2
    same_chapter: float = 0.5
    tag_similarity_factor: float = 0.7
    tag_max_share: float = 0.05  # keywords tagged on more of the KB's chunks are general words
    tag_candidates: int = 1000  # tagged chunks the tag path's vector search runs over
    bonus_scale: float = 1.0


# What an untuned KB fuses, measured with multipath on cranfield-beir / CMRC2018 (nDCG@10;
# BM25 alone 0.3765 / 0.9856). The tag path ranks the parents whose tags hold a query
# keyword by cosine; 1.2 was meant for tags that are only standard numbers and construction
# terms, ours are any technical term, and at 1.2 the path ranked incidental matches first. The
# bonuses (+0.08 for a tag match, +0.02 for a second path) outweigh a path's first place
# (1/61 = 0.0164). Over e5-small vectors, with the rerank: PathWeights()'s weights and
# bonuses 0.331 / 0.979, without the bonuses 0.331 / 0.986, without the tag path either
# 0.381 / 0.990. Over hashing vectors (no rerank) the child-locator and chapter paths
# rank by n-gram cosine as well: PathWeights() 0.262 / 0.852, the parent hybrid alone and
# without bonuses 0.378 / 0.987. PathWeights() keeps the full weights and bonuses; tuning
# searches from these defaults through PathWeights()'s.
UNTUNED_PATHS = PathWeights(tag_match=0.0, bonus_scale=0.0)
LEXICAL_PATHS = PathWeights(child_locator=0.0, tag_match=0.0, same_chapter=0.0, bonus_scale=0.0)


def multipath_recall(context: SearchContext, params: RetrievalParams) -> Paths:
    """Run the paths; return {path: (weight, parent candidates best first)}.

    The parent hybrid always runs (its best hit names the chapter); the others when they
    have a weight, or when `params.unfused_paths` asks for every path.
    """
    top_k, weights = params.leg_top_k, params.paths

    def runs(weight: float) -> bool:
        return weight > 0 or params.unfused_paths

    parents = _parent_hybrid(context, top_k, params.fusion)
    paths: Paths = {"parent_hybrid": (weights.parent_hybrid, parents)}
    if runs(weights.child_locator):
        paths["child_locator"] = (weights.child_locator, _child_locator(context, top_k))
    if runs(weights.tag_match):
        paths["tag_match"] = (weights.tag_match, _tag_match(context, top_k, weights))
    chapter = params.chapter or _chapter_of(parents)
    if chapter is not None and runs(weights.same_chapter):
        paths["same_chapter"] = (weights.same_chapter, _same_chapter(context, chapter, top_k))
    return paths


def _parent_hybrid(context: SearchContext, top_k: int, fusion: FusionParams) -> list[Candidate]:
    legs = {
        "bm25": context.candidates(context.keyword_hits(level=Chunk.PARENT, top_k=top_k), "bm25"),
        "vector": context.candidates(context.vector_hits(level=Chunk.PARENT, top_k=top_k), "vector"),
    }
    return fuse(legs, params=fusion)[:top_k]


def _child_locator(context: SearchContext, top_k: int) -> list[Candidate]:
    best: dict[int, float] = {}
    hits_per_parent: dict[int, int] = defaultdict(int)
    child_hits = context.vector_hits(level=Chunk.CHILD, top_k=top_k)
    children = context.backend.chunks(context.kb, [chunk_id for chunk_id, _ in child_hits])
    for chunk_id, score in child_hits:
        parent_id = children[chunk_id].parent_id if chunk_id in children else None
        if parent_id is not None:
            best[parent_id] = max(score, best.get(parent_id, score))
            hits_per_parent[parent_id] += 1
    located = context.candidates(sorted(best.items(), key=lambda hit: -hit[1]), "vector")
    for candidate in located:
        candidate.metadata["child_hit_count"] = hits_per_parent[candidate.chunk_id]
    return located


def query_keywords(context: SearchContext) -> list[str]:
    """High-value keywords of the query: its tags, then its longer search tokens."""
    words = [*extract_tags(context.queries[0]), *(t for t in context.tokens[0] if len(t) >= 2)]
    return list(dict.fromkeys(words))[:12]


def _tag_match(context: SearchContext, top_k: int, weights: PathWeights) -> list[Candidate]:
    tagged = context.backend.tagged(
        context.kb, query_keywords(context), limit=weights.tag_candidates, max_share=weights.tag_max_share
    )
    infos = context.backend.chunks(context.kb, tagged)
    parent_ids = list(dict.fromkeys(
        info.chunk_id if info.level == Chunk.PARENT else info.parent_id
        for info in infos.values() if info.level == Chunk.PARENT or info.parent_id
    ))
    if not parent_ids:
        return []
    hits = context.vector_hits(level=Chunk.PARENT, top_k=top_k, only=parent_ids)
    return context.candidates([(chunk_id, score * weights.tag_similarity_factor) for chunk_id, score in hits], "tag")


def _chapter_of(parents: Sequence[Candidate]) -> tuple[str, str] | None:
    for candidate in parents:
        if candidate.chapter_level_1:
            return candidate.chapter_level_1, candidate.chapter_level_2
    return None


def _same_chapter(context: SearchContext, chapter: tuple[str, str], top_k: int) -> list[Candidate]:
    in_chapter = context.backend.in_chapter(context.kb, *chapter)
    if not in_chapter:
        return []
    hits = context.vector_hits(level=Chunk.PARENT, top_k=top_k, only=in_chapter)
    return context.candidates(hits, "vector")
