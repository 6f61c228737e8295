"""One entry point for everything that retrieves: `retrieve(query, kb, params)`.

Modes: "bm25" and "vector" run one leg over child chunks; "hybrid" fuses both legs
(RRF or weighted); "multipath" is a four-path recall over parent chunks (`knowledge.recall`).
Then, as enabled: example penalty, rerank, post-processing, quality gate. Each stage's time
lands in `timings_ms`, each leg's hits in `legs`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Literal

import numpy as np
from django.conf import settings

from agentic_rag.embeddings import Embedder, embed_query_cached, get_embedder, is_lexical
from agentic_rag.llm import get_llm

from .analysis import analyze
from .candidates import Candidate
from .crosslingual import crosslingual_hits, interleave
from .fusion import CROSS_LANG_TERMS, ONE_WAY_TERMS, FusionBonuses, FusionParams, apply_example_penalty, expand_query, fuse, weighted_rrf
from .gate import GateParams, GateResult, apply_quality_gate, gate_for_kb
from .languages import kb_languages, needs_translation
from .lexicon import translate_question
from .models import Chunk, KnowledgeBase
from .postprocess import PostContext, PostProcessingParams, default_pipeline, run_postprocessing
from .recall import LEXICAL_PATHS, UNTUNED_PATHS, PathWeights, multipath_recall
from .rerank import FiveFactorReranker, Reranker, rerank_safely, second_stage_reranker
from .scope import Scope, chapter_chunk_ids, in_scope_first, scope_of_question
from .search import Hit, SearchBackend, alongside, best_of, get_backend, pinned
from .terms import kb_term_map
from .unit_rank import best_units_first

Mode = Literal["bm25", "vector", "hybrid", "multipath", "graph", "hybrid+graph"]
MODES: tuple[str, ...] = ("bm25", "vector", "hybrid", "multipath", "graph", "hybrid+graph")
GRAPH_MODES: tuple[str, ...] = ("graph", "hybrid+graph")  # need the KB's graph (graphrag builds it)

# Recall legs other apps provide over a KB's chunks, by name: `graphrag` registers "graph"
# (knowledge comes before graphrag in the dependency chain, so it cannot import it).
# A leg takes the KB, the query and how many hits to return.
GraphLeg = Callable[[KnowledgeBase, str, int], list[tuple[int, float]]]
RECALL_LEGS: dict[str, GraphLeg] = {}


def register_leg(name: str, leg: GraphLeg) -> None:
    RECALL_LEGS[name] = leg


# Documents a ranking's best documents lead to, by name: `graphrag` registers "graph" (the
# documents whose titles they mention). Takes the KB and the best documents' ids, best first;
# returns (document, one of its chunks, strength), strongest first.
DocumentLinks = Callable[[KnowledgeBase, list[int]], list[tuple[int, int, float]]]
DOCUMENT_LINKS: dict[str, DocumentLinks] = {}


def register_links(name: str, links: DocumentLinks) -> None:
    DOCUMENT_LINKS[name] = links


class InvalidQuery(ValueError):
    """A query that cannot be searched; the message says why."""


@dataclass(frozen=True)
class RetrievalParams:
    mode: Mode = "hybrid"
    top_k: int = 5  # final results
    leg_top_k: int = 30  # per leg, before fusion
    fusion: FusionParams = FusionParams()
    paths: PathWeights = PathWeights()  # multipath only
    # hybrid+graph: up to graph_expand_docs documents the hybrid ranking lacks, reached through
    # the question's entities (the graph leg), placed after its graph_expand_at strongest hits.
    graph_expand_docs: int = 3
    graph_expand_at: int = 5
    # hybrid+graph: the documents whose titles the ranking's graph_link_from best documents
    # mention come first among those added (up to graph_link_docs of them): a question that
    # names one thing to ask about another it describes (docs/05-graphrag.md, "Measured").
    graph_link_from: int = 3
    graph_link_docs: int = 1
    rerank: bool = True
    rerank_depth: int = 20  # only the ranking's head is reranked; the tail keeps its order
    # In hybrid mode, when set, instead of rerank_depth: the fused list already holds BM25's
    # evidence, which the five-factor scorer would count again on hits fusion ranked lower.
    hybrid_rerank_depth: int | None = None
    # After the five-factor scorer, on its top rerank_second_top_n: "" none, "llm" an LLM
    # judge (when a model is configured), or an embedder name (a second embedding model).
    rerank_second_stage: str = ""
    rerank_second_top_n: int = 10
    postprocess: bool = True
    gate: GateParams | None = GateParams()
    expand_cross_language: bool = True
    max_expansions: int = 3
    # The vector leg embeds the query and its first two variants (the lexicon's, the term
    # map's whole translation); the one-word swaps after them are for the keyword leg: each
    # would cost an e5-small embedding (about 15 ms) and moves a dense vector little.
    vector_variants: int = 3
    example_penalty: bool = True
    max_query_chars: int = 1000
    scope: str | None = None
    chapter: tuple[str, str] | None = None  # (chapter_level_1, chapter_level_2) for multipath
    # Multipath also runs the paths at weight 0, which fusion leaves out, to show them (the
    # playground); otherwise they are skipped, since on PostgreSQL they cost most of recall.
    unfused_paths: bool = False
    # The scope the gate holds the references to (knowledge.scope): one a control chose, or
    # else, with detect_scope, the document or chapter the query names.
    named_scope: Scope | None = None
    detect_scope: bool = True

    @property
    def reranks(self) -> bool:
        """Whether the search reranks: never in bm25 mode, which has no vectors to score with."""
        return self.rerank and self.mode != "bm25"

    @property
    def head_to_rerank(self) -> int:
        """How many of the ranking's first candidates the rerank reorders in this mode."""
        if self.mode in ("hybrid", "hybrid+graph") and self.hybrid_rerank_depth is not None:
            return self.hybrid_rerank_depth
        return self.rerank_depth


