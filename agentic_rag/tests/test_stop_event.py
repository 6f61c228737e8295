"""The stop event in-process: loops halt at their next batch boundary, tasks hand work back."""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest
from celery.signals import worker_process_init, worker_shutting_down

from agentic_rag import background, shutdown
from agentic_rag.embeddings import HashingEmbedder
from agentic_rag.shutdown import StopRequested, at_batch_boundary, describe_threads, start_watchdog
from graphrag.extraction import extract
from graphrag.models import GraphBuild, GraphDocument
from graphrag.runner import run_locked_build
from graphrag.tasks import build_knowledge_graph, resume_interrupted_graph_builds
from knowledge.indexing import embed_unique
from knowledge.ingest import run_ingestion, submit_document
from knowledge.models import Chunk, Document, DocumentStatus, SearchEntry
from knowledge.tasks import ingest_document, upgrade_embeddings


@pytest.fixture(autouse=True)
def _no_stop_left_behind():
    shutdown.reset()
    yield
    shutdown.reset()


class StopAfter:
    """An embedder that asks the process to stop after its `calls`-th call."""

    def __init__(self, calls: int) -> None:
        self.inner, self.calls, self.name = HashingEmbedder(64), calls, "hashing-64"
        self.seen = 0

    def embed_passages(self, texts):
        self.seen += 1
        if self.seen == self.calls:
            shutdown.request_stop("test")
        return self.inner.embed_passages(texts)


def _upload(kb, name: str, paragraphs: int = 3) -> Document:
    text = "\n\n".join(f"## Part {i}\n\nParagraph {i} of {name}: Django uses Celery, and Celery depends on Redis." for i in range(paragraphs))
    return submit_document(kb, name, text.encode(), enqueue=lambda document_id: None).document


def test_it_carries_on_until_a_stop_is_requested():
    at_batch_boundary()
    assert shutdown.request_stop("test") is True
    assert shutdown.request_stop("again") is False
    with pytest.raises(StopRequested):
        at_batch_boundary()


def test_it_stops_embedding_between_model_calls(settings):
    settings.EMBEDDER_BATCH_SIZE = 2
    embedder = StopAfter(calls=1)

    with pytest.raises(StopRequested):
        embed_unique(embedder, ["a", "b", "c", "d", "e"])

    assert embedder.seen == 1  # the second batch never reached the model


@pytest.mark.django_db
def test_a_stopped_ingestion_stays_in_progress_and_runs_again_without_duplicates(kb, monkeypatch):
    document = _upload(kb, "notes.md")
    monkeypatch.setattr("knowledge.indexing.embedder_for", lambda kb: StopAfter(calls=1))

    assert ingest_document.apply(args=[document.pk]).get() == "stopped"

    document.refresh_from_db()
    assert document.status == DocumentStatus.EMBEDDING  # what the next start resumes
    assert Chunk.objects.filter(document=document).exists()  # stored, not yet live
    shutdown.reset()
    monkeypatch.undo()
    run_ingestion(document.pk)
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY
    assert Chunk.objects.filter(document=document).count() == document.chunk_count + document.parent_count
    assert SearchEntry.objects.filter(chunk__document=document).count() == Chunk.objects.filter(document=document).count()


@pytest.mark.django_db
def test_a_stopped_upgrade_keeps_its_batches_and_the_next_run_finishes_it(kb, settings, monkeypatch):
    for number in range(3):  # several batches of the upgrade's 64 chunks
        run_ingestion(_upload(kb, f"doc-{number}.md", paragraphs=60).pk)
    settings.EMBEDDER_UPGRADE = "hashing-64"
    settings.EMBEDDER_BATCH_SIZE = 8  # four to eight model calls a batch: it stops in the second or third
    stopping = StopAfter(calls=10)
    monkeypatch.setattr("knowledge.tasks.get_embedder", lambda name: stopping)

    assert upgrade_embeddings.apply(args=[kb.pk]).get() == 0

    kb.refresh_from_db()
    written = SearchEntry.objects.filter(kb=kb, embedder="hashing-64").count()
    assert kb.embedder == "hashing-1024" and 0 < written < Chunk.objects.filter(kb=kb).count()
    shutdown.reset()
    monkeypatch.setattr("knowledge.tasks.get_embedder", lambda name: HashingEmbedder(64))
    assert upgrade_embeddings.apply(args=[kb.pk]).get() == Chunk.objects.filter(kb=kb).count() - written
    kb.refresh_from_db()
    assert kb.embedder == "hashing-64"
    assert SearchEntry.objects.filter(kb=kb).count() == Chunk.objects.filter(kb=kb).count()


