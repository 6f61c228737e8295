"""Celery tasks of the knowledge app: thin wrappers over knowledge.ingest."""

from __future__ import annotations

from celery import Task, shared_task
from django.conf import settings
from django.core.cache import cache

from agentic_rag.background import dispatch, postpone
from agentic_rag.embeddings import get_embedder
from agentic_rag.shutdown import StopRequested

from .indexing import background_target, reembed_knowledge_base, upgrade_target
from .ingest import TRANSIENT_ERRORS, give_up_ingestion, run_ingestion
from .liveness import take_over_stalled
from .models import IN_PROGRESS, Document, DocumentStatus, KnowledgeBase
from .progress import BackgroundIndexing, publish_background_indexing, publish_progress
from .signals import document_ingested


class IngestionTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        # Retries are exhausted: say so on the document instead of leaving it "in progress".
        give_up_ingestion(args[0], f"gave up after retries: {exc}", on_progress=publish_progress)


@shared_task(
    base=IngestionTask,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=TRANSIENT_ERRORS,
    retry_backoff=2,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=5,
)
def ingest_document(self, document_id: int) -> str:
    """Ingest one document; safe to run twice (a live version is left alone)."""
    try:
        job = run_ingestion(document_id, on_progress=publish_progress)
    except StopRequested:
        postpone(self, (document_id,))
        return "stopped"
    if job and job.status == DocumentStatus.READY:
        kb = KnowledgeBase.objects.get(documents=document_id)
        document_ingested.send(sender=Document, document=Document.objects.get(pk=document_id))
        if upgrade_target(kb):
            dispatch(upgrade_embeddings, kb.pk)
    return job.status if job else "skipped"


@shared_task(bind=True, acks_late=True, autoretry_for=TRANSIENT_ERRORS, retry_backoff=2, max_retries=5)
def upgrade_embeddings(self, kb_id: int) -> int:
    """Move a KB's vectors to EMBEDDER_UPGRADE, or embed the chunks its embedder lacks.

    One run at a time per KB.
    """
    kb = KnowledgeBase.objects.filter(pk=kb_id).first()
    target = background_target(kb) if kb else None
    lock = f"upgrade-embeddings-{kb_id}"
    # A short lock that every batch renews: a worker killed mid-upgrade frees the KB within
    # UPGRADE_LOCK_S, and the broker's next delivery of this task takes over.
    if target is None or not cache.add(lock, 1, timeout=settings.UPGRADE_LOCK_S):
        return 0

    def progress(done: int, total: int) -> None:
        cache.touch(lock, settings.UPGRADE_LOCK_S)
        # Chunks of documents still being ingested join the run later: its total is not final.
        ingesting = kb.documents.filter(status__in=IN_PROGRESS).exists()
        publish_background_indexing(BackgroundIndexing(kb.pk, target, done, total, total_final=not ingesting), kb.pk)

    try:
        publish_background_indexing(BackgroundIndexing(kb.pk, target, 0, 0, step="loading"), kb.pk)
        embedder = get_embedder(target)
        if warm_up := getattr(embedder, "warm_up", None):  # models load here, not in the first batch's "0 of N"
            warm_up()
        return reembed_knowledge_base(kb, embedder, on_batch=progress)
    except StopRequested:
        postpone(self, (kb_id,))  # the entries written so far stay: the next run skips them
        return 0
    finally:
        publish_background_indexing(None, kb.pk)
        cache.delete(lock)


@shared_task
def resume_embedding_upgrades() -> list[int]:
    """Start the upgrade (or repair) of every KB whose vectors need background embedding.

    Ingestion starts an upgrade when it runs in a long-lived process; a KB filled by a
    management command (setup_demo, ingest, import_dataset) or left half-way by a restart
    would otherwise wait for its next upload. The server calls this once when it starts.
    """
    pending = [
        kb.pk for kb in KnowledgeBase.objects.filter(documents__status=DocumentStatus.READY).distinct()
        if background_target(kb)
    ]
    for kb_id in pending:
        dispatch(upgrade_embeddings, kb_id)
    return pending


def resume_interrupted_ingestions() -> list[int]:
    """Start again every ingestion a stopped server left queued or stopped at a boundary.

    In-process background tasks die with their server, leaving documents in parsing or
    embedding for good; the server calls this once when it starts. Ingestion discards the
    leftovers of an interrupted run, so no chunk is duplicated. A run that still holds its
    document (a killed server's, or a command's in another process) is left to the sweep,
    which takes it over once its heartbeat is stale. (With Celery the broker delivers an
    unacknowledged task again instead: acks_late, reject_on_worker_lost.)
    """
    unclaimed = Document.objects.filter(status__in=IN_PROGRESS, heartbeat_at__isnull=True)
    interrupted = list(unclaimed.values_list("pk", flat=True))
    for document_id in interrupted:
        enqueue_ingestion(document_id)
    return interrupted


def sweep_stalled_ingestions() -> list[int]:
    """Queue again the ingestions whose process died (every server and worker runs this on a timer)."""
    return take_over_stalled(enqueue=enqueue_ingestion, on_progress=publish_progress)


def enqueue_ingestion(document_id: int) -> None:
    """Start ingesting a document wherever this deployment runs background work."""
    dispatch(ingest_document, document_id)