@dataclass
class RetrievalResult:
    query: str
    mode: str
    candidates: list[Candidate] = field(default_factory=list)
    legs: dict[str, list[Candidate]] = field(default_factory=dict)
    fused: list[Candidate] = field(default_factory=list)
    reranked: list[Candidate] = field(default_factory=list)
    gate: GateResult | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    reason: str = ""  # why there are no candidates, when there are none
    # The sub-questions a multi-part search (an agent's rounds or plan) answered one by one.
    parts: list[str] = field(default_factory=list)
    scope: Scope | None = None  # the document or chapter the gate held the references to

    def results(self) -> list[dict[str, Any]]:
        return [candidate.as_result(rank) for rank, candidate in enumerate(self.candidates, 1)]

    @property
    def references(self) -> list[Candidate]:
        """The candidates the gate accepted (all of them when no gate ran)."""
        return list(self.gate.references) if self.gate else list(self.candidates)


class _Timer:
    def __init__(self, timings: dict[str, float]) -> None:
        self.timings = timings

    def __call__(self, stage: str, work: Callable[[], Any]) -> Any:
        started = perf_counter()
        try:
            return work()
        finally:
            self.timings[stage] = round((perf_counter() - started) * 1000, 3)


@dataclass(frozen=True)
class SearchContext:
    """What the legs and recall paths share for one query."""

    kb: KnowledgeBase
    backend: SearchBackend
    queries: tuple[str, ...]  # the query and its cross-language variants
    tokens: tuple[tuple[str, ...], ...]  # analysed tokens of each query
    vectors: tuple[np.ndarray, ...]  # embedding of each query
    # What each query's keyword scores count for (1 when absent): a translation by the KB's
    # lexicon may count for less than the question's own words (lexicon.translate_question).
    weights: tuple[float, ...] = ()

    def keyword_hits(self, *, level: int, top_k: int, only=None) -> list[Hit]:
        lists = [self.backend.keyword(self.kb, t, level=level, top_k=top_k, only=only) for t in self.tokens]
        if any(weight != 1.0 for weight in self.weights):
            lists = [[(chunk, score * weight) for chunk, score in hits] for hits, weight in zip(lists, self.weights, strict=False)]
        return best_of(lists, top_k)

    def vector_hits(self, *, level: int, top_k: int, only=None) -> list[Hit]:
        return best_of([self.backend.vector(self.kb, v, level=level, top_k=top_k, only=only) for v in self.vectors], top_k)

    def candidates(self, hits: Sequence[Hit], source: str) -> list[Candidate]:
        return self.candidates_by_source({source: hits})[source]

    def candidates_by_source(self, hits_by_source: Mapping[str, Sequence[Hit]]) -> dict[str, list[Candidate]]:
        """Each source's hits as candidates, their chunks loaded in one call for all sources."""
        infos = self.backend.chunks(self.kb, {c for hits in hits_by_source.values() for c, _ in hits})
        return {
            source: [infos[c].candidate(score, source) for c, score in hits if c in infos]
            for source, hits in hits_by_source.items()
        }

    def fill_vector_scores(self, candidates: Sequence[Candidate]) -> None:
        """Give every candidate its cosine to the query, for rerank and the gate."""
        missing = [c for c in candidates if "vector" not in c.scores]
        if missing:
            cosines = self.backend.cosines(self.kb, self.vectors[0], [c.chunk_id for c in missing])
            for candidate, cosine in zip(missing, cosines, strict=True):
                candidate.scores["vector"] = float(cosine)


