"""Celery tasks of the evaluation app: thin wrappers over evaluation.jobs."""

from __future__ import annotations

from celery import shared_task

from agentic_rag.background import dispatch

from .jobs import execute_run


@shared_task(acks_late=True, reject_on_worker_lost=True)
def run_evaluation(run_id: int) -> None:
    """Run one queued evaluation; a second delivery finds it taken and does nothing."""
    execute_run(run_id)


def dispatch_evaluation(run_id: int) -> None:
    dispatch(run_evaluation, run_id)
