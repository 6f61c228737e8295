from __future__ import annotations

import hashlib
import importlib

import pytest
from django.apps import apps
from django.test import TestCase

from knowledge.ingest import (
    Stage,
    check_upload,
    clean_file_name,
    delete_document,
    register_stage,
    request_reingest,
    run_ingestion,
    submit_document,
)
from knowledge.models import Chunk, Document, DocumentFile, DocumentStatus, DocumentVersion, IngestionJob

from .factories import GUIDE_MD, encrypted_pdf

pytestmark = pytest.mark.django_db


def _submit(kb, name, data):
    queued: list[int] = []
    # The test's transaction never commits, so run on-commit callbacks as if it had.
    with TestCase.captureOnCommitCallbacks(execute=True):
        outcome = submit_document(kb, name, data, enqueue=queued.append)
    return outcome, queued


def _ingest(kb, name, data, **options):
    outcome, queued = _submit(kb, name, data)
    for document_id in queued:
        run_ingestion(document_id, **options)
    return outcome


def test_it_ingests_a_markdown_file_into_parents_and_children(kb):
    events = []
    outcome = _ingest(kb, "guide.md", GUIDE_MD.encode(), on_progress=events.append)

    document = Document.objects.get(pk=outcome.document.pk)
    assert document.status == DocumentStatus.READY
    assert document.live_version == document.version == 1
    parents = Chunk.objects.live().parents().filter(document=document)
    children = Chunk.objects.live().children().filter(document=document)
    assert parents.count() == document.parent_count >= 3
    assert children.count() == document.chunk_count >= 3
    assert all(child.parent.document_id == document.pk for child in children)
    assert {p.section_index for p in parents} >= {"1", "1.1", "2"}
    zh = parents.get(section_index="2")
    assert "GB 50204-2015" in zh.tags
    assert [e.status for e in events][-1] == DocumentStatus.READY
    assert [e.stage for e in events][:3] == ["parse", "chunk", "store"]
    job = IngestionJob.objects.get(document=document)
    assert set(job.timings_ms) >= {"parse", "chunk", "store", "publish"}
    kb.refresh_from_db()
    assert kb.content_version == 1


def test_it_reports_the_same_bytes_unchanged_and_writes_nothing(kb):
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    chunk_ids = set(Chunk.objects.values_list("pk", flat=True))

    outcome, queued = _submit(kb, "guide.md", GUIDE_MD.encode())
    renamed, renamed_queued = _submit(kb, "copy.md", GUIDE_MD.encode())

    assert outcome.status == "unchanged" and queued == []
    assert renamed.status == "unchanged" and "guide.md" in renamed.message
    assert renamed_queued == []
    assert Document.objects.count() == 1
    assert set(Chunk.objects.values_list("pk", flat=True)) == chunk_ids


def test_it_keeps_the_old_version_live_until_the_new_one_is_published(kb):
    first = _ingest(kb, "guide.md", GUIDE_MD.encode())
    old_ids = set(Chunk.objects.values_list("pk", flat=True))
    seen_while_storing = {}

    def check_live(run):
        seen_while_storing["live"] = set(Chunk.objects.live().values_list("pk", flat=True))

    outcome, queued = _submit(kb, "guide.md", (GUIDE_MD + "\n# 3 New\n\nA new chapter.\n").encode())
    assert outcome.status == "queued" and "version 2" in outcome.message
    from knowledge.ingest import CORE_STAGES

    run_ingestion(queued[0], stages=[*CORE_STAGES, Stage("probe", DocumentStatus.INDEXING, check_live)])

    assert seen_while_storing["live"] == old_ids
    document = Document.objects.get(pk=first.document.pk)
    assert document.live_version == document.version == 2
    assert not Chunk.objects.filter(pk__in=old_ids).exists()
    assert Chunk.objects.live().filter(section_index="3").exists()
    assert Chunk.objects.filter(document=document).exclude(version=2).count() == 0


def test_it_fails_a_bad_new_version_and_keeps_serving_the_old_one(kb):
    _ingest(kb, "notes.txt", "第一章 总则\n\n这是一个测试文档。".encode())
    old_ids = set(Chunk.objects.values_list("pk", flat=True))

    _ingest(kb, "notes.txt", b"\x00\x01\x02binary\x00\xff" * 50)

    document = Document.objects.get(name="notes.txt")
    assert document.status == DocumentStatus.FAILED
    assert "binary" in document.error and "version 1 still serves" in document.error
    assert set(Chunk.objects.live().values_list("pk", flat=True)) == old_ids


def test_it_is_idempotent_when_the_task_runs_twice(kb):
    outcome = _ingest(kb, "guide.md", GUIDE_MD.encode())
    count = Chunk.objects.count()

    assert run_ingestion(outcome.document.pk) is None
    assert Chunk.objects.count() == count


