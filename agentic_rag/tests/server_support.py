"""A real daphne process on its own SQLite database, for tests of how the server stops.

`prepare_databases` runs in a Django shell on the database being prepared (see
`prepared_databases`); the tests then start servers on copies of its snapshots.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TOPICS = ["Django", "Celery", "Redis", "PostgreSQL", "SQLite", "Daphne", "GraphRAG", "BM25"]
CORPUS_SIZE = 6
SNAPSHOTS = ("ready", "ingestion-pending", "graph-pending")


def corpus() -> dict[str, bytes]:
    """Small Markdown documents that name each other's topics, so the graph links them."""
    documents = {}
    for number in range(CORPUS_SIZE):
        sections = []
        for part in range(10):
            first, second = TOPICS[(number + part) % 8], TOPICS[(number + 3 * part + 1) % 8]
            sentences = " ".join(
                f"{first} works with {second} in step {step} of part {part} of guide {number}."
                for step in range(12)
            )
            sections.append(f"## {first} and {second}\n\n{sentences}\n")
        documents[f"guide-{number}.md"] = f"# Guide {number}\n\n{''.join(sections)}".encode()
    return documents


def prepare_databases(folder: str) -> None:
    """Migrate, fill and snapshot the databases the servers start on (in a Django shell).

    ready: an owner, an API token, KB "ready" ingested, and KB "baseline" ingested with its
    graph built, the clean run the resumed work is compared with. ingestion-pending: also KB
    "fresh" with every document uploaded but not yet ingested. graph-pending: "ready" with a
    graph build that a stopped server left queued.
    """
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from agentic_rag.models import ApiToken
    from graphrag.build import build_graph
    from graphrag.models import GraphBuild
    from knowledge.batch import FileToIngest, ingest_files
    from knowledge.ingest import submit_document
    from knowledge.models import KnowledgeBase

    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create_user("owner", password="owner-password")
    Path(folder, "token").write_text(ApiToken.issue(owner, "tests")[1])
    files = Path(folder, "corpus")
    files.mkdir()
    items = []
    for name, data in corpus().items():
        (files / name).write_bytes(data)
        items.append(FileToIngest(name, name, files / name))
    for slug in ("ready", "baseline"):
        kb = KnowledgeBase.objects.create(slug=slug, name=slug, owner=owner)
        ingest_files(kb, items, on_progress=lambda progress: None)
    build_graph(KnowledgeBase.objects.get(slug="baseline"))

    def snapshot(name: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute("VACUUM INTO %s", [str(Path(folder, f"{name}.sqlite3"))])

    snapshot("ready")
    fresh = KnowledgeBase.objects.create(slug="fresh", name="fresh", owner=owner)
    for name, data in corpus().items():
        submit_document(fresh, name, data, enqueue=lambda document_id: None)
    snapshot("ingestion-pending")
    fresh.delete()
    GraphBuild.objects.create(kb=KnowledgeBase.objects.get(slug="ready"), status=GraphBuild.QUEUED)
    snapshot("graph-pending")


def server_environment(folder: Path, **overrides: str) -> dict[str, str]:
    """The environment of the embedded default, on the database in `folder`."""
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}}
    env.update(
        DJANGO_SETTINGS_MODULE="agentic_rag.settings",
        DATABASE_URL=f"sqlite:///{folder / 'db.sqlite3'}",
        VAR_DIR=str(folder),
        BACKGROUND_TASKS="thread",
        EMBEDDER="hashing-1024",
        EMBEDDER_UPGRADE="",
        GRAPH_BUILD_AFTER_INGESTION="0",
        LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


def prepared_databases(folder: Path) -> Path:
    """Run prepare_databases in a Django shell; return the folder of its snapshots."""
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c",
         f"from agentic_rag.tests.server_support import prepare_databases; prepare_databases({str(folder)!r})"],
        cwd=ROOT, env=server_environment(folder, BACKGROUND_TASKS="inline"), check=True,
        capture_output=True, timeout=180,
    )
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """A daphne subprocess serving the project on 127.0.0.1, its output kept in a log file."""

    def __init__(self, folder: Path, **env: str) -> None:
        self.folder, self.port = folder, free_port()
        self.log_path = folder / f"daphne-{self.port}.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(self.port), "agentic_rag.asgi:application"],
                cwd=ROOT, env=server_environment(folder, **env), stdout=log, stderr=subprocess.STDOUT,
            )
        self._wait_until_listening(timeout=60)

    def _wait_until_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daphne exited at start:\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"daphne did not listen within {timeout:.0f} s:\n{self.log()}")

    def get(self, path: str) -> int:
        """Send a GET and return its status (the first request also resumes background work)."""
        import http.client

        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("GET", path)
            return connection.getresponse().status
        finally:
            connection.close()

    def terminate(self, timeout: float = 20) -> float:
        """Send SIGTERM and return the seconds until the process exited (SIGKILL past `timeout`)."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return float("inf")
        return time.monotonic() - started

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def copy_database(snapshots: Path, name: str, folder: Path) -> Path:
    """Put snapshot `name` in `folder` as the database a server there uses, with its API key."""
    shutil.copyfile(snapshots / f"{name}.sqlite3", folder / "db.sqlite3")
    shutil.copyfile(snapshots / "token", folder / "token")
    return folder


def query(folder: Path, sql: str, *params: object) -> list[tuple]:
    """Read the server's database directly (WAL: never blocks the server's writer)."""
    with closing(sqlite3.connect(folder / "db.sqlite3", timeout=30)) as db:
        return db.execute(sql, params).fetchall()


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str, server: Server) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if server.process.poll() is not None:
            raise AssertionError(f"daphne exited while waiting for {what}:\n{server.log()}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}:\n{server.log()}")


def start(servers: list[Server], folder: Path, **env: str) -> Server:
    """Start a server on the database in `folder`, in the `servers` fixture's list."""
    server = Server(folder, **env)
    servers.append(server)
    return server
