"""Choose a KB's fusion mode, leg weights and leg thresholds from its golden questions.

Each question is retrieved once in hybrid mode without rerank; its two legs (what fusion
sees in production, `leg_top_k` deep) are kept and fused again in memory with
`knowledge.fusion.fuse` for every grid point. The grid is searched on the train split;
the winner and the defaults are then scored on the held-out test split, both on the fused
ranking and through the full `retrieve`, as `manage.py evaluate` runs it.

Rerank is chosen the same way: the winning fusion is run through `retrieve` on the train
split with rerank on and off, and rerank stays on unless turning it off scores better.
The five-factor scorer helps where titles and key terms carry the answer and can hurt a
strong fused ranking, so the KB's questions decide.

The quality gate's rerank threshold is calibrated on the same split (`calibrate_rerank_gate`):
the five-factor score is on no calibrated scale, so its threshold is the highest that keeps
GATE_KEEP of the references from relevant documents and one for every question that had one,
and the references it rejects are the noise it is measured by. The LLM judge's threshold
stays the seed's 0.70 on its 0-10 scale (tuning leaves a second stage out: it would call the
model for every train question).

Multi-path recall fuses its paths by rank alone, so a weak path at a high weight pulls it
below its best path: the tag path (1.2) where tags are incidental compounds, the child
locator (0.8, vector only) where the parent hybrid is stronger; and the additive bonuses
(+0.08 for a tag match against 0.0167 for a path's first place) can outweigh all paths.
The two weights and the bonuses (on or off) are searched through `retrieve` in multipath
mode on (at most PATH_SAMPLE of) the train questions; the KB's untuned weights come first
and win ties.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from time import perf_counter

import numpy as np

from knowledge.candidates import Candidate
from knowledge.fusion import FusionParams, apply_example_penalty, fuse
from knowledge.gate import GateParams
from knowledge.languages import kb_languages
from knowledge.models import KnowledgeBase
from knowledge.recall import PathWeights
from knowledge.rerank import FIVE_FACTOR_KEY
from knowledge.retrieval import (
    InvalidQuery,
    RetrievalParams,
    default_fusion,
    default_paths,
    default_rerank,
    retrieve,
    save_params_for_kb,
)

from .metrics import score_ranking, summarise
from .models import Split
from .runner import (
    CHUNK_DEPTH,
    EvalQuestion,
    EvaluationError,
    RetrievalRanker,
    document_ranking,
    evaluation_params,
    run_ranker,
)

# Vector weight; BM25 gets the rest. The ends (one leg alone) are in the grid so the
# tuned hybrid is never below its best single leg on the train split.
WEIGHTS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.0)
BM25_THRESHOLDS = (0.0, 0.1, 0.3)  # after min-max normalisation
VECTOR_QUANTILES = (0.25, 0.5)  # raw cosine thresholds: these quantiles of the legs' scores
CHILD_LOCATOR_WEIGHTS = (0.8, 0.4, 0.0)
TAG_MATCH_WEIGHTS = (1.2, 0.6, 0.3, 0.0)
BONUS_SCALES = (1.0, 0.0)
PATH_SAMPLE = 300
GATE_THRESHOLDS = tuple(round(0.05 * step, 2) for step in range(19))  # 0.0 … 0.9
GATE_KEEP = 0.95  # of the references from relevant documents the threshold must keep
OBJECTIVE = "ndcg@10"


@dataclass(frozen=True)
class Legs:
    question: EvalQuestion
    legs: dict[str, list[Candidate]]


@dataclass
class TuningReport:
    default: FusionParams
    best: FusionParams
    grid_points: int
    train_questions: int
    test_questions: int
    default_train: dict[str, float]
    best_train: dict[str, float]
    default_test: dict[str, float]
    best_test: dict[str, float]
    # Through `retrieve` with rerank, as `manage.py evaluate` measures: test split.
    default_test_retrieve: dict[str, float] | None = None
    best_test_retrieve: dict[str, float] | None = None
    # The winning fusion through `retrieve` on the train split, rerank on and off.
    rerank_train: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    rerank: bool = True
    # Multipath: train metrics per "child/tag/bonus" point, the chosen point, and the test
    # split under the KB's untuned weights and the chosen ones.
    path_weights_train: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    path_weights: tuple[float, float, float] = (0.0, 0.0, 0.0)
    multipath_test: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    # The gate's five-factor threshold: chosen on the train split, measured on the test split.
    gate: GateCalibration | None = None
    seconds: float = 0.0


def collect_legs(kb: KnowledgeBase, questions: Sequence[EvalQuestion], params: RetrievalParams) -> list[Legs]:
    """Retrieve each question once in hybrid mode and keep its bm25 and vector legs."""
    hybrid = dataclasses.replace(params, mode="hybrid", rerank=False)
    collected = []
    for question in questions:
        try:
            result = retrieve(question.text, kb, hybrid)
        except InvalidQuery:
            result = None
        collected.append(Legs(question, result.legs if result else {}))
    return collected


def fused_ranking(legs: dict[str, list[Candidate]], fusion: FusionParams, *, example_penalty: bool) -> list[int]:
    """Rank documents as hybrid retrieval without rerank would, under `fusion`."""
    fused = fuse(legs, params=fusion) if legs else []
    if example_penalty:
        fused = apply_example_penalty(fused)
    return document_ranking(fused[:CHUNK_DEPTH])


def score_fusion(collected: Sequence[Legs], fusion: FusionParams, *, example_penalty: bool) -> dict[str, float]:
    return summarise([
        score_ranking(fused_ranking(item.legs, fusion, example_penalty=example_penalty), item.question.relevance)
        for item in collected
    ])


def fusion_grid(base: FusionParams, vector_scores: Sequence[float]) -> list[FusionParams]:
    """Every mode × weight pair × vector threshold × BM25 threshold, the base first."""
    quantiles = np.quantile(vector_scores, VECTOR_QUANTILES) if len(vector_scores) else []
    vector_thresholds = sorted({0.0, *(round(float(q), 2) for q in quantiles)})
    grid = [base]
    for mode, weight, vector_t, bm25_t in product(("rrf", "weighted"), WEIGHTS, vector_thresholds, BM25_THRESHOLDS):
        point = dataclasses.replace(
            base, mode=mode, vector_weight=weight, bm25_weight=round(1 - weight, 2),
            vector_threshold=vector_t, bm25_threshold=bm25_t,
        )
        if point not in grid:
            grid.append(point)
    return grid


def tune(kb: KnowledgeBase, questions: Sequence[EvalQuestion], *, save: bool = True) -> TuningReport:
    """Grid-search fusion on the train split, report the test split, store the winner."""
    started = perf_counter()
    train = [q for q in questions if q.split == Split.TRAIN]
    test = [q for q in questions if q.split == Split.TEST]
    if not train or not test:
        raise EvaluationError(f"tuning needs questions in both splits (train {len(train)}, test {len(test)})")
    # The reference is what the KB serves untuned, whatever it stores now. A second rerank
    # stage (an LLM judge, say) is left out: tuning would call it for every train question.
    kb.refresh_from_db(fields=["embedder"])
    params = evaluation_params(
        kb, "hybrid", fusion=default_fusion(kb.embedder, kb_languages(kb)), rerank=default_rerank(kb.embedder), paths=default_paths(kb.embedder),
        rerank_second_stage="",
        leg_top_k=RetrievalParams.leg_top_k, expand_cross_language=True, example_penalty=True,
    )
    penalty = params.example_penalty
    train_legs = collect_legs(kb, train, params)
    vector_scores = [c.score for item in train_legs for c in item.legs.get("vector", [])]
    grid = fusion_grid(params.fusion, vector_scores)
    scored = [(score_fusion(train_legs, point, example_penalty=penalty), point) for point in grid]
    # max keeps the first of equal scores: the untuned defaults (first in the grid) win ties.
    best_train, best = max(scored, key=lambda pair: pair[0][OBJECTIVE])
    rerank_train = {
        "on": _retrieve_metrics(kb, train, dataclasses.replace(params, fusion=best, rerank=True)),
        "off": _retrieve_metrics(kb, train, dataclasses.replace(params, fusion=best, rerank=False)),
    }
    rerank = rerank_train["on"][OBJECTIVE] >= rerank_train["off"][OBJECTIVE]
    chosen = dataclasses.replace(params, fusion=best, rerank=rerank)
    sample = train[:: max(1, len(train) // PATH_SAMPLE)][:PATH_SAMPLE]
    points = path_grid(params.paths)
    path_weights_train = {_label(point): _retrieve_metrics(kb, sample, _multipath(chosen, point)) for point in points}
    path_weights = max(points, key=lambda point: path_weights_train[_label(point)][OBJECTIVE])
    chosen = _with_paths(chosen, path_weights)
    gate = calibrate_rerank_gate(kb, train, test, chosen)
    chosen = dataclasses.replace(chosen, gate=dataclasses.replace(chosen.gate or GateParams(), five_factor_min=gate.threshold))
    test_legs = collect_legs(kb, test, params)
    report = TuningReport(
        default=params.fusion,
        best=best,
        grid_points=len(grid),
        train_questions=len(train),
        test_questions=len(test),
        default_train=scored[0][0],
        best_train=best_train,
        default_test=score_fusion(test_legs, params.fusion, example_penalty=penalty),
        best_test=score_fusion(test_legs, best, example_penalty=penalty),
        rerank_train=rerank_train,
        rerank=rerank,
        path_weights_train=path_weights_train,
        path_weights=path_weights,
        multipath_test={
            "default": _retrieve_metrics(kb, test, _multipath(chosen, points[0])),
            "tuned": _retrieve_metrics(kb, test, _multipath(chosen, path_weights)),
        },
        gate=gate,
    )
    report.default_test_retrieve = _retrieve_metrics(kb, test, params)
    report.best_test_retrieve = _retrieve_metrics(kb, test, chosen)
    if save:
        save_params_for_kb(kb, chosen)
    report.seconds = perf_counter() - started
    return report


PathPoint = tuple[float, float, float]  # (child_locator, tag_match, bonus_scale)


def path_grid(default: PathWeights) -> list[PathPoint]:
    """Every child-locator × tag-path weight × bonus scale, the KB's untuned point first."""
    first = (default.child_locator, default.tag_match, default.bonus_scale)
    rest = product(CHILD_LOCATOR_WEIGHTS, TAG_MATCH_WEIGHTS, BONUS_SCALES)
    return [first, *(point for point in rest if point != first)]