def test_it_discards_leftovers_of_an_interrupted_run(kb):
    outcome, queued = _submit(kb, "guide.md", GUIDE_MD.encode())
    document = outcome.document
    Chunk.objects.create(kb=kb, document=document, version=1, level=Chunk.CHILD, index=0, text="stale", sha256="x")

    run_ingestion(queued[0])

    assert not Chunk.objects.filter(text="stale").exists()


class ServerStopped(BaseException):
    """What a killed process looks like from inside: nothing after it runs, no handler catches it."""


def test_an_ingestion_a_stopped_server_left_half_way_ends_ready_without_duplicates(kb, settings):
    from knowledge.ingest import CORE_STAGES
    from knowledge.tasks import resume_interrupted_ingestions

    clean, queued = _submit(kb, "clean.md", GUIDE_MD.encode())
    run_ingestion(queued[0])
    outcome, queued = _submit(kb, "guide.md", GUIDE_MD.encode() + b"\n")

    def stop(run):
        raise ServerStopped

    with pytest.raises(ServerStopped):  # chunks stored, vectors half-way
        run_ingestion(queued[0], stages=[*CORE_STAGES, Stage("killed", DocumentStatus.EMBEDDING, stop)])
    document = Document.objects.get(pk=outcome.document.pk)
    assert document.status == DocumentStatus.EMBEDDING and Chunk.objects.filter(document=document).exists()

    settings.BACKGROUND_TASKS = "inline"  # the restarted server's tasks, run here and now
    assert resume_interrupted_ingestions() == [document.pk]

    document.refresh_from_db()
    assert document.status == DocumentStatus.READY and document.live_version == 1
    chunks = Chunk.objects.filter(document=document)
    reference = Chunk.objects.filter(document=clean.document)
    assert chunks.count() == reference.count()  # the same text as the clean one: no leftovers
    assert len(set(chunks.values_list("level", "index"))) == chunks.count()
    assert resume_interrupted_ingestions() == []  # nothing left in progress


def test_it_stops_when_a_newer_version_arrives_during_ingestion(kb):
    outcome, queued = _submit(kb, "guide.md", GUIDE_MD.encode())

    def upload_newer(run):
        _submit(kb, "guide.md", (GUIDE_MD + "\nmore text").encode())

    from knowledge.ingest import CORE_STAGES

    run_ingestion(queued[0], stages=[*CORE_STAGES, Stage("race", DocumentStatus.EMBEDDING, upload_newer)])

    document = Document.objects.get(pk=outcome.document.pk)
    assert document.version == 2 and document.live_version == 0
    assert document.status == DocumentStatus.PENDING
    assert not Chunk.objects.filter(document=document, version=1).exists()


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("empty.md", b"", "empty"),
        ("tool.exe", b"MZ\x90\x00", "unsupported file type '.exe'"),
        ("noext", b"hello", "unsupported file type"),
    ],
)
def test_it_rejects_bad_uploads_before_storing_them(kb, name, data, message):
    outcome, queued = _submit(kb, name, data)

    assert outcome.status == "rejected" and message in outcome.message
    assert queued == [] and not Document.objects.exists()


def test_it_rejects_oversize_files(settings):
    settings.MAX_UPLOAD_BYTES, settings.MAX_UPLOAD_MB = 1024 * 1024, 1

    assert "over the 1 MB limit" in check_upload("big.txt", 2 * 1024 * 1024)
    assert check_upload("small.txt", 10) is None


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        ("scan.pdf", b"%PDF-1.4 garbage that is not a pdf", "PDF"),
        ("locked.pdf", None, "password"),
        ("report.docx", b"this is not a zip archive", "zip"),
        ("blob.txt", b"\x00\x01\x02\x03\xff\xfe\x00" * 100, "binary"),
    ],
)
def test_it_fails_corrupt_files_alone_with_a_clear_error(kb, name, data, words):
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    good = set(Chunk.objects.values_list("pk", flat=True))

    _ingest(kb, name, data if data is not None else encrypted_pdf())

    bad = Document.objects.get(name=name)
    assert bad.status == DocumentStatus.FAILED and words.lower() in bad.error.lower()
    assert "Traceback" not in bad.error
    assert set(Chunk.objects.values_list("pk", flat=True)) == good
    assert Document.objects.get(name="guide.md").status == DocumentStatus.READY


def test_it_retries_a_failed_document_when_the_same_bytes_come_again(kb):
    _ingest(kb, "blob.txt", b"\x00\x01" * 100)

    outcome, queued = _submit(kb, "blob.txt", b"\x00\x01" * 100)

    assert outcome.status == "queued" and queued == [outcome.document.pk]