def retrieve(
    query: str,
    kb: KnowledgeBase,
    params: RetrievalParams = RetrievalParams(),
    *,
    backend: SearchBackend | None = None,
    embedder: Embedder | None = None,
) -> RetrievalResult:
    """Find the chunks of `kb` that answer `query`, with every stage's scores and timings."""
    query, warnings = _clean_query(query, params.max_query_chars)
    result = RetrievalResult(query=query, mode=params.mode, warnings=warnings)
    started = perf_counter()
    backend = backend or get_backend()
    load_started = perf_counter()
    with pinned(backend, kb):
        # Entering the pin checks the KB's version, and rebuilds the embedded index if it moved.
        result.timings_ms["load_index"] = round((perf_counter() - load_started) * 1000, 3)
        if not backend.has_entries(kb):
            result.reason = "the knowledge base has no ready documents"
        else:
            _search(query, kb, params, backend, embedder, result)
    result.timings_ms["total"] = round((perf_counter() - started) * 1000, 3)
    return result


def _search(query, kb, params, backend, embedder, result: RetrievalResult) -> None:
    timer = _Timer(result.timings_ms)
    if params.expand_cross_language and not needs_translation(query, kb_languages(kb)):
        # A KB in the question's language alone: translated variants reach nothing new there.
        params = dataclasses.replace(params, expand_cross_language=False)
    context = _search_context(query, kb, params, backend, embedder, timer)
    if not any(context.tokens):
        # Punctuation or emoji alone: a vector of it would match noise.
        result.reason = "the query has no words to search for"
        return
    result.fused = _recall(context, params, result, timer)
    if settings.CROSSLINGUAL_LEG and needs_translation(query, kb_languages(kb)):
        extra = timer("crosslingual", lambda: context.candidates(crosslingual_hits(kb, query, params.leg_top_k), "crosslingual"))
        if extra:  # none without the reader's encoder or its unit vectors
            result.legs["crosslingual"] = extra
            result.fused = interleave(result.fused, extra, limit=settings.CROSSLINGUAL_SLOTS)
    result.scope = timer("scope", lambda: _scope(query, kb, params))
    if result.scope and result.scope.chapter:
        result.fused = _with_chapter_chunks(context, result.fused, result.scope, params.top_k)
    ranked = _refine(context, params, result, timer)
    if params.mode == "hybrid+graph":
        linked = timer("graph_links", lambda: _linked_candidates(context, ranked, params))
        if linked or result.legs.get("graph"):
            ranked = _expand_with_graph(ranked, result.legs.get("graph", []), params, linked)
    result.candidates = ranked
    if params.gate is not None:
        result.gate = timer("gate", lambda: apply_quality_gate(
            _judged_first(context, ranked, params), params.gate, scope=result.scope or params.scope
        ))
    if not ranked:
        result.reason = "nothing in the knowledge base matches the query"