def _with_paths(params: RetrievalParams, point: PathPoint) -> RetrievalParams:
    child, tag, bonus = point
    paths = dataclasses.replace(params.paths, child_locator=child, tag_match=tag, bonus_scale=bonus)
    return dataclasses.replace(params, paths=paths)


def _multipath(params: RetrievalParams, point: PathPoint) -> RetrievalParams:
    return dataclasses.replace(_with_paths(params, point), mode="multipath")


def _label(point: PathPoint) -> str:
    return "/".join(f"{value:g}" for value in point)


def _retrieve_metrics(kb: KnowledgeBase, questions: Sequence[EvalQuestion], params: RetrievalParams) -> dict[str, float]:
    return run_ranker(RetrievalRanker(kb, params), questions, name="retrieve:hybrid").metrics


@dataclass
class GatePoint:
    """What a five-factor threshold does to the references the gate sees (the top_k after rerank)."""

    relevant_kept: float  # share of references from relevant documents at or above it
    noise_rejected: float  # share of the others below it
    questions_kept: float  # share of questions with a relevant reference that keep one


@dataclass
class GateCalibration:
    threshold: float
    train: dict[str, GatePoint]  # by threshold, "0.35"
    test: GatePoint
    scored_train: int  # references that carried a five-factor score


Scored = list[tuple[int, float, bool]]  # (question position, five-factor score, from a relevant document)


