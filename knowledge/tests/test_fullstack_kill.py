"""A Celery worker killed mid-ingestion (SIGKILL: no warm shutdown, no reject): the next worker's
sweep takes the document over once its heartbeat is stale, long before the broker's visibility
timeout would deliver the task again, and ingests it once.

Needs Redis (REDIS_URL) as the broker; the database may be PostgreSQL or the SQLite file of
the test run, which the worker processes open too.
"""

from __future__ import annotations

import time

import pytest
from django.conf import settings as django_settings

from knowledge.ingest import run_ingestion, submit_document
from knowledge.models import Chunk, Document, DocumentStatus, IngestionJob, KnowledgeBase

from .factories import GUIDE_MD
from .test_fullstack import WORKER_START_TIMEOUT, CeleryWorker, poll, submit, wait_until_finished
from .test_fullstack_shutdown import _database_url

pytestmark = [
    pytest.mark.fullstack,
    pytest.mark.skipif(not django_settings.REDIS_URL, reason="needs a Redis broker: REDIS_URL (see .ci/run)"),
]

# Seconds, not the defaults' minute, so the test is quick; the defaults are measured by hand.
QUICK_LIVENESS = {"INGESTION_STALE_S": "3", "INGESTION_HEARTBEAT_S": "0.5", "INGESTION_SWEEP_S": "1"}


@pytest.mark.django_db(transaction=True)
def test_a_killed_workers_document_is_ready_again_without_waiting_for_the_visibility_timeout(settings, kb, alice):
    settings.BACKGROUND_TASKS = "celery"
    url = _database_url()
    worker = CeleryWorker(url, env={"BACKGROUND_BATCH_DELAY_S": "1", **QUICK_LIVENESS}, queues="ingestion")
    worker.wait_until_ready(WORKER_START_TIMEOUT)
    document = submit(kb, "guide.md", GUIDE_MD.encode())
    poll(lambda: Document.objects.get(pk=document.pk).progress > 0, timeout=30, what="the ingestion to be half-way",
         worker=worker)

    worker.process.kill()  # SIGKILL: the task stays unacknowledged with the broker
    worker.process.wait()
    killed = time.monotonic()
    worker.stop()
    successor = CeleryWorker(url, env=QUICK_LIVENESS, queues="ingestion")
    try:
        successor.wait_until_ready(WORKER_START_TIMEOUT)
        document = wait_until_finished(document.pk, successor)
        seconds = time.monotonic() - killed
        log = successor.log()
    finally:
        successor.stop()
    print(f"SIGKILL to ready: {seconds:.1f} s")  # shown with -s: the figure of the closing notes

    assert document.status == DocumentStatus.READY, document.error
    assert seconds < django_settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    assert "no heartbeat since" in log  # the sweep took it over, not the broker
    jobs = list(IngestionJob.objects.filter(document=document).order_by("pk"))
    print("job rows:", [(job.status, job.error) for job in jobs])
    assert all(job.finished_at for job in jobs)  # the killed run's row ended too
    assert jobs[0].error.startswith("interrupted: no heartbeat since")
    assert jobs[-1].status == DocumentStatus.READY
    clean = KnowledgeBase.objects.create(slug="clean", name="clean", owner=alice)
    run_ingestion(submit_document(clean, "guide.md", GUIDE_MD.encode(), enqueue=lambda pk: None).document.pk)
    assert Chunk.objects.filter(document=document).count() == Chunk.objects.filter(kb=clean).count()
