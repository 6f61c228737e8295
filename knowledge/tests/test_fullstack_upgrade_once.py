"""Two Celery workers asked to upgrade the same KB's vectors at once: the upgrade runs once.

Its own module: no other worker of the test session may take the tasks.
"""

from __future__ import annotations

import pytest
from django.db import connection

from agentic_rag.celery import app as celery_app
from knowledge.ingest import run_ingestion, submit_document
from knowledge.models import Chunk, SearchEntry
from knowledge.tasks import upgrade_embeddings

from .factories import GUIDE_MD
from .test_fullstack import FULL_STACK, CeleryWorker, database_url

pytestmark = [
    pytest.mark.fullstack,
    pytest.mark.skipif(
        not FULL_STACK,
        reason="full stack only: needs DATABASE_URL on PostgreSQL and REDIS_URL (see .ci/run)",
    ),
]


@pytest.mark.django_db(transaction=True)
def test_two_workers_given_the_same_upgrade_run_it_once(kb, request):
    queued: list[int] = []
    for name, text in (("guide.md", GUIDE_MD), ("notes.md", GUIDE_MD.replace("Overview", "Notes") * 3)):
        submit_document(kb, name, text.encode(), enqueue=queued.append)
    for document_id in queued:
        run_ingestion(document_id)
    # Servers started by earlier tests queued a resume of every KB's upgrade on this queue;
    # run first, it would do the work these two tasks are meant to share.
    with celery_app.connection_for_write() as broker:
        broker.default_channel.queue_purge("embedding")
    env = {"EMBEDDER_UPGRADE": "e5-small"}
    database = database_url(connection.settings_dict)
    workers = [CeleryWorker(database, env=env, queues="embedding") for _ in range(2)]
    try:
        for worker in workers:
            worker.wait_until_ready(90)

        results = [upgrade_embeddings.delay(kb.pk) for _ in range(2)]
        embedded = sorted(result.get(timeout=90) for result in results)

        live_chunks = Chunk.objects.live().filter(kb=kb).count()
        assert embedded[0] == 0 and embedded[1] == live_chunks  # one did the work, the other nothing
        kb.refresh_from_db()
        assert kb.embedder == "e5-small"
        entries = SearchEntry.objects.filter(chunk__kb=kb, embedder="e5-small")
        assert entries.count() == live_chunks  # each chunk embedded once
    finally:
        for worker in workers:
            if request.session.testsfailed:
                print(worker.report(80))
            worker.stop()