def gate_scores(kb: KnowledgeBase, questions: Sequence[EvalQuestion], params: RetrievalParams) -> Scored:
    """The five-factor scores of the references the gate would judge, with their relevance."""
    # As the chat searches: the top_k after post-processing, which is what the gate judges.
    judged = dataclasses.replace(
        params, mode="hybrid", rerank=True, gate=None, detect_scope=False, postprocess=True, top_k=RetrievalParams.top_k
    )
    scored: Scored = []
    for position, question in enumerate(questions):
        try:
            result = retrieve(question.text, kb, judged)
        except InvalidQuery:
            continue
        for candidate in result.candidates:
            score = candidate.scores.get(FIVE_FACTOR_KEY)
            if score is not None:
                scored.append((position, score, question.relevance.get(candidate.doc_id, 0) > 0))
    return scored


def gate_point(scored: Scored, threshold: float) -> GatePoint:
    relevant = [(q, s) for q, s, rel in scored if rel]
    noise = [s for _, s, rel in scored if not rel]
    answerable = {q for q, _ in relevant}
    kept = {q for q, s in relevant if s >= threshold}
    return GatePoint(
        relevant_kept=sum(s >= threshold for _, s in relevant) / len(relevant) if relevant else 1.0,
        noise_rejected=sum(s < threshold for s in noise) / len(noise) if noise else 0.0,
        questions_kept=len(kept) / len(answerable) if answerable else 1.0,
    )


def choose_gate_threshold(scored: Scored) -> tuple[float, dict[str, GatePoint]]:
    """The highest threshold that keeps GATE_KEEP of the relevant references and every question's last one."""
    points = {f"{t:g}": gate_point(scored, t) for t in GATE_THRESHOLDS}
    if not any(relevant for _, _, relevant in scored):
        return 0.0, points  # nothing to calibrate on: the check stays open
    safe = [t for t in GATE_THRESHOLDS if points[f"{t:g}"].relevant_kept >= GATE_KEEP and points[f"{t:g}"].questions_kept >= 1.0]
    return (max(safe) if safe else 0.0), points


def calibrate_rerank_gate(
    kb: KnowledgeBase, train: Sequence[EvalQuestion], test: Sequence[EvalQuestion], params: RetrievalParams
) -> GateCalibration:
    """Choose the gate's five-factor threshold on the train split; report it on the test split."""
    scored = gate_scores(kb, train, params)
    threshold, points = choose_gate_threshold(scored)
    return GateCalibration(threshold, points, gate_point(gate_scores(kb, test, params), threshold), len(scored))
