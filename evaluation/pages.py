"""What the evaluation pages show, computed from stored runs: headline figures, charts,
side-by-side comparison with the configuration's differences, failures and categories."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.urls import reverse
from django.utils.translation import gettext as _

from chat.models import Feedback

from .answers import ANSWER_METRICS, trace_url
from .metrics import METRIC_KEYS
from .models import EvaluationRun, GoldenQuestion, RunStatus

RETRIEVAL_HEADLINE = ("ndcg@10", "recall@10", "mrr@10")
ANSWER_HEADLINE = ("keyword_pass", "source_pass", "citation_valid")
CHART_RUNS = 12  # the newest finished runs each chart shows


@dataclass(frozen=True)
class Bar:
    label: str  # what the bar stands for: a run or a category
    value: float  # 0..1
    url: str = ""
    count: int = 0  # questions behind a category's bar

    @property
    def percent(self) -> float:
        return round(max(0.0, min(1.0, self.value)) * 100, 1)


@dataclass(frozen=True)
class Chart:
    metric: str  # also the chart's data-chart hook
    bars: tuple[Bar, ...]
    caption: str = ""  # what the chart is titled, when not the metric itself


@dataclass(frozen=True)
class ComparedRow:
    name: str
    values: tuple[str, ...]
    differs: bool


def headline(run: EvaluationRun) -> list[tuple[str, float]]:
    keys = ANSWER_HEADLINE if run.is_answer_run else RETRIEVAL_HEADLINE
    return [(key, run.metrics[key]) for key in keys if run.metrics.get(key) is not None]


def run_label(run: EvaluationRun) -> str:
    kind = _("answers (%(agent)s)") % {"agent": run.agent} if run.is_answer_run else run.mode
    scope = run.golden_set.name if run.golden_set else _("every set")
    return f"#{run.pk} {kind} · {scope}"


def run_charts(runs: Sequence[EvaluationRun]) -> list[Chart]:
    """One chart per headline metric over the newest finished runs, oldest first."""
    finished = [run for run in runs if run.status == RunStatus.DONE][:CHART_RUNS][::-1]
    charts = []
    for metrics, kind_runs in (
        (RETRIEVAL_HEADLINE, [r for r in finished if not r.is_answer_run]),
        (ANSWER_HEADLINE, [r for r in finished if r.is_answer_run]),
    ):
        for metric in metrics:
            bars = tuple(
                Bar(run_label(run), run.metrics[metric], _run_url(run))
                for run in kind_runs if run.metrics.get(metric) is not None
            )
            if bars:
                charts.append(Chart(metric, bars))
    return charts


def category_chart(run: EvaluationRun, questions: Iterable[GoldenQuestion]) -> Chart | None:
    """The run's main metric per question category (answers: keyword pass; retrieval: nDCG@10)."""
    category = {q.qid: q.category or _("uncategorised") for q in questions}
    metric = "keyword_pass" if run.is_answer_run else "ndcg@10"
    values: dict[str, list[float]] = defaultdict(list)
    for qid, outcome in run.per_question.items():
        value = outcome.get(metric)
        if value is not None and qid in category:
            values[category[qid]].append(float(value))
    if len(values) < 2:
        return None  # one category says nothing the headline does not
    bars = tuple(Bar(name, sum(v) / len(v), count=len(v)) for name, v in sorted(values.items()))
    return Chart(f"{metric} by category", bars, _("%(metric)s by category") % {"metric": metric})


def compare(runs: Sequence[EvaluationRun]) -> tuple[list[ComparedRow], list[ComparedRow]]:
    """Metrics side by side, and every configuration entry in which the runs differ."""
    keys = [*METRIC_KEYS, *ANSWER_METRICS]
    metrics = [
        ComparedRow(key, tuple(_number(run.metrics.get(key)) for run in runs), _differ(run.metrics.get(key) for run in runs))
        for key in keys if any(run.metrics.get(key) is not None for run in runs)
    ]
    for name in ("p50", "p95"):
        values = [run.latency.get(name) for run in runs]
        metrics.append(ComparedRow(_("latency %(name)s ms") % {"name": name}, tuple(_number(v, 1) for v in values), _differ(values)))
    flat = [_flatten(_config(run)) for run in runs]
    names = sorted({name for config in flat for name in config})
    config = [
        ComparedRow(name, tuple(str(c.get(name, "—")) for c in flat), _differ(c.get(name) for c in flat))
        for name in names
    ]
    return metrics, [row for row in config if row.differs]


def failures(run: EvaluationRun, texts: Mapping[str, str], limit: int = 100) -> list[dict[str, Any]]:
    """An answer run's failed questions with why and their trace; a retrieval run's misses.

    texts maps question ids to their text, for retrieval runs, which store only scores.
    """
    found = []
    for qid, outcome in run.per_question.items():
        if run.is_answer_run and outcome.get("why"):
            found.append({"qid": qid, "question": outcome.get("question", ""), "why": "; ".join(outcome["why"]),
                          "trace_url": trace_url(outcome.get("trace_id", ""))})
        elif not run.is_answer_run and outcome.get("hit@5", 1) == 0:
            found.append({"qid": qid, "question": texts.get(qid, ""), "why": _("no relevant document in the top 5"),
                          "trace_url": ""})
    return found[:limit]


def _config(run: EvaluationRun) -> dict[str, Any]:
    """A run's settings in one shape: an answer run nests its retrieval settings under
    "retrieval", so a retrieval run's are put there too, and only real differences show."""
    scope = {"mode": run.mode, "golden set": run.golden_set.name if run.golden_set else _("every set")}
    return {**scope, **run.params} if run.is_answer_run else {**scope, "retrieval": run.params}


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in config.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{key}."))
        else:
            flat[key] = value
    return flat


def _differ(values: Iterable[Any]) -> bool:
    return len({repr(v) for v in values}) > 1


def _number(value: Any, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _run_url(run: EvaluationRun) -> str:
    return reverse("evaluation-run", args=[run.kb.slug, run.pk])


FEEDBACK_QID = "feedback-"


def feedback_qid(feedback_id: int) -> str:
    return f"{FEEDBACK_QID}{feedback_id}"


def _thumbs_down(kb, user):
    """The user's own thumbs-down answers from this KB: another user's questions are part of
    their conversations and never offered."""
    return Feedback.objects.filter(user=user, is_positive=False, trace__route=kb.slug)


def feedback_candidates(kb, user, limit: int = 20) -> list[Feedback]:
    """The user's thumbs-down answers from this KB that no golden set holds yet."""
    qids = GoldenQuestion.objects.filter(golden_set__kb=kb, qid__startswith=FEEDBACK_QID).values_list("qid", flat=True)
    taken = [int(qid.removeprefix(FEEDBACK_QID)) for qid in qids if qid.removeprefix(FEEDBACK_QID).isdigit()]
    return list(_thumbs_down(kb, user).exclude(pk__in=taken).select_related("trace")[:limit])


def feedback_initial(kb, user, feedback_id: int) -> dict[str, Any] | None:
    """A golden question drafted from one of the user's thumbs-down answers: its question,
    and the documents the answer cited as a first guess at the sources (to be corrected)."""
    feedback = _thumbs_down(kb, user).filter(pk=feedback_id).select_related("message").first()
    if feedback is None:
        return None
    cited = {c.get("doc") for c in feedback.message.citations if isinstance(c, dict)}
    documents = list(kb.documents.filter(name__in=cited).values_list("pk", flat=True))
    return {"qid": feedback_qid(feedback.pk), "text": feedback.query, "category": "feedback", "relevant": documents}

