"""Evaluation runs started in the browser: queued as a row, run by a background task.

The task runs the same functions as `manage.py evaluate` (retrieval) and
`manage.py evaluate --answers`, writes its progress on the row as it goes, and stores the
results on that row, so the page and the command show runs the same way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from .answers import answer_run_fields, ask_through_chat, load_answer_cases
from .models import ANSWERS_MODE, EvaluationRun, GoldenSet, RunStatus
from .runner import EvaluationError, evaluate, load_questions, run_fields

log = logging.getLogger(__name__)
# Percent steps at which a running evaluation writes its progress: a write per question
# would cost more than a retrieval question takes.
PROGRESS_STEP = 5


@dataclass(frozen=True)
class RunRequest:
    golden_set: GoldenSet | None
    mode: str  # a retrieval mode, or ANSWERS_MODE
    agent: str = "auto"  # answer runs: the worker type that retrieves


def queue_run(kb, request: RunRequest, user, dispatch_run) -> EvaluationRun:
    """Store a queued run and hand its id to dispatch_run (the background task's dispatcher)."""
    run = EvaluationRun.objects.create(
        kb=kb, golden_set=request.golden_set, mode=request.mode, status=RunStatus.QUEUED, progress=0,
        requested_by=user, params={"agent": request.agent} if request.mode == ANSWERS_MODE else {},
    )
    transaction.on_commit(lambda: dispatch_run(run.pk))
    return run


def execute_run(run_id: int) -> None:
    """Run a queued evaluation and store its results (or why it failed) on its row."""
    if not EvaluationRun.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(status=RunStatus.RUNNING):
        return  # deleted, or already taken by another worker
    run = EvaluationRun.objects.select_related("kb", "golden_set", "requested_by").get(pk=run_id)
    reporter = _ProgressWriter(run_id)
    try:
        fields = _answers(run, reporter) if run.is_answer_run else _retrieval(run, reporter)
    except (EvaluationError, ValueError) as exc:
        _finish(run_id, status=RunStatus.FAILED, error=str(exc))
        return
    except Exception as exc:  # the run must not stay "running" for ever
        log.exception("evaluation run %s failed", run_id)
        _finish(run_id, status=RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        return
    _finish(run_id, status=RunStatus.DONE, progress=100, **fields)


def _retrieval(run: EvaluationRun, on_progress) -> dict[str, Any]:
    name = run.golden_set.name if run.golden_set else None
    questions = load_questions(run.kb, golden_set=name)
    return run_fields(evaluate(run.kb, questions, mode=run.mode, baseline="rank-bm25", on_progress=on_progress))


def _answers(run: EvaluationRun, on_progress) -> dict[str, Any]:
    name = run.golden_set.name if run.golden_set else None
    cases = load_answer_cases(run.kb, golden_set=name)
    if not cases:
        raise EvaluationError("no golden question states keywords, sources or a shortcut to score answers on")
    if run.requested_by is None:
        raise EvaluationError("the user who started this run no longer exists")
    evaluation = ask_through_chat(run.kb, run.requested_by, cases, agent_type=run.agent, on_progress=on_progress)
    return answer_run_fields(evaluation)


class _ProgressWriter:
    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.written = 0

    def __call__(self, done: int, total: int) -> None:
        percent = min(99, 100 * done // total) if total else 0
        if percent - self.written >= PROGRESS_STEP:
            EvaluationRun.objects.filter(pk=self.run_id).update(progress=percent)
            self.written = percent


def _finish(run_id: int, **fields: Any) -> None:
    EvaluationRun.objects.filter(pk=run_id).update(**fields)