def test_it_keeps_the_bytes_of_every_new_version(kb, alice):
    first = GUIDE_MD.encode()
    second = first + b"\n# 3 New\n\nA new chapter.\n"
    _submit(kb, "guide.md", first)
    _ingest(kb, "blob.txt", b"\x00\x01" * 100)

    _submit(kb, "guide.md", first)  # unchanged
    outcome, _ = _submit(kb, "blob.txt", b"\x00\x01" * 100)  # a retry of the same bytes
    with TestCase.captureOnCommitCallbacks(execute=True):
        submit_document(kb, "guide.md", second, enqueue=lambda pk: None, user=alice, note="added chapter 3")

    kept = DocumentVersion.objects.filter(document__name="guide.md").order_by("version")
    assert [(v.version, bytes(v.data), v.size, v.note) for v in kept] == [
        (1, first, len(first), ""),
        (2, second, len(second), "added chapter 3"),
    ]
    assert kept[1].created_by == alice and kept[1].sha256 == Document.objects.get(name="guide.md").sha256
    assert outcome.document.version == 2 and outcome.document.versions.count() == 1


def test_the_migration_keeps_the_current_bytes_of_documents_stored_before_versions(kb, alice):
    backfill = importlib.import_module("knowledge.migrations.0006_backfill_document_versions").backfill
    document = Document.objects.create(kb=kb, name="old.md", sha256="x", version=3, uploaded_by=alice)
    data = b"# Old\n\nBytes from before."
    DocumentFile.objects.create(document=document, data=data)

    backfill(apps, None)
    backfill(apps, None)  # safe to run again

    kept = DocumentVersion.objects.get(document=document)
    assert (kept.version, bytes(kept.data), kept.size) == (3, data, len(data))
    assert kept.sha256 == hashlib.sha256(data).hexdigest()
    assert kept.created_by is None  # version 3's author is not known, only version 1's


def test_the_migration_gives_entries_indexed_before_camel_case_splitting_their_words(kb):
    from knowledge.models import KnowledgeBase, SearchEntry

    retokenize = importlib.import_module("knowledge.migrations.0015_camel_case_tokens").retokenize
    _ingest(kb, "search.md", b"# Search\n\nThe search node sets VectorWeight: 0.7 and BM25Weight: 0.3.")
    _ingest(kb, "plain.md", b"# Plain\n\nNo names of joined words here.")
    camel = SearchEntry.objects.filter(chunk__text__contains="VectorWeight")
    plain = SearchEntry.objects.exclude(chunk__text__contains="VectorWeight")
    current = {entry.pk: entry.tokens for entry in SearchEntry.objects.all()}
    camel.update(tokens="search node set vectorweight 0.7 bm25weight 0.3")  # as indexed before
    version = KnowledgeBase.objects.get(pk=kb.pk).content_version

    retokenize(apps, None)

    assert {entry.pk: entry.tokens for entry in SearchEntry.objects.all()} == current
    assert all({"vector", "weight"} <= set(entry.tokens.split()) for entry in camel)
    assert plain.exists()
    assert KnowledgeBase.objects.get(pk=kb.pk).content_version == version + 1


def test_it_deletes_a_document_with_its_chunks(kb):
    outcome = _ingest(kb, "guide.md", GUIDE_MD.encode())

    delete_document(Document.objects.get(pk=outcome.document.pk))

    assert not Document.objects.exists() and not Chunk.objects.exists()


def test_it_reingests_the_same_bytes_as_a_new_version(kb):
    outcome = _ingest(kb, "guide.md", GUIDE_MD.encode())
    document = Document.objects.get(pk=outcome.document.pk)
    queued: list[int] = []

    with TestCase.captureOnCommitCallbacks(execute=True):
        request_reingest(document, enqueue=queued.append)
    run_ingestion(queued[0])

    document.refresh_from_db()
    assert document.live_version == document.version == 2
    assert document.status == DocumentStatus.READY


def test_it_rejects_extra_stages_outside_embedding_and_indexing():
    with pytest.raises(ValueError, match="embedding or indexing"):
        register_stage(Stage("sneaky", DocumentStatus.PARSING, lambda run: None))


@pytest.mark.parametrize(
    ("given", "expected"),
    [("../../etc/passwd", "etc/passwd"), ("C:\\docs\\a.md", "C:/docs/a.md"), ("a\x00b.md", "ab.md")],
)
def test_it_cleans_file_names(given, expected):
    assert clean_file_name(given) == expected


def test_it_never_moves_the_content_version_back_when_a_stale_kb_is_saved(kb):
    stale = type(kb).objects.get(pk=kb.pk)
    _ingest(kb, "guide.md", GUIDE_MD.encode())

    stale.name = "Renamed"
    stale.save()

    kb.refresh_from_db()
    assert kb.name == "Renamed" and kb.content_version == 1
