"""A Celery worker's warm shutdown (SIGTERM): a long task stops at its next batch boundary and
goes back to the broker, and the next worker finishes it, once.

Needs Redis (REDIS_URL) as the broker; the database may be PostgreSQL or the SQLite file
of the test run, which the worker process opens too.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from django.conf import settings as django_settings
from django.db import connection

from knowledge.ingest import run_ingestion, submit_document
from knowledge.models import IN_PROGRESS, Chunk, Document, DocumentStatus, KnowledgeBase

from .factories import GUIDE_MD
from .test_fullstack import (
    WORKER_START_TIMEOUT,
    CeleryWorker,
    database_url,
    poll,
    submit,
    wait_until_finished,
)

pytestmark = [
    pytest.mark.fullstack,
    pytest.mark.skipif(not django_settings.REDIS_URL, reason="needs a Redis broker: REDIS_URL (see .ci/run)"),
]

WARM_SHUTDOWN_S = 10  # what a container stop (docker's default) waits before SIGKILL


def _database_url() -> str:
    """The test database, as the worker process is to open it."""
    if connection.vendor == "sqlite":
        return f"sqlite:///{connection.settings_dict['NAME']}"
    return database_url(connection.settings_dict)


def _stop(worker: CeleryWorker) -> tuple[float, str]:
    """SIGTERM the worker; return the seconds it took to exit, and its log."""
    started = time.monotonic()
    worker.process.terminate()
    try:
        worker.process.wait(timeout=3 * WARM_SHUTDOWN_S)
    except subprocess.TimeoutExpired:
        worker.process.kill()
    seconds, log = time.monotonic() - started, worker.log()
    print(f"SIGTERM to exit: {seconds:.2f} s")  # shown with -s: the figures of the closing notes
    worker.stop()
    return seconds, log


@pytest.mark.django_db(transaction=True)
def test_a_warm_shutdown_stops_an_ingestion_at_a_stage_and_the_next_worker_finishes_it(settings, kb, alice):
    settings.BACKGROUND_TASKS = "celery"
    url = _database_url()
    worker = CeleryWorker(url, env={"BACKGROUND_BATCH_DELAY_S": "1"}, queues="ingestion")  # a slow ingestion
    worker.wait_until_ready(WORKER_START_TIMEOUT)
    document = submit(kb, "guide.md", GUIDE_MD.encode())
    poll(lambda: Document.objects.get(pk=document.pk).status != DocumentStatus.PENDING,
         timeout=30, what="the ingestion to start", worker=worker)

    seconds, log = _stop(worker)

    assert seconds < WARM_SHUTDOWN_S, log
    assert "reject requeue=True" in log, log  # handed back to the broker
    document.refresh_from_db()
    assert document.status in IN_PROGRESS  # stopped half-way, not failed
    successor = CeleryWorker(url, queues="ingestion")
    try:
        successor.wait_until_ready(WORKER_START_TIMEOUT)
        document = wait_until_finished(document.pk, successor)  # the broker delivered it again
    finally:
        successor.stop()
    assert document.status == DocumentStatus.READY, document.error
    clean = KnowledgeBase.objects.create(slug="clean", name="clean", owner=alice)
    run_ingestion(submit_document(clean, "guide.md", GUIDE_MD.encode(), enqueue=lambda pk: None).document.pk)
    assert Chunk.objects.filter(document=document).count() == Chunk.objects.filter(kb=clean).count()