def _judged_first(context: SearchContext, ranked: list[Candidate], params: RetrievalParams) -> list[Candidate]:
    """The ranking in the order the gate judges it: by best units when no reranker read the head.

    The five-factor reranker already weighs the question's terms a chunk holds against a model's
    cosine; a head it ordered is left as it is (knowledge.unit_rank).
    """
    if params.reranks or params.gate is None:
        return ranked
    return best_units_first(ranked, context.tokens, tokenize=analyze, head=params.top_k, keep=params.gate.submit_top_k)


def _scope(query: str, kb: KnowledgeBase, params: RetrievalParams) -> Scope | None:
    """The scope a control chose, else the one the query names (only for a gate to check)."""
    if params.named_scope is not None:
        return params.named_scope or None
    if params.detect_scope and params.gate is not None:
        return scope_of_question(query, kb)
    return None


def _with_chapter_chunks(context: SearchContext, fused: list[Candidate], scope: Scope, top_k: int) -> list[Candidate]:
    """The fused candidates, then the named chapter's first chunks that recall missed."""
    found = {candidate.chunk_id for candidate in fused}
    missing = [(chunk_id, 0.0) for chunk_id in chapter_chunk_ids(context.kb, scope, 2 * top_k) if chunk_id not in found]
    return fused + context.candidates(missing, "scope") if missing else fused


def _clean_query(query: str, max_chars: int) -> tuple[str, list[str]]:
    query = " ".join((query or "").split())
    if not query:
        raise InvalidQuery("the query is empty")
    if len(query) > max_chars:
        return query[:max_chars], [f"the query was truncated to its first {max_chars} characters"]
    return query, []


def _search_context(query, kb, params, backend, embedder, timer) -> SearchContext:
    weights: tuple[float, ...] = ()
    if params.expand_cross_language:
        terms = kb_term_map(kb.pk, CROSS_LANG_TERMS, ONE_WAY_TERMS)  # the KB's own translations too
        variants = expand_query(query, terms, limit=params.max_expansions)
        translation = timer("lexicon", lambda: translate_question(query, kb))
        if variant := translation.variant(query):
            variants = [variants[0], variant, *variants[1:]]
            weights = (1.0, translation.weight, *(1.0 for _ in variants[2:]))
    else:
        variants = [query]
    tokens = timer("analyze", lambda: tuple(tuple(analyze(q)) for q in variants))
    vectors: tuple[np.ndarray, ...] = ()
    if params.mode != "bm25":
        model = embedder or get_embedder(backend.embedder_name(kb) or None)
        embedded = variants[: params.vector_variants]
        vectors = timer("embed_query", lambda: tuple(embed_query_cached(model, q) for q in embedded))
    return SearchContext(kb, backend, tuple(variants), tokens, vectors, weights)


def _recall(context: SearchContext, params: RetrievalParams, result: RetrievalResult, timer) -> list[Candidate]:
    if params.mode == "multipath":
        paths = timer("recall", lambda: multipath_recall(context, params))
        result.legs = {name: hits for name, (_, hits) in paths.items()}
        keywords = [t for tokens in context.tokens for t in tokens]
        bonuses = FusionBonuses().scaled(params.paths.bonus_scale)
        return timer("fusion", lambda: weighted_rrf(paths, keywords=keywords, scope=params.scope, bonuses=bonuses))
    legs = _keyword_and_vector_legs(context, params, timer)
    if params.mode in GRAPH_MODES:
        legs["graph"] = timer("graph", lambda: _graph_leg(context, params, result))
    result.legs = legs
    if len(legs) == 1:
        return [_as_fused(candidate) for candidate in next(iter(legs.values()))]
    # The graph leg does not vote in fusion (its chunk scores rank entities' neighbourhoods,
    # not passages); hybrid+graph adds its documents after the rerank (_expand_with_graph).
    fused_legs = {name: hits for name, hits in legs.items() if name != "graph"}
    return timer("fusion", lambda: fuse(fused_legs, params=params.fusion))


