"""Run a KB's golden questions through retrieval (and a baseline), and measure the rankings.

Metrics are computed on rankings of *documents*: each retrieved chunk stands for its
document, which keeps the rank of its best chunk. Retrieval runs with the KB's stored
settings, `top_k=CHUNK_DEPTH`, and without post-processing and the quality gate: those
shape the 5 chunks an answer is assembled from (Truncate(5), ≤3 per document, budgets),
while the metrics need a 10-deep document ranking, and a document often has several
chunks among the first ten.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from time import perf_counter

import numpy as np
from rank_bm25 import BM25Okapi

from knowledge.analysis import analyze
from knowledge.candidates import Candidate
from knowledge.models import Chunk, KnowledgeBase
from knowledge.retrieval import InvalidQuery, RetrievalParams, params_for_kb, retrieve
from knowledge.search import live_entries

from .metrics import latency_summary, percentile, score_ranking, summarise
from .models import EvaluationRun, GoldenQuestion, GoldenSet

CHUNK_DEPTH = 30  # chunks asked for, the same as the default leg_top_k
DOCUMENT_DEPTH = 10  # documents the metrics look at
WARM_UP_QUERY = "warm up the index and the embedder"

Ranker = Callable[[str], list[int]]  # query -> document ids, best first


class EvaluationError(Exception):
    """The KB cannot be evaluated as asked; the message says why."""


@dataclass(frozen=True)
class EvalQuestion:
    qid: str
    text: str
    split: str
    relevance: dict[int, int]  # document id -> graded relevance


@dataclass
class RankerReport:
    name: str
    metrics: dict[str, float]
    qps: float
    latency_ms: dict[str, float]
    per_question: dict[str, dict[str, float]] = field(default_factory=dict)
    stage_p50_ms: dict[str, float] = field(default_factory=dict)
    build_s: float = 0.0  # index build time, for baselines
    errors: int = 0  # questions that could not be searched (empty rankings)


@dataclass
class Evaluation:
    mode: str
    params: RetrievalParams
    questions: int
    report: RankerReport
    baseline: RankerReport | None = None

    def as_json(self) -> dict:
        """The `--json` contract: mode, metrics, qps, latency_ms, baseline."""
        baseline = None
        if self.baseline is not None:
            baseline = {"name": self.baseline.name, "metrics": self.baseline.metrics, "qps": self.baseline.qps}
        return {
            "mode": self.mode,
            "metrics": self.report.metrics,
            "qps": self.report.qps,
            "latency_ms": self.report.latency_ms,
            "baseline": baseline,
        }


def load_questions(kb: KnowledgeBase, *, split: str = "all", golden_set: str | None = None) -> list[EvalQuestion]:
    """Return the KB's golden questions (of one set, or all) that have a relevant document."""
    sets = GoldenSet.objects.filter(kb=kb)
    if golden_set is not None:
        sets = sets.filter(name=golden_set)
    if not sets.exists():
        named = f" named '{golden_set}'" if golden_set else ""
        raise EvaluationError(
            f"knowledge base '{kb.slug}' has no golden set{named}: import one with manage.py import_dataset"
        )
    questions = GoldenQuestion.objects.filter(golden_set__in=sets).prefetch_related("qrels").order_by("pk")
    if split != "all":
        questions = questions.filter(split=split)
    loaded = [
        EvalQuestion(q.qid, q.text, q.split, {r.document_id: r.relevance for r in q.qrels.all()})
        for q in questions
    ]
    loaded = [q for q in loaded if any(gain > 0 for gain in q.relevance.values())]
    if not loaded:
        raise EvaluationError(f"knowledge base '{kb.slug}' has no golden questions with qrels in split '{split}'")
    return loaded


def document_ranking(candidates: Iterable[Candidate], depth: int = DOCUMENT_DEPTH) -> list[int]:
    """Map a chunk ranking to documents, each at the rank of its best chunk."""
    return _first_documents((candidate.doc_id for candidate in candidates), depth)


def _first_documents(doc_ids: Iterable[int], depth: int) -> list[int]:
    ranking: list[int] = []
    for doc_id in doc_ids:
        if doc_id not in ranking:
            ranking.append(doc_id)
            if len(ranking) == depth:
                break
    return ranking


def evaluation_params(kb: KnowledgeBase, mode: str, **overrides) -> RetrievalParams:
    """The KB's stored settings for `mode`, as evaluation runs them (see the module docstring)."""
    return params_for_kb(kb, mode=mode, top_k=CHUNK_DEPTH, postprocess=False, gate=None, **overrides)


class RetrievalRanker:
    """Rank documents with `retrieve`, keeping each stage's timings."""

    def __init__(self, kb: KnowledgeBase, params: RetrievalParams) -> None:
        self.kb, self.params = kb, params
        self.name = f"retrieve:{params.mode}"
        self.stage_ms: dict[str, list[float]] = defaultdict(list)

    def __call__(self, query: str) -> list[int]:
        result = retrieve(query, self.kb, self.params)
        for stage, ms in result.timings_ms.items():
            self.stage_ms[stage].append(ms)
        return document_ranking(result.candidates)


