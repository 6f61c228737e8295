"""The full stack: PostgreSQL, the Redis channel layer and a real Celery worker process.

Skipped on the embedded default; `.ci/run` runs them with DATABASE_URL on PostgreSQL and
REDIS_URL set. The worker is a separate process that reads the test database, so these
tests commit (transaction=True) and poll for what the worker writes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from knowledge.ingest import submit_document
from knowledge.models import (
    Chunk,
    Document,
    DocumentFile,
    DocumentStatus,
    IngestionJob,
    KnowledgeBase,
)
from knowledge.tasks import enqueue_ingestion

from .factories import GUIDE_MD

FULL_STACK = connection.vendor == "postgresql" and bool(django_settings.REDIS_URL)

pytestmark = [
    pytest.mark.fullstack,
    pytest.mark.skipif(
        not FULL_STACK,
        reason="full stack only: needs DATABASE_URL on PostgreSQL and REDIS_URL (see .ci/run)",
    ),
]

WORKER_START_TIMEOUT = 90.0
INGEST_TIMEOUT = 60.0
FINISHED = {DocumentStatus.READY, DocumentStatus.FAILED}
T = TypeVar("T")


# --- the worker ----------------------------------------------------------------------------


def database_url(db: dict) -> str:
    """A dj-database-url URL for a connection's settings (the test database's, in a test)."""
    user = quote(db.get("USER") or "", safe="")
    password = quote(db.get("PASSWORD") or "", safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = db.get("HOST") or ""
    host = quote(host, safe="") if host.startswith("/") else host  # a socket directory
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{credentials}{host}{port}/{quote(db['NAME'], safe='')}"


class CeleryWorker:
    """A `celery worker` subprocess consuming the default, ingestion and graph queues."""

    def __init__(
        self, database: str, *, build_graphs: bool = False, env: dict[str, str] | None = None,
        queues: str = "default,ingestion,graph",
    ) -> None:
        self.name = f"fullstack-{uuid.uuid4().hex[:8]}@localhost"
        self.log_path = Path(tempfile.mkstemp(prefix="celery-worker-", suffix=".log")[1])
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "agentic_rag.settings",
            "DATABASE_URL": database,
            "REDIS_URL": django_settings.REDIS_URL,
            "BACKGROUND_TASKS": "celery",
            # The fast embedder only: the e5 upgrade takes minutes and is tested elsewhere.
            "EMBEDDER": "hashing-1024",
            "EMBEDDER_UPGRADE": "",
            # Graph builds after ingestion only where a test waits for them: one still writing
            # when a test ends would deadlock the flush of the test database.
            "GRAPH_BUILD_AFTER_INGESTION": "1" if build_graphs else "0",
            # Graph builds start as soon as ingestion ends, so tests need not wait out a debounce.
            "GRAPH_BUILD_DEBOUNCE_S": "0",
            # A build that finds another one running retries once this lock could have lapsed.
            "GRAPH_BUILD_LOCK_S": "10",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        command = [
            sys.executable, "-m", "celery", "-A", "agentic_rag", "worker",
            "--queues", queues, "--pool", "solo", "--concurrency", "1",
            "--loglevel", "INFO", "--hostname", self.name,
            "--without-gossip", "--without-mingle",
        ]  # fmt: skip
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=django_settings.BASE_DIR,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_until_idle(self, timeout: float = 60.0) -> None:
        """Return once the worker has no task running, reserved or scheduled."""
        from agentic_rag.celery import app

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            inspect = app.control.inspect(destination=[self.name], timeout=1.0)
            busy = [inspect.active(), inspect.reserved(), inspect.scheduled()]
            if all(not (reply or {}).get(self.name) for reply in busy):
                return
            time.sleep(0.3)
        pytest.fail(f"the Celery worker was still busy after {timeout:.0f} s{self.report()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def report(self, lines: int = 80) -> str:
        tail = "\n".join(self.log().splitlines()[-lines:])
        return f"\n--- celery worker {self.name} (exit code {self.process.poll()}) ---\n{tail}"

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            pytest.fail(f"the Celery worker exited{self.report()}")

    def wait_until_ready(self, timeout: float) -> None:
        from agentic_rag.celery import app

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if app.control.ping(destination=[self.name], timeout=1.0):
                return
            time.sleep(0.5)
        pytest.fail(f"the Celery worker answered no ping within {timeout:.0f} s{self.report()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # warm shutdown
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.log_path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def celery_worker(request, django_db_setup) -> Iterator[CeleryWorker]:
    # django_db_setup has created the test database, and the connection now names it.
    yield from running_worker(request)


def running_worker(request, *, build_graphs: bool = False) -> Iterator[CeleryWorker]:
    """A worker on the test database until the fixture ends; its log printed if a test failed."""
    worker = CeleryWorker(database_url(connection.settings_dict), build_graphs=build_graphs)
    failed_before = request.session.testsfailed
    try:
        worker.wait_until_ready(WORKER_START_TIMEOUT)
        yield worker
    finally:
        if request.session.testsfailed > failed_before:
            print(worker.report(200), file=sys.stderr)
        worker.stop()


def poll(fetch: Callable[[], T | None], *, timeout: float, what: str, worker: CeleryWorker) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fetch()
        if value:
            return value
        worker.check_alive()
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}{worker.report()}")


def wait_until_finished(document_id: int, worker: CeleryWorker) -> Document:
    def finished() -> Document | None:
        document = Document.objects.get(pk=document_id)
        return document if document.status in FINISHED else None

    what = f"document {document_id} to finish"
    return poll(finished, timeout=INGEST_TIMEOUT, what=what, worker=worker)


def submit(kb: KnowledgeBase, name: str, data: bytes) -> Document:
    outcome = submit_document(kb, name, data, enqueue=enqueue_ingestion)
    assert outcome.status == "queued", outcome.message
    return outcome.document


def ingestions_logged(worker: CeleryWorker) -> int:
    """How many ingestion tasks the worker has logged as succeeded so far."""
    lines = worker.log().splitlines()
    return sum("knowledge.tasks.ingest_document[" in line and "succeeded" in line for line in lines)


def assert_worker_ran_ingestions(worker: CeleryWorker, *, since: int, count: int) -> None:
    poll(
        lambda: ingestions_logged(worker) >= since + count,
        timeout=10,
        what=f"{count} more ingestion task(s) logged as succeeded by the worker",
        worker=worker,
    )


# --- the tests -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_ran_the_migrations_on_postgresql_with_pgvector_available():
    assert connection.vendor == "postgresql"
    assert connection.settings_dict["NAME"].startswith("test_")
    tables = set(connection.introspection.table_names())
    for model in (KnowledgeBase, Document, DocumentFile, Chunk, IngestionJob):
        assert model._meta.db_table in tables
    executor = MigrationExecutor(connection)
    assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_migrations WHERE app = 'knowledge'")
        assert cursor.fetchone()[0] >= 1
        cursor.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
        assert cursor.fetchone() is not None, "pgvector is not installed (.ci/build-pgvector.sh)"
        # The test's transaction rolls this back.
        cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
        cursor.execute("SELECT '[1, 2, 3]'::vector <-> '[1, 2, 5]'::vector")
        assert cursor.fetchone()[0] == pytest.approx(2.0)


@pytest.mark.django_db(transaction=True)
def test_it_ingests_a_document_end_to_end_in_a_real_worker(settings, kb, celery_worker):
    settings.BACKGROUND_TASKS = "celery"
    logged = ingestions_logged(celery_worker)

    document = submit(kb, "guide.md", GUIDE_MD.encode())
    document = wait_until_finished(document.pk, celery_worker)

    assert document.status == DocumentStatus.READY, document.error
    assert document.live_version == document.version == 1
    parents = Chunk.objects.live().parents().filter(document=document)
    children = Chunk.objects.live().children().filter(document=document)
    assert parents.count() == document.parent_count >= 3
    assert children.count() == document.chunk_count >= 3
    assert set(children.values_list("parent__level", flat=True)) == {Chunk.PARENT}
    assert {p.section_index for p in parents} >= {"1", "1.1", "2"}
    job = IngestionJob.objects.get(document=document)
    assert job.status == DocumentStatus.READY
    assert set(job.timings_ms) >= {"parse", "chunk", "store", "publish"}
    assert job.finished_at is not None
    assert_worker_ran_ingestions(celery_worker, since=logged, count=1)


@pytest.fixture
def session_cookie(client, alice) -> bytes:
    client.force_login(alice)
    name = django_settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}".encode()


async def receive_until(
    communicator: WebsocketCommunicator, wanted: Callable[[str], bool], worker: CeleryWorker
) -> list[str]:
    """Collect text frames until one is wanted; fail with them all after INGEST_TIMEOUT."""
    frames: list[str] = []
    deadline = time.monotonic() + INGEST_TIMEOUT
    while not any(wanted(frame) for frame in frames):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(
                "no such frame on the websocket; got:\n" + "\n---\n".join(frames) + worker.report()
            )
        worker.check_alive()
        # receive_from's timeout would cancel the consumer; receive_nothing only waits.
        if not await communicator.receive_nothing(timeout=min(remaining, 0.5), interval=0.05):
            frames.append(await communicator.receive_from(timeout=5))
    return frames


@pytest.mark.django_db(transaction=True)
async def test_it_carries_the_workers_progress_over_redis_to_a_websocket(
    settings, kb, session_cookie, celery_worker
):
    from agentic_rag.asgi import application

    settings.BACKGROUND_TASKS = "celery"
    assert type(get_channel_layer()).__name__ == "RedisChannelLayer"
    headers = [(b"cookie", session_cookie), (b"origin", b"http://127.0.0.1")]
    communicator = WebsocketCommunicator(application, f"/ws/kb/{kb.slug}/", headers=headers)
    connected, _ = await communicator.connect(timeout=10)
    assert connected, "the websocket refused alice's session"
    try:
        await receive_until(
            communicator, lambda frame: 'id="document-rows"' in frame, celery_worker
        )
        document = await database_sync_to_async(submit)(kb, "guide.md", GUIDE_MD.encode())
        row = f'<tr id="document-{document.pk}"'
        # Only the worker process publishes progress, so each row frame crossed Redis.
        await receive_until(
            communicator,
            lambda frame: row in frame and 'data-status="ready"' in frame,
            celery_worker,
        )
    finally:
        await communicator.disconnect()

    # database_sync_to_async closes its connection, so the test database can be dropped.
    stored = await database_sync_to_async(Document.objects.get)(pk=document.pk)
    assert stored.status == DocumentStatus.READY


@pytest.mark.django_db(transaction=True)
def test_it_fails_a_corrupt_pdf_in_a_real_worker_and_leaves_the_rest_alone(
    settings, kb, celery_worker
):
    settings.BACKGROUND_TASKS = "celery"
    logged = ingestions_logged(celery_worker)
    good = wait_until_finished(submit(kb, "guide.md", GUIDE_MD.encode()).pk, celery_worker)
    assert good.status == DocumentStatus.READY, good.error
    good_chunks = Chunk.objects.filter(document=good).values_list("pk", "version", "sha256")
    before = set(good_chunks)

    garbage = bytes(range(256)) * 64
    bad = wait_until_finished(submit(kb, "broken.pdf", garbage).pk, celery_worker)

    assert bad.status == DocumentStatus.FAILED
    assert "PDF" in bad.error and "internal error" not in bad.error, bad.error
    assert not Chunk.objects.filter(document=bad).exists()
    job = IngestionJob.objects.get(document=bad)
    assert job.status == DocumentStatus.FAILED and job.error == bad.error
    good.refresh_from_db()
    assert (good.status, good.live_version, good.error) == (DocumentStatus.READY, 1, "")
    assert set(good_chunks.all()) == before
    assert_worker_ran_ingestions(celery_worker, since=logged, count=2)