def _keyword_and_vector_legs(context: SearchContext, params: RetrievalParams, timer) -> dict[str, list[Candidate]]:
    """The candidates of the keyword and vector legs the mode asks for.

    When the backend can, the vector leg runs and loads its chunks beside the keyword leg
    (on PostgreSQL, while the HNSW scan runs); else both legs' chunks load in one call.
    """
    wants_keyword = params.mode in ("bm25", "hybrid", "hybrid+graph")
    wants_vector = params.mode in ("vector", "hybrid", "hybrid+graph")

    def keyword_hits() -> list[Hit]:
        return timer("bm25", lambda: context.keyword_hits(level=Chunk.CHILD, top_k=params.leg_top_k))

    def vector_hits() -> list[Hit]:
        return timer("vector", lambda: context.vector_hits(level=Chunk.CHILD, top_k=params.leg_top_k))

    if wants_keyword and wants_vector:
        vector_leg = alongside(context.backend, context.kb, lambda: context.candidates(vector_hits(), "vector"))
        if vector_leg is not None:
            keyword = context.candidates(keyword_hits(), "bm25")
            return {"bm25": keyword, "vector": vector_leg()}
    hits = {}
    if wants_keyword:
        hits["bm25"] = keyword_hits()
    if wants_vector:
        hits["vector"] = vector_hits()
    return context.candidates_by_source(hits)


def _graph_leg(context: SearchContext, params: RetrievalParams, result: RetrievalResult) -> list[Candidate]:
    leg = RECALL_LEGS.get("graph")
    if leg is None:
        result.warnings.append("graph search is not available in this deployment")
        return []
    hits = leg(context.kb, context.queries[0], params.leg_top_k)
    if not hits and params.mode == "graph":
        result.warnings.append("the question names no entity of the knowledge base's graph (or it has none yet)")
    return context.candidates(hits, "graph")


def _linked_candidates(context: SearchContext, ranked: list[Candidate], params: RetrievalParams) -> list[Candidate]:
    """A chunk of each document whose title the ranking's best documents mention."""
    links = DOCUMENT_LINKS.get("graph")
    if links is None or params.graph_link_from <= 0 or params.graph_link_docs <= 0:
        return []
    best: list[int] = []
    for candidate in ranked:
        if candidate.doc_id not in best:
            best.append(candidate.doc_id)
            if len(best) == params.graph_link_from:
                break
    found = links(context.kb, best)[: params.graph_link_docs] if best else []
    if not found:
        return []
    ranked_chunk = {}
    for candidate in ranked:
        ranked_chunk.setdefault(candidate.doc_id, candidate)
    loaded = {c.doc_id: c for c in context.candidates([(chunk, 0.0) for doc, chunk, _ in found if doc not in ranked_chunk], "graph")}
    linked = [ranked_chunk.get(doc) or loaded.get(doc) for doc, _, _ in found]
    return [candidate for candidate in linked if candidate is not None]


def _expand_with_graph(
    ranked: list[Candidate], graph: list[Candidate], params: RetrievalParams, linked: Sequence[Candidate] = ()
) -> list[Candidate]:
    """Place the best chunk of each document only the graph leg found after the strongest hits.

    A question about how two things relate often needs a second document that shares the
    question's entities but few of its words; fusing the graph's scores into every rank
    lowered single-document questions, adding its new documents at a fixed depth did not
    (docs/05-graphrag.md, "Measured").
    """
    # A linked document moves up to the insertion point from wherever it stands; the walk's
    # documents only join when the ranking lacks them.
    ahead = {c.doc_id for c in ranked[: params.graph_expand_at]}
    extra = []
    for candidate in linked:
        if candidate.doc_id not in ahead:
            ahead.add(candidate.doc_id)
            added = candidate.copy()
            added.notes.append("graph: a document the best hits name by its title")
            extra.append(added)
    seen = {c.doc_id for c in ranked[: params.top_k]} | ahead
    walked = 0
    for candidate in graph:
        if candidate.doc_id not in seen and walked < params.graph_expand_docs:
            walked += 1
            seen.add(candidate.doc_id)
            added = candidate.copy()
            added.notes.append("graph: a document the question's entities lead to")
            extra.append(added)
    if not extra:
        return ranked
    added_ids = {c.chunk_id for c in extra}
    rest = [c for c in ranked if c.chunk_id not in added_ids]
    at = min(params.graph_expand_at, max(1, params.top_k - len(extra)), len(rest))
    for candidate in extra:  # ranked where it stands, so later stages keep the order
        candidate.score = rest[at - 1].score if at else candidate.score
    return rest[:at] + extra + rest[at:]


