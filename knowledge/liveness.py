"""Tell a live ingestion run from a dead one, and take over the dead ones.

One run holds a document at a time: it claims the document when it starts, and shows it is
alive by writing a heartbeat at its batch boundaries. A run whose process was killed stops
writing; once its heartbeat is INGESTION_STALE_S old, `take_over_stalled` (the sweep every
server and worker process runs on a timer) closes its job row, counts the interruption and
queues the document again, so nobody waits for a broker's visibility timeout. Every change
of the claim is one conditional UPDATE, so of two sweepers or two runs only one wins.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F, Q
from django.utils import timezone

from .models import IN_PROGRESS, Document, DocumentStatus, IngestionJob
from .progress import Progress

log = logging.getLogger(__name__)


class TakenOver(Exception):
    """Another run holds the document now: this one was thought dead, or a newer version came."""


def stale_cutoff(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.INGESTION_STALE_S)


def claim_document(document: Document, job: IngestionJob) -> bool:
    """Make `job` the document's run, unless a live run holds it; close dead runs' job rows."""
    now = timezone.now()
    free = Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=stale_cutoff(now))
    claimed = Document.objects.filter(free, pk=document.pk, version=job.version).update(
        heartbeat_at=now, running_job=job
    )
    if claimed:
        close_dead_jobs(document.pk, "interrupted: its run stopped without finishing", keep=job.pk)
    return bool(claimed)


def keep_claim(document_id: int, job_id: int) -> Callable[[], None]:
    """A beat for `beating()`: write the heartbeat every INGESTION_HEARTBEAT_S, or raise TakenOver."""
    last = timezone.now()  # the claim wrote the first one

    def beat() -> None:
        nonlocal last
        now = timezone.now()
        if (now - last).total_seconds() < settings.INGESTION_HEARTBEAT_S:
            return
        if not Document.objects.filter(pk=document_id, running_job_id=job_id).update(heartbeat_at=now):
            raise TakenOver
        last = now

    return beat


@contextmanager
def beating_meanwhile(document_id: int, job_id: int) -> Iterator[None]:
    """Write the run's heartbeat from a thread while the block runs: for a stage with no batch
    boundary inside (parsing or chunking a large file), which would otherwise go silent for
    longer than INGESTION_STALE_S and be taken for dead. The thread dies with the process,
    so a killed run still goes quiet."""
    done = threading.Event()

    def beat() -> None:
        try:
            while not done.wait(settings.INGESTION_HEARTBEAT_S):
                Document.objects.filter(pk=document_id, running_job_id=job_id).update(heartbeat_at=timezone.now())
        except Exception:  # a heartbeat is best effort; the run learns of a lost claim at its next stage
            log.warning("document %s: the heartbeat thread stopped", document_id, exc_info=True)
        finally:
            connection.close()

    thread = threading.Thread(target=beat, name=f"heartbeat-{document_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def holds_claim(document: Document, job: IngestionJob) -> bool:
    return document.running_job_id == job.pk


def release_claim(document_id: int, job_id: int) -> None:
    """Let the next run take the document at once (the run ended, or stopped to be resumed)."""
    Document.objects.filter(pk=document_id, running_job_id=job_id).update(heartbeat_at=None, running_job=None)


def release_for_new_version(document: Document) -> None:
    """Drop the claim of a run of an older version, on `document` about to be saved with a new one."""
    document.heartbeat_at, document.running_job, document.interruptions = None, None, 0


def close_dead_jobs(document_id: int, reason: str, *, keep: int | None = None) -> int:
    """End the job rows of the document's runs that died; return how many."""
    unfinished = IngestionJob.objects.filter(document_id=document_id, finished_at__isnull=True).exclude(pk=keep)
    return unfinished.update(status=DocumentStatus.FAILED, error=reason, finished_at=timezone.now())


def take_over_stalled(
    *, enqueue: Callable[[int], None], on_progress: Callable[[Progress], None], now: datetime | None = None
) -> list[int]:
    """Queue again every document whose run died; return their ids (those given up included)."""
    now = now or timezone.now()
    taken = []
    for document_id, heartbeat in Document.objects.stalled(stale_cutoff(now)).values_list("pk", "heartbeat_at"):
        # Only the sweeper whose UPDATE still sees the dead run's heartbeat takes it over.
        won = Document.objects.filter(pk=document_id, heartbeat_at=heartbeat, status__in=IN_PROGRESS).update(
            heartbeat_at=None, running_job=None, interruptions=F("interruptions") + 1
        )
        if won:
            _resume(document_id, heartbeat, enqueue=enqueue, on_progress=on_progress)
            taken.append(document_id)
    return taken


def _resume(document_id: int, heartbeat: datetime, *, enqueue, on_progress) -> None:
    silent = f"interrupted: no heartbeat since {heartbeat.isoformat(timespec='seconds')}; its process died"
    close_dead_jobs(document_id, silent)
    document = Document.objects.get(pk=document_id)
    if document.interruptions >= settings.INGESTION_MAX_INTERRUPTIONS:
        error = (
            f"gave up: its ingestion was interrupted {document.interruptions} times, each time by its "
            "process dying (a file too large for the worker's memory?)"
        )
        Document.objects.filter(pk=document_id, status__in=IN_PROGRESS).update(
            status=DocumentStatus.FAILED, progress=0, error=error, interruptions=0, updated_at=timezone.now()
        )
        log.warning("document %s: %s", document_id, error)
        on_progress(Progress(document_id, document.kb_id, DocumentStatus.FAILED, "failed", 0, error))
        return
    log.warning("document %s: %s; queued again", document_id, silent)
    enqueue(document_id)
    on_progress(Progress(document_id, document.kb_id, document.status, "interrupted", document.progress))
