"""A dead ingestion run is told from a live one by its heartbeat, taken over once, and its job row ends."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agentic_rag.shutdown import at_batch_boundary, beating
from knowledge.ingest import Stage, pipeline_stages, request_reingest, run_ingestion, submit_document
from knowledge.liveness import TakenOver, claim_document, keep_claim, take_over_stalled
from knowledge.models import Chunk, Document, DocumentQuerySet, DocumentStatus, IngestionJob

from .factories import GUIDE_MD

pytestmark = pytest.mark.django_db


def _upload(kb, name: str = "guide.md") -> Document:
    return submit_document(kb, name, GUIDE_MD.encode(), enqueue=lambda document_id: None).document


def _killed_run(document: Document, *, silent_for_s: float) -> IngestionJob:
    """Leave the document as a run leaves it when its process is killed at 67%."""
    job = IngestionJob.objects.create(document=document, version=document.version, status=DocumentStatus.INDEXING)
    Document.objects.filter(pk=document.pk).update(
        status=DocumentStatus.INDEXING, progress=67, running_job=job,
        heartbeat_at=timezone.now() - timedelta(seconds=silent_for_s),
    )
    return job


def _sweep(queued: list[int] | None = None, events: list | None = None) -> list[int]:
    queued = [] if queued is None else queued
    events = [] if events is None else events
    return take_over_stalled(enqueue=queued.append, on_progress=events.append)


def test_it_queues_again_a_run_whose_heartbeat_is_stale_and_ends_its_job_row(kb, settings):
    document = _upload(kb)
    job = _killed_run(document, silent_for_s=settings.INGESTION_STALE_S + 1)
    queued, events = [], []

    assert _sweep(queued, events) == [document.pk]

    assert queued == [document.pk]
    job.refresh_from_db()
    assert job.finished_at is not None and job.status == DocumentStatus.FAILED
    assert job.error.startswith("interrupted: no heartbeat since")
    document.refresh_from_db()
    assert (document.status, document.interruptions, document.heartbeat_at) == (DocumentStatus.INDEXING, 1, None)
    assert document.is_interrupted
    assert [event.stage for event in events] == ["interrupted"]  # the page's row says so at once
    assert _sweep() == []  # queued once, not at every sweep

    run_ingestion(document.pk)

    document.refresh_from_db()
    assert document.status == DocumentStatus.READY and not document.is_interrupted
    assert document.interruptions == 0
    assert not IngestionJob.objects.filter(document=document, finished_at__isnull=True).exists()


def test_it_leaves_a_run_whose_heartbeat_is_fresh(kb, settings):
    document = _upload(kb)
    job = _killed_run(document, silent_for_s=settings.INGESTION_STALE_S / 2)

    assert _sweep() == []

    job.refresh_from_db()
    assert job.finished_at is None
    document.refresh_from_db()
    assert document.running_job_id == job.pk and not document.is_interrupted


class _Rows:
    """What a sweeper read before its rival wrote."""

    def __init__(self, rows: list) -> None:
        self.rows = rows

    def values_list(self, *fields):
        return self.rows


def test_of_two_sweepers_that_saw_the_same_dead_run_only_one_queues_it(kb, settings, monkeypatch):
    document = _upload(kb)
    _killed_run(document, silent_for_s=settings.INGESTION_STALE_S + 1)
    real_stalled = DocumentQuerySet.stalled
    queued: list[int] = []

    def read_then_let_a_rival_sweep(self, cutoff):
        seen = list(real_stalled(self, cutoff).values_list("pk", "heartbeat_at"))
        monkeypatch.setattr(DocumentQuerySet, "stalled", real_stalled)
        _sweep(queued)  # the rival, between this sweeper's read and its write
        return _Rows(seen)

    monkeypatch.setattr(DocumentQuerySet, "stalled", read_then_let_a_rival_sweep)

    assert _sweep(queued) == []
    assert queued == [document.pk]
    assert Document.objects.get(pk=document.pk).interruptions == 1


def test_a_document_whose_runs_keep_dying_fails_instead_of_killing_worker_after_worker(kb, settings):
    document = _upload(kb)
    Document.objects.filter(pk=document.pk).update(interruptions=settings.INGESTION_MAX_INTERRUPTIONS - 1)
    _killed_run(document, silent_for_s=settings.INGESTION_STALE_S + 1)
    queued: list[int] = []

    assert _sweep(queued) == [document.pk]

    assert queued == []
    document.refresh_from_db()
    assert document.status == DocumentStatus.FAILED
    assert f"interrupted {settings.INGESTION_MAX_INTERRUPTIONS} times" in document.error


class _Killed(BaseException):
    """What a SIGKILL looks like from inside: nothing after it runs but `finally` blocks."""


def test_a_run_killed_mid_way_leaves_a_job_row_that_the_next_run_ends(kb):
    document = _upload(kb)

    def killed(run) -> None:
        raise _Killed

    stages = [*pipeline_stages()[:3], Stage("killed", DocumentStatus.EMBEDDING, killed)]
    with pytest.raises(_Killed):
        run_ingestion(document.pk, stages=stages)
    dead = IngestionJob.objects.get(document=document)
    assert dead.finished_at is None  # as a killed process leaves it

    job = run_ingestion(document.pk)

    dead.refresh_from_db()
    assert dead.finished_at is not None and dead.error.startswith("interrupted")
    assert job.status == DocumentStatus.READY
    assert Chunk.objects.filter(document=document).count() == Document.objects.get(pk=document.pk).parent_count + (
        Document.objects.get(pk=document.pk).chunk_count
    )


def test_a_second_delivery_while_the_run_is_alive_does_nothing(kb, settings):
    document = _upload(kb)
    live = _killed_run(document, silent_for_s=1)

    assert run_ingestion(document.pk) is None

    assert list(IngestionJob.objects.filter(document=document)) == [live]  # no row left behind
    assert Chunk.objects.filter(document=document).count() == 0


def test_a_run_that_was_taken_over_stops_at_its_next_stage_and_takes_back_its_chunks(kb, settings):
    document = _upload(kb)

    def thought_dead(run) -> None:
        # It went quiet for too long: a sweep took the document over and queued another run.
        Document.objects.filter(pk=run.document.pk).update(
            heartbeat_at=timezone.now() - timedelta(seconds=settings.INGESTION_STALE_S + 1)
        )
        assert _sweep() == [run.document.pk]

    stages = [*pipeline_stages()[:3], Stage("quiet", DocumentStatus.EMBEDDING, thought_dead), *pipeline_stages()[3:]]
    job = run_ingestion(document.pk, stages=stages)

    assert job.status == DocumentStatus.FAILED and "took the document over" in job.error
    assert Chunk.objects.filter(document=document).count() == 0
    document.refresh_from_db()
    assert document.status in (DocumentStatus.EMBEDDING, DocumentStatus.INDEXING)  # for the next run
    assert run_ingestion(document.pk).status == DocumentStatus.READY


def test_the_heartbeat_moves_at_batch_boundaries_until_the_run_loses_its_claim(kb, settings):
    settings.INGESTION_HEARTBEAT_S = 0
    document = _upload(kb)
    job = IngestionJob.objects.create(document=document, version=document.version, status=document.status)
    assert claim_document(document, job)
    first = Document.objects.get(pk=document.pk).heartbeat_at

    with beating(keep_claim(document.pk, job.pk)):
        at_batch_boundary()
        assert Document.objects.get(pk=document.pk).heartbeat_at > first
        request_reingest(document, enqueue=lambda document_id: None)  # a new version drops the claim
        with pytest.raises(TakenOver):
            at_batch_boundary()


def test_the_pages_say_interrupted_resuming_until_the_next_run_starts(kb, settings, alice_client):
    document = _upload(kb)
    _killed_run(document, silent_for_s=settings.INGESTION_STALE_S + 1)  # dead, not yet swept
    kb_page = reverse("knowledge-detail", args=[kb.slug])
    document_page = reverse("document-detail", args=[kb.slug, document.pk])

    assert "Interrupted, resuming" in alice_client.get(kb_page).content.decode()
    assert "Interrupted, resuming" in alice_client.get(document_page).content.decode()
    _sweep()  # queued again, not running yet
    assert "Interrupted, resuming" in alice_client.get(kb_page).content.decode()

    run_ingestion(document.pk)

    assert "Interrupted, resuming" not in alice_client.get(kb_page).content.decode()
    assert "Interrupted, resuming" not in alice_client.get(document_page).content.decode()


@pytest.mark.django_db(transaction=True)  # the heartbeat thread sees only committed rows
def test_a_long_stage_with_no_boundary_inside_keeps_beating_and_is_not_taken_for_dead(kb, settings):
    settings.INGESTION_STALE_S, settings.INGESTION_HEARTBEAT_S = 0.6, 0.1
    document = _upload(kb)
    swept: list[list[int]] = []

    def slow_parse(run) -> None:  # a large file's parse: no boundary for longer than the stale limit
        import time

        time.sleep(1.0)
        swept.append(_sweep())
        run.parsed = None

    stages = [Stage("parse", DocumentStatus.PARSING, slow_parse, beats_meanwhile=True)]
    job = run_ingestion(document.pk, stages=stages)

    assert swept == [[]]  # the sweep in the middle of the stage saw a live run
    assert not job.error.startswith("interrupted")
