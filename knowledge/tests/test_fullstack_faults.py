"""Faults on the full stack: a Celery worker killed in the middle of an ingestion.

Its own module, so that no other worker of the test session can take the task first.
"""

from __future__ import annotations

import random
import signal
import time

import pytest
from django.db import connection

from knowledge.models import Chunk, Document, DocumentStatus

from .test_fullstack import FULL_STACK, CeleryWorker, database_url, poll, submit

pytestmark = [
    pytest.mark.fullstack,
    pytest.mark.skipif(
        not FULL_STACK,
        reason="full stack only: needs DATABASE_URL on PostgreSQL and REDIS_URL (see .ci/run)",
    ),
]

# The broker hands an unacknowledged task to another worker once it is this old.
VISIBILITY_TIMEOUT_S = 3
STARTED = {DocumentStatus.PARSING, DocumentStatus.CHUNKING, DocumentStatus.EMBEDDING, DocumentStatus.INDEXING}


def long_document(paragraphs: int = 4000) -> bytes:
    """Enough text that its ingestion is still running when the worker is killed."""
    words = ["pump", "valve", "seal", "pressure", "flow", "gauge", "filter", "motor", "bearing", "shaft", "impeller", "casing"]
    rng = random.Random(7)
    sections = []
    for number in range(paragraphs):
        sentence = " ".join(rng.choice(words) for _ in range(40))
        heading = f"## Section {number}\n\n" if number % 20 == 0 else ""
        sections.append(f"{heading}{sentence.capitalize()}.")
    return "\n\n".join(sections).encode()


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_ingestion_leaves_the_document_to_the_next_one(settings, kb, request):
    settings.BACKGROUND_TASKS = "celery"
    env = {"CELERY_VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S)}
    database = database_url(connection.settings_dict)
    first = CeleryWorker(database, env=env)
    second = None
    try:
        first.wait_until_ready(90)
        document = submit(kb, "long-guide.md", long_document())

        def started() -> bool:
            return Document.objects.get(pk=document.pk).status in STARTED

        poll(started, timeout=60, what="the first worker to start the ingestion", worker=first)
        first.process.send_signal(signal.SIGKILL)  # no warm shutdown: the task stays unacknowledged
        first.process.wait(timeout=10)
        assert Document.objects.get(pk=document.pk).status in STARTED  # left half-way

        # A starting worker hands back the unacknowledged tasks that are old enough by then;
        # after that it looks again only every 100 s.
        time.sleep(VISIBILITY_TIMEOUT_S + 1)
        second = CeleryWorker(database, env=env)
        second.wait_until_ready(90)

        def finished() -> Document | None:
            current = Document.objects.get(pk=document.pk)
            return current if current.status in {DocumentStatus.READY, DocumentStatus.FAILED} else None

        done = poll(finished, timeout=120, what="the second worker to finish the ingestion", worker=second)
        assert done.status == DocumentStatus.READY, done.error
        chunks = Chunk.objects.filter(document=done)
        assert chunks.exists() and set(chunks.values_list("version", flat=True)) == {done.live_version}
        assert chunks.count() == len(set(chunks.values_list("level", "index")))  # no duplicates
        assert chunks.filter(level=Chunk.CHILD).count() == done.chunk_count
        second.wait_until_idle()
    finally:
        for worker in (first, second):
            if worker is not None:
                if request.session.testsfailed:
                    print(worker.report(120))
                worker.stop()