@pytest.mark.django_db
def test_a_stopped_graph_build_is_queued_again_and_resumed(kb, monkeypatch):
    for number in range(3):
        run_ingestion(_upload(kb, f"doc-{number}.md").pk)

    def extract_then_stop(text, dictionary):
        shutdown.request_stop("test")  # the next document is not read
        return extract(text, dictionary)

    monkeypatch.setattr("graphrag.runner.extract", extract_then_stop)
    result = build_knowledge_graph.apply(args=[kb.pk]).get()

    assert "stopped" in result
    assert GraphDocument.objects.filter(kb=kb).count() == 1
    assert GraphBuild.objects.get(kb=kb).status == GraphBuild.QUEUED
    shutdown.reset()
    monkeypatch.undo()
    assert resume_interrupted_graph_builds() == [kb.pk]
    assert GraphDocument.objects.filter(kb=kb).count() == 3
    assert GraphBuild.objects.filter(kb=kb).latest("pk").status == GraphBuild.DONE


@pytest.mark.django_db
def test_a_build_after_an_interrupted_one_regroups_every_entity(kb):
    for number in range(2):
        run_ingestion(_upload(kb, f"doc-{number}.md").pk)
    clean = run_locked_build(kb)
    GraphBuild.objects.create(kb=kb, status=GraphBuild.RUNNING)  # as a killed process leaves it

    again = run_locked_build(kb)

    assert again.documents == 0  # nothing left to read, yet the groups are made anew
    assert again.communities_recomputed == clean.communities_recomputed > 0


def test_a_stopping_process_starts_no_more_background_tasks(settings):
    settings.BACKGROUND_TASKS = "thread"
    ran = threading.Event()
    background.stop_background_work("test")
    try:
        background.dispatch(_FakeTask(ran))
        assert not ran.wait(0.3)
    finally:
        background._executors.clear()  # shut down: later tests get new ones


class _FakeTask:
    name = "knowledge.tasks.ingest_document"

    def __init__(self, ran: threading.Event) -> None:
        self.ran = ran

    def apply(self, args):
        self.ran.set()
        raise AssertionError("a task ran after the stop")


def test_the_watchdog_exits_after_the_grace_period_and_names_what_it_abandons(caplog):
    exited = threading.Event()
    codes = []
    stuck = threading.Thread(target=exited.wait, name="stuck-request", args=(5,))
    stuck.start()
    try:
        start_watchdog(0.2, exit=lambda code: (codes.append(code), exited.set())).join(5)
    finally:
        exited.set()
        stuck.join()
    assert codes == [1]
    assert "stuck-request at " in caplog.text


def test_describe_threads_leaves_out_daemons_and_the_caller():
    release = threading.Event()
    daemon = threading.Thread(target=release.wait, name="a-daemon", daemon=True)
    daemon.start()
    try:
        assert not any(line.startswith("a-daemon") for line in describe_threads())
    finally:
        release.set()


def test_a_celery_warm_shutdown_asks_the_tasks_to_stop():
    worker_shutting_down.send(sender="test@host", sig="SIGTERM", how="Warm", exitcode=0)

    assert shutdown.is_stop_requested()


def test_a_pool_process_hears_the_stop_signal():
    previous = signal.getsignal(signal.SIGUSR2)
    try:
        worker_process_init.send(sender=None)
        os.kill(os.getpid(), signal.SIGUSR2)  # Python runs the handler before the next line

        assert shutdown.is_stop_requested()
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_a_stopped_task_goes_back_to_the_broker_from_a_worker():
    from celery.exceptions import Reject

    class Request:
        is_eager = False

    class Task:
        name, request = "knowledge.tasks.ingest_document", Request()

    with pytest.raises(Reject) as rejected:
        background.postpone(Task(), (1,))
    assert rejected.value.requeue is True


def test_vectors_are_unchanged_by_embedding_in_batches(settings):
    embedder = HashingEmbedder(64)
    texts = [f"text {n}" for n in range(7)]
    settings.EMBEDDER_BATCH_SIZE = 3

    assert np.array_equal(embed_unique(embedder, texts), embedder.embed_passages(texts))