def _as_fused(candidate: Candidate) -> Candidate:
    """Copy a single leg's hit as the fused list's, its leg score as the fused score."""
    fused = candidate.copy()
    fused.scores["fusion"] = candidate.score
    return fused


def _refine(context: SearchContext, params: RetrievalParams, result: RetrievalResult, timer) -> list[Candidate]:
    ranked = list(result.fused)
    if params.example_penalty:
        ranked = apply_example_penalty(ranked)
    ranked = in_scope_first(ranked, result.scope)  # so the gate has some to accept
    if params.reranks:
        depth = params.head_to_rerank
        timer("cosines", lambda: context.fill_vector_scores(ranked[:depth]))
        reranker = FiveFactorReranker(tokenize=analyze, variants=context.queries[1:])
        head, tail = ranked[:depth], ranked[depth:]
        head = timer("rerank", lambda: rerank_safely(reranker, context.queries[0], head, warnings=result.warnings))
        second = _second_stage(params, result.warnings) if len(head) >= 4 else None
        if second is not None:
            top, rest = head[: params.rerank_second_top_n], head[params.rerank_second_top_n :]
            # A failing second stage keeps the five-factor order (rerank_safely restores it).
            top = timer("rerank.second", lambda: rerank_safely(second, context.queries[0], top, warnings=result.warnings))
            head = top + rest
        ranked = in_scope_first(head + tail, result.scope)
        result.reranked = list(ranked)
    if not params.postprocess:
        return ranked[: params.top_k]
    post = PostContext(query=context.queries[0], neighbours=_neighbour_lookup(context, ranked))
    pipeline = default_pipeline(PostProcessingParams(top_k=params.top_k))
    ranked, timings = run_postprocessing(ranked, post, pipeline, warnings=result.warnings)
    result.timings_ms.update({f"post.{name}": round(ms, 3) for name, ms in timings.items()})
    return ranked


def _second_stage(params: RetrievalParams, warnings: list[str]) -> Reranker | None:
    try:
        return second_stage_reranker(params.rerank_second_stage, get_llm=get_llm, get_embedder=get_embedder)
    except Exception as exc:  # a misnamed or unloadable scorer must not fail the search
        warnings.append(f"rerank skipped: the second stage '{params.rerank_second_stage}' is unavailable: {exc}")
        return None


def _neighbour_lookup(context: SearchContext, ranked: Sequence[Candidate]):
    # Candidates know their place; loading their chunks again cost the PostgreSQL backend a query.
    texts = context.backend.neighbours(context.kb, ranked)

    def lookup(candidate: Candidate) -> tuple[str, str]:
        key = (candidate.doc_id, candidate.level)
        return texts.get((*key, candidate.index - 1), ""), texts.get((*key, candidate.index + 1), "")

    return lookup


# --- per-KB settings ----------------------------------------------------------------------

_FUSION_FIELDS = {f.name for f in dataclasses.fields(FusionParams)}
_PATH_FIELDS = {f.name for f in dataclasses.fields(PathWeights)}
_PARAM_FIELDS = {
    "mode", "top_k", "leg_top_k", "rerank", "rerank_second_stage", "postprocess", "expand_cross_language",
    "example_penalty",
}


# Tuned for one embedder's vectors: after the KB moves to another, these fall back to the
# defaults until the KB is tuned again.
_EMBEDDER_BOUND = ("fusion", "rerank", "paths", "gate")


