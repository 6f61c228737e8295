"""Choose a KB's fusion mode, leg weights and leg thresholds from its golden questions.

Each question is retrieved once in hybrid mode without rerank; its two legs (what fusion
sees in production, `leg_top_k` deep) are kept and fused again in memory with
`knowledge.fusion.fuse` for every grid point. The grid is searched on the train split;
the winner and the defaults are then scored on the held-out test split, both on the fused
ranking and through the full `retrieve` (rerank on), as `manage.py evaluate` runs it.
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
from knowledge.models import KnowledgeBase
from knowledge.retrieval import InvalidQuery, RetrievalParams, retrieve, save_params_for_kb

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
    # The built-in defaults are the reference, whatever the KB stores now.
    params = evaluation_params(kb, "hybrid", fusion=FusionParams())
    penalty = params.example_penalty
    train_legs = collect_legs(kb, train, params)
    vector_scores = [c.score for item in train_legs for c in item.legs.get("vector", [])]
    grid = fusion_grid(params.fusion, vector_scores)
    scored = [(score_fusion(train_legs, point, example_penalty=penalty), point) for point in grid]
    # max keeps the first of equal scores: the current settings win ties.
    best_train, best = max(scored, key=lambda pair: pair[0][OBJECTIVE])
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
    )
    report.default_test_retrieve = _retrieve_metrics(kb, test, params)
    report.best_test_retrieve = _retrieve_metrics(kb, test, dataclasses.replace(params, fusion=best))
    if save:
        save_params_for_kb(kb, dataclasses.replace(params, fusion=best))
    report.seconds = perf_counter() - started
    return report


def _retrieve_metrics(kb: KnowledgeBase, questions: Sequence[EvalQuestion], params: RetrievalParams) -> dict[str, float]:
    return run_ranker(RetrievalRanker(kb, params), questions, name="retrieve:hybrid").metrics