class RankBM25Ranker:
    """rank-bm25's BM25Okapi over the KB's live child chunks, on the keyword leg's tokens."""

    name = "rank-bm25"

    def __init__(self, kb: KnowledgeBase) -> None:
        started = perf_counter()
        rows = (
            live_entries(kb).filter(level=Chunk.CHILD).order_by("chunk_id")
            .values_list("chunk__document_id", "tokens")
        )
        self.doc_ids = [doc_id for doc_id, _ in rows]
        corpus = [tokens.split() for _, tokens in rows]
        if not corpus:
            raise EvaluationError(f"knowledge base '{kb.slug}' has no indexed chunks for the baseline")
        self.bm25 = BM25Okapi(corpus)
        self.build_s = perf_counter() - started

    def __call__(self, query: str) -> list[int]:
        scores = self.bm25.get_scores(analyze(query))
        # Positive scores only, ties to the lower chunk id: as the keyword leg ranks.
        order = np.argsort(-scores, kind="stable")[:CHUNK_DEPTH]
        return _first_documents((self.doc_ids[row] for row in order if scores[row] > 0), DOCUMENT_DEPTH)


Progress = Callable[[int, int], None]  # (questions done, questions in all)


def no_progress(done: int, total: int) -> None:
    return None


def run_ranker(
    ranker: Ranker, questions: Sequence[EvalQuestion], *, name: str, on_progress: Progress = no_progress
) -> RankerReport:
    """Rank every question (after one untimed warm-up query) and score the rankings."""
    _safely(ranker, WARM_UP_QUERY)
    per_question: dict[str, dict[str, float]] = {}
    latencies: list[float] = []
    errors = 0
    started = perf_counter()
    for question in questions:
        began = perf_counter()
        ranking = _safely(ranker, question.text)
        latencies.append((perf_counter() - began) * 1000)
        errors += ranking is None
        per_question[question.qid] = score_ranking(ranking or [], question.relevance)
        on_progress(len(per_question), len(questions))
    wall = perf_counter() - started
    return RankerReport(
        name=name,
        metrics=summarise(list(per_question.values())),
        qps=len(questions) / wall if wall > 0 else 0.0,
        latency_ms=latency_summary(latencies),
        per_question=per_question,
        errors=errors,
    )


def _safely(ranker: Ranker, query: str) -> list[int] | None:
    try:
        return ranker(query)
    except InvalidQuery:
        return None


def evaluate(
    kb: KnowledgeBase,
    questions: Sequence[EvalQuestion],
    *,
    mode: str,
    baseline: str | None = None,
    on_progress: Progress = no_progress,
    **overrides,
) -> Evaluation:
    """Run the questions through `retrieve` in `mode` (and the baseline) in this process."""
    params = evaluation_params(kb, mode, **overrides)
    ranker = RetrievalRanker(kb, params)
    report = run_ranker(ranker, questions, name=ranker.name, on_progress=on_progress)
    report.stage_p50_ms = {stage: percentile(values, 50) for stage, values in ranker.stage_ms.items()}
    evaluation = Evaluation(mode, params, len(questions), report)
    if baseline == "rank-bm25":
        reference = RankBM25Ranker(kb)
        evaluation.baseline = run_ranker(reference, questions, name=reference.name)
        evaluation.baseline.build_s = reference.build_s
    elif baseline is not None:
        raise EvaluationError(f"unknown baseline '{baseline}' (known: rank-bm25)")
    return evaluation


def save_run(kb: KnowledgeBase, evaluation: Evaluation, *, split: str, golden_set: GoldenSet | None = None) -> EvaluationRun:
    """Store the evaluation with a snapshot of its parameters."""
    return EvaluationRun.objects.create(kb=kb, golden_set=golden_set, split=split, **run_fields(evaluation))


def run_fields(evaluation: Evaluation) -> dict:
    """The EvaluationRun fields that hold a retrieval evaluation's results."""
    report, baseline = evaluation.report, evaluation.baseline
    return {
        "mode": evaluation.mode,
        "questions": evaluation.questions,
        "params": params_snapshot(evaluation.params),
        "metrics": report.metrics,
        "baseline": None if baseline is None else {
            "name": baseline.name, "metrics": baseline.metrics, "qps": baseline.qps,
            "latency_ms": baseline.latency_ms, "build_s": baseline.build_s,
        },
        "qps": report.qps,
        "latency": {**report.latency_ms, "stages_p50": report.stage_p50_ms},
        "per_question": report.per_question,
    }


def params_snapshot(params: RetrievalParams) -> dict:
    """The parameters as plain JSON, with the evaluation depths."""
    return {
        **dataclasses.asdict(params),
        "chunk_depth": CHUNK_DEPTH,
        "document_depth": DOCUMENT_DEPTH,
    }