# An untuned KB over hashing (lexical) vectors: BM25 ranks, and the vector leg only adds the
# chunks BM25 did not find (weight 0: they follow BM25's hits). Hashing vectors score n-gram
# overlap, which BM25 already measures better on every set here (nDCG@10, vectors alone:
# cranfield-beir 0.2224, CMRC2018 dev 0.8688, the docs KB's 170 golden questions 0.6500, against
# BM25's 0.3809 / 0.9857 / 0.8061). Any weight they get moves BM25's ranking by noise, and no
# weight kept hybrid at or above BM25 on all three (`evaluation.probes.fusion_probe`, rerank off):
#   weighted 0.05/0.95   0.3812 / 0.9857 / 0.8042   (the earlier default; below BM25 on the docs)
#   weighted 0.02/0.98   0.3813 / 0.9855 / 0.8063   (below on CMRC2018)
#   weighted 0.01/0.99   0.3801 / 0.9856 / 0.8062   (below on cranfield-beir)
#   weighted 0/1         0.3809 / 0.9857 / 0.8064   (at or above on all three)
# The five-factor rerank lifts CMRC2018 (0.9916) but lowers the other two, so it stays off.
LEXICAL_FUSION = FusionParams(mode="weighted", vector_weight=0.0, bm25_weight=1.0)

# An untuned KB over model vectors (e5-small): weighted 0.4/0.6, the five-factor rerank on
# fusion's top 5 only (MODEL_HYBRID_RERANK_DEPTH). nDCG@10 with `evaluation.probes.fusion_probe`
# on cranfield-beir (225 q) / CMRC2018 dev, first 300 passages (1,042 q) / the docs KB's 170
# golden questions; the best single leg is BM25 / the vectors with their rerank / BM25:
#   BM25                              0.3809 / 0.9885 / 0.8102
#   vector, rerank top 20             0.3693 / 0.9950 / 0.7724
#   weighted 0.7/0.3, rerank top 10   0.3926 / 0.9962 / 0.7971   (the earlier default; below BM25 on the docs)
#   weighted 0.5/0.5, rerank top 10   0.4001 / 0.9961 / 0.8099   (below BM25 on the docs)
#   weighted 0.5/0.5, rerank top 5    0.4025 / 0.9953 / 0.8155
#   weighted 0.4/0.6, rerank top 5    0.4037 / 0.9957 / 0.8182
#   weighted 0.5/0.5, no rerank       0.3998 / 0.9945 / 0.8251   (below the vectors on CMRC2018)
# The rerank costs the docs a little at every depth and lifts CMRC2018; on the top 5 it only
# reorders fusion's best few. 0.5/0.5 and 0.4/0.6 with it are at or above the best leg on all
# three, 0.4/0.6 by the wider margins; answers through the chat agree (docs-answers-held-out over
# e5, source pass 0.86 against 0.84 with 0.5/0.5). A KB in Chinese alone fuses
# CHINESE_MODEL_FUSION instead. Vector and multipath modes keep rerank_depth (20).
MODEL_FUSION = FusionParams(mode="weighted", vector_weight=0.4, bm25_weight=0.6)
MODEL_HYBRID_RERANK_DEPTH = 5

# An untuned KB in Chinese alone over model vectors: weighted 0.8/0.2, the rerank on fusion's
# top 10. On Chinese news and encyclopedia passages the vectors with their rerank outrank BM25
# over jieba's word pieces, and MODEL_FUSION, leaning on BM25, ranked below them (the issue's
# held-back news set; CMRC2018 paragraphs and their news-length windows): hybrid must not lose
# to its best leg. The rerank's term factors bring the words back, so fusion can lean on the
# vectors; over the top 5 only it fell below them on whole CMRC2018 paragraphs. English and
# bilingual technical KBs keep MODEL_FUSION, where BM25 is the stronger leg. `manage.py
# fusion_bench --kb SLUG` prints both legs and the default side by side.
CHINESE_MODEL_FUSION = FusionParams(mode="weighted", vector_weight=0.8, bm25_weight=0.2)
CHINESE_HYBRID_RERANK_DEPTH = 10


