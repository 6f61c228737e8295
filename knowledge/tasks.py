"""Celery tasks of the knowledge app: thin wrappers over knowledge.ingest."""

from __future__ import annotations

from celery import Task, shared_task

from agentic_rag.background import dispatch

from .ingest import TRANSIENT_ERRORS, give_up_ingestion, run_ingestion
from .progress import publish_progress


class IngestionTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        # Retries are exhausted: say so on the document instead of leaving it "in progress".
        give_up_ingestion(args[0], f"gave up after retries: {exc}", on_progress=publish_progress)


@shared_task(
    base=IngestionTask,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=TRANSIENT_ERRORS,
    retry_backoff=2,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=5,
)
def ingest_document(document_id: int) -> str:
    """Ingest one document; safe to run twice (a live version is left alone)."""
    job = run_ingestion(document_id, on_progress=publish_progress)
    return job.status if job else "skipped"


def enqueue_ingestion(document_id: int) -> None:
    """Start ingesting a document wherever this deployment runs background work."""
    dispatch(ingest_document, document_id)