def default_fusion(embedder_name: str, languages: Collection[str] = ()) -> FusionParams:
    """The fusion an untuned KB searches with: LEXICAL_FUSION over hashing vectors; over model
    vectors CHINESE_MODEL_FUSION when the KB's languages are Chinese alone, else MODEL_FUSION."""
    if is_lexical(embedder_name):
        return LEXICAL_FUSION
    return CHINESE_MODEL_FUSION if set(languages) == {"zh"} else MODEL_FUSION


def default_hybrid_rerank_depth(embedder_name: str, languages: Collection[str] = ()) -> int | None:
    """How deep hybrid search reranks: over model vectors CHINESE_HYBRID_RERANK_DEPTH for a KB in
    Chinese alone, else MODEL_HYBRID_RERANK_DEPTH; over hashing vectors rerank_depth (None)."""
    if is_lexical(embedder_name):
        return None
    return CHINESE_HYBRID_RERANK_DEPTH if set(languages) == {"zh"} else MODEL_HYBRID_RERANK_DEPTH


def default_paths(embedder_name: str) -> PathWeights:
    """Multipath's weights for an untuned KB: UNTUNED_PATHS, or LEXICAL_PATHS over hashing vectors."""
    return LEXICAL_PATHS if is_lexical(embedder_name) else UNTUNED_PATHS


def default_rerank(embedder_name: str) -> bool:
    """Whether an untuned KB reranks: yes, unless its vectors are lexical (see LEXICAL_FUSION)."""
    return not is_lexical(embedder_name)


def params_for_kb(kb: KnowledgeBase, **overrides: Any) -> RetrievalParams:
    """The KB's stored retrieval settings as params, with keyword overrides on top."""
    stored = dict(kb.retrieval_settings or {})
    if stored.get("embedder", kb.embedder) != kb.embedder:
        for key in _EMBEDDER_BOUND:
            stored.pop(key, None)
    fusion_values = {k: v for k, v in (stored.get("fusion") or {}).items() if k in _FUSION_FIELDS}
    languages = kb_languages(kb)
    fusion = FusionParams(**fusion_values) if fusion_values else default_fusion(kb.embedder or "", languages)
    path_values = {k: v for k, v in (stored.get("paths") or {}).items() if k in _PATH_FIELDS}
    paths = dataclasses.replace(default_paths(kb.embedder or ""), **path_values)
    values = {k: v for k, v in stored.items() if k in _PARAM_FIELDS}
    values.setdefault("rerank", default_rerank(kb.embedder or ""))
    values.setdefault("hybrid_rerank_depth", default_hybrid_rerank_depth(kb.embedder or "", languages))
    values.setdefault("rerank_second_stage", settings.RERANK_SECOND_STAGE)
    values.setdefault("gate", gate_for_kb(stored.get("gate"), lexical=is_lexical(kb.embedder or "")))
    params = RetrievalParams(
        fusion=fusion, paths=paths, max_query_chars=settings.RETRIEVAL_MAX_QUERY_CHARS, **values
    )
    return dataclasses.replace(params, **overrides)


def save_params_for_kb(kb: KnowledgeBase, params: RetrievalParams) -> None:
    """Store the mode, fusion, rerank and multipath weights as the KB's settings.

    They are recorded with the KB's embedder: weights tuned on one embedder's vectors do
    not carry over to another's.
    """
    kb.refresh_from_db(fields=["embedder"])
    kb.retrieval_settings = {
        **(kb.retrieval_settings or {}),
        "mode": params.mode,
        "rerank": params.rerank,
        "fusion": dataclasses.asdict(params.fusion),
        "paths": dataclasses.asdict(params.paths),
        **({"gate": {"five_factor_min": params.gate.five_factor_min}} if params.gate else {}),
        "embedder": kb.embedder,
    }
    KnowledgeBase.objects.filter(pk=kb.pk).update(retrieval_settings=kb.retrieval_settings)
