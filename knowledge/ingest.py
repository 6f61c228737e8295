"""Ingestion: accept a file into a knowledge base, then parse, chunk and store it in stages.

`submit_document` is what the web upload and `manage.py ingest` call; `run_ingestion` is
what the Celery task (and the command, in-process) runs. A document's new version is
written beside the live one and swapped in by one transaction, so the old chunks serve
until the new ones are ready.
"""

from __future__ import annotations

import hashlib
import logging
import mimetypes
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import Any, Literal

from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from agentic_rag.shutdown import StopRequested, at_batch_boundary, beating

from .chunking import ChunkingParams, ParentDraft, chunk_document
from .liveness import (
    TakenOver,
    beating_meanwhile,
    claim_document,
    holds_claim,
    keep_claim,
    release_claim,
    release_for_new_version,
)
from .models import (
    IN_PROGRESS,
    Chunk,
    Document,
    DocumentFile,
    DocumentStatus,
    DocumentVersion,
    IngestionJob,
    KnowledgeBase,
)
from .parsing import SUPPORTED_EXTENSIONS, ParsedDocument, ParseError, parse_document
from .progress import Progress

log = logging.getLogger(__name__)

# Errors worth retrying: the database went away or was busy, not the file's fault.
TRANSIENT_ERRORS = (OperationalError, InterfaceError)


@dataclass(frozen=True)
class SubmitOutcome:
    name: str
    status: Literal["queued", "unchanged", "rejected"]
    message: str
    document: Document | None = None


def check_upload(name: str, size: int) -> str | None:
    """Return why a file cannot be accepted, or None when it can."""
    extension = Path(name).suffix.lower()
    if extension not in SUPPORTED_EXTENSIONS:
        supported = ", ".join(sorted(SUPPORTED_EXTENSIONS))
        text = _("unsupported file type '%(extension)s' (supported: %(supported)s)")
        return text % {"extension": extension or name, "supported": supported}
    if size == 0:
        return _("the file is empty")
    if size > settings.MAX_UPLOAD_BYTES:
        limit = _megabytes(settings.MAX_UPLOAD_BYTES)
        text = _("the file is %(size)s MB, over the %(limit)s MB limit")
        return text % {"size": _megabytes(size), "limit": limit}
    return None


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f}".removesuffix(".0")


def clean_file_name(name: str) -> str:
    """Make a relative POSIX name without "..", control characters or a leading slash."""
    parts = [part for part in name.replace("\\", "/").split("/") if part not in {"", ".", ".."}]
    cleaned = "/".join("".join(ch for ch in part if ch.isprintable()).strip() for part in parts)
    return cleaned[-255:]


def submit_document(
    kb: KnowledgeBase,
    name: str,
    data: bytes,
    *,
    enqueue: Callable[[int], None],
    source: str = "upload",
    user=None,
    note: str = "",
) -> SubmitOutcome:
    """Accept a file as a new document or a new version, and enqueue its ingestion.

    New bytes are also kept as a DocumentVersion (with `note`), so they can be restored.
    """
    name = clean_file_name(name)
    error = check_upload(name, len(data)) if name else _("the file has no name")
    if error:
        return SubmitOutcome(name, "rejected", error)
    sha256 = hashlib.sha256(data).hexdigest()
    try:
        with transaction.atomic():
            outcome = _store_submission(kb, name, data, sha256, source=source, user=user, note=note)
            if outcome.status == "queued":
                transaction.on_commit(partial(enqueue, outcome.document.pk))
    except IntegrityError:
        # A concurrent upload of the same bytes or name won the race.
        return SubmitOutcome(name, "unchanged", _("unchanged: the same file was just uploaded"))
    return outcome


def _store_submission(kb, name, data, sha256, *, source, user, note) -> SubmitOutcome:
    documents = kb.documents.select_for_update()
    same_bytes = documents.filter(sha256=sha256).first()
    if same_bytes is not None and not (
        same_bytes.status == DocumentStatus.FAILED and same_bytes.name == name
    ):
        if same_bytes.name == name:
            message = _("unchanged")
        else:
            message = _("unchanged: same content as %(name)s") % {"name": same_bytes.name}
        return SubmitOutcome(name, "unchanged", message, same_bytes)
    document = same_bytes or documents.filter(name=name).first()
    mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if document is None:
        document = Document.objects.create(
            kb=kb, name=name, source=source, mime=mime, size=len(data), sha256=sha256, uploaded_by=user
        )
        DocumentFile.objects.create(document=document, data=data)
        _keep_version(document, data, user=user, note=note)
        return SubmitOutcome(name, "queued", _("queued"), document)
    retrying = document.sha256 == sha256
    document.version += 1
    release_for_new_version(document)
    document.sha256, document.size, document.mime, document.source = sha256, len(data), mime, source
    document.status, document.progress, document.error = DocumentStatus.PENDING, 0, ""
    document.save()
    DocumentFile.objects.update_or_create(document=document, defaults={"data": data})
    if not retrying:  # the same bytes are already kept under the failed version
        _keep_version(document, data, user=user, note=note)
    if retrying:
        message = _("queued again after a failure")
    else:
        message = _("queued as version %(version)s") % {"version": document.version}
    return SubmitOutcome(name, "queued", message, document)


def _keep_version(document: Document, data: bytes, *, user, note: str) -> None:
    DocumentVersion.objects.create(
        document=document,
        version=document.version,
        data=data,
        sha256=document.sha256,
        size=len(data),
        created_by=user,
        note=note[:200],
    )


def restore_version(
    document: Document, version: int, *, user, enqueue: Callable[[int], None]
) -> SubmitOutcome:
    """Submit a kept version's bytes as the document's newest version.

    Raises DocumentVersion.DoesNotExist when the document has no such version.
    """
    kept = DocumentVersion.objects.get(document=document, version=version)
    return submit_document(
        document.kb,
        document.name,
        bytes(kept.data),
        enqueue=enqueue,
        source=document.source,
        user=user,
        note=f"restored from version {version}",
    )


def request_reingest(document: Document, *, enqueue: Callable[[int], None]) -> None:
    """Ingest the document's current bytes again as a new version."""
    with transaction.atomic():
        Document.objects.select_for_update().filter(pk=document.pk).first()
        document.refresh_from_db()
        document.version += 1
        document.status, document.progress, document.error = DocumentStatus.PENDING, 0, ""
        release_for_new_version(document)
        document.save(update_fields=[
            "version", "status", "progress", "error", "heartbeat_at", "running_job", "interruptions", "updated_at"
        ])
        transaction.on_commit(partial(enqueue, document.pk))


def delete_document(document: Document) -> None:
    """Delete a document with its chunks (and whatever else hangs off it)."""
    kb, document_id = document.kb, document.pk
    with transaction.atomic():
        document.delete()
        kb.bump_content_version([document_id])


# --- the pipeline -------------------------------------------------------------------------


@dataclass
class IngestionRun:
    """What the stages of one run share: the document version, its bytes and results so far."""

    document: Document
    version: int
    data: bytes
    params: ChunkingParams
    parsed: ParsedDocument | None = None
    parents: list[ParentDraft] = field(default_factory=list)
    stored: list[Chunk] = field(default_factory=list)  # parents first, then children
    child_ids: list[int] = field(default_factory=list)
    # What the embedding stage hands the indexing stage: (embedder name, float32 rows
    # aligned with `stored`), and the tokens of chunks carried over from the live version
    # (None where the chunk is new and its text is analysed at indexing).
    vectors: tuple[str, Any] | None = None
    tokens: list[str | None] = field(default_factory=list)
    embedded_chunks: int = 0
    reused_chunks: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Stage:
    name: str
    status: str  # the document status shown while the stage runs
    run: Callable[[IngestionRun], None]
    # It has no batch boundary inside and writes nothing, so a thread beats for it meanwhile.
    beats_meanwhile: bool = False


class Superseded(Exception):
    """A newer version of the document arrived while this one was being ingested."""


def parse_stage(run: IngestionRun) -> None:
    run.parsed = parse_document(run.document.name, run.data)


def chunk_stage(run: IngestionRun) -> None:
    run.parents = chunk_document(run.parsed, run.params)
    if not run.parents:
        raise ParseError("no text to index after parsing")


def store_stage(run: IngestionRun) -> None:
    """Write the version's parent and child chunks (not yet live), all or none."""
    document = run.document
    common = {"kb_id": document.kb_id, "document_id": document.pk, "version": run.version}
    with transaction.atomic():
        parents = Chunk.objects.bulk_create(
            [_chunk_row(draft, Chunk.PARENT, common) for draft in run.parents], batch_size=500
        )
        children = [
            _chunk_row(child, Chunk.CHILD, common, parent=row, section=draft)
            for row, draft in zip(parents, run.parents, strict=True)
            for child in draft.children
        ]
        children = Chunk.objects.bulk_create(children, batch_size=500)
    run.stored = [*parents, *children]
    run.child_ids = [row.pk for row in children]


def _chunk_row(draft, level: int, common: dict, *, parent=None, section=None) -> Chunk:
    section = section or draft
    return Chunk(
        **common,
        parent=parent,
        level=level,
        index=draft.index,
        text=draft.text,
        token_count=draft.token_count,
        section_index=section.section_index[:32],
        section_title=section.section_title[:500],
        chapter_level_1=section.chapter_level_1[:500],
        chapter_level_2=section.chapter_level_2[:500],
        tags=list(draft.tags),
        sha256=draft.sha256,
    )


CORE_STAGES: tuple[Stage, ...] = (
    Stage("parse", DocumentStatus.PARSING, parse_stage, beats_meanwhile=True),
    Stage("chunk", DocumentStatus.CHUNKING, chunk_stage, beats_meanwhile=True),
    Stage("store", DocumentStatus.CHUNKING, store_stage),
)
_STATUS_ORDER = [DocumentStatus.EMBEDDING, DocumentStatus.INDEXING]
_extra_stages: list[Stage] = []


def register_stage(stage: Stage) -> None:
    """Add an embedding or indexing stage after the core ones (retrieval registers its own)."""
    if stage.status not in _STATUS_ORDER:
        raise ValueError(f"extra stages run as embedding or indexing, not {stage.status}")
    if all(existing.name != stage.name for existing in _extra_stages):
        _extra_stages.append(stage)
        _extra_stages.sort(key=lambda s: _STATUS_ORDER.index(s.status))


def pipeline_stages() -> tuple[Stage, ...]:
    return CORE_STAGES + tuple(_extra_stages)


def chunking_params() -> ChunkingParams:
    return ChunkingParams(
        child_target_zh=settings.CHUNK_CHILD_TARGET_ZH,
        child_max_zh=settings.CHUNK_CHILD_MAX_ZH,
        child_target_en=settings.CHUNK_CHILD_TARGET_EN,
        child_max_en=settings.CHUNK_CHILD_MAX_EN,
        overlap_sentences=settings.CHUNK_OVERLAP_SENTENCES,
        parent_max_chars=settings.CHUNK_PARENT_MAX_CHARS,
    )


ProgressCallback = Callable[[Progress], None]


def _ignore_progress(progress: Progress) -> None:
    pass


def run_ingestion(
    document_id: int,
    *,
    on_progress: ProgressCallback = _ignore_progress,
    stages: Sequence[Stage] | None = None,
    params: ChunkingParams | None = None,
) -> IngestionJob | None:
    """Ingest a document's newest version; a no-op when it is already live, gone, or a live run has it."""
    document = Document.objects.select_related("kb").filter(pk=document_id).first()
    if document is None or (
        document.status == DocumentStatus.READY and document.live_version == document.version
    ):
        return None
    job = IngestionJob.objects.create(document=document, version=document.version, status=document.status)
    if not claim_document(document, job):
        # A duplicate delivery while the first is running: a row for it would never end.
        job.delete()
        log.info("document %s: another run is ingesting it; this one is skipped", document_id)
        return None
    run = IngestionRun(document, job.version, newest_bytes(document), params or chunking_params())
    _discard_unpublished_chunks(document)
    try:
        with beating(keep_claim(document.pk, job.pk)):
            _run_stages(run, job, stages or pipeline_stages(), on_progress)
            _publish(run, job, on_progress)
    except ParseError as error:
        _fail(run, job, str(error), on_progress)
    except Superseded:
        _finish_job(job, "failed", error=f"superseded by version {run.version + 1} or later")
        Chunk.objects.filter(document_id=document.pk, version=run.version).delete()
    except TRANSIENT_ERRORS as error:
        _finish_job(job, "failed", error=f"transient: {error}")
        raise
    except StopRequested:
        # The document stays in progress, which is what the next run looks for; that run
        # discards this one's unpublished chunks.
        _finish_job(job, "failed", error="interrupted: the process stopped; it runs again")
        raise
    except TakenOver:
        # This run went quiet for so long that a sweep judged it dead and queued another:
        # the newer run owns the version now, so this one takes back only its own rows.
        _finish_job(job, "failed", error="interrupted: another run took the document over")
        Chunk.objects.filter(pk__in=[chunk.pk for chunk in run.stored]).delete()
    except Exception as error:
        log.exception("ingestion of document %s failed", document_id)
        _fail(run, job, f"internal error ({type(error).__name__}); see the server log", on_progress)
    finally:
        release_claim(document.pk, job.pk)
    return job


def give_up_ingestion(document_id: int, message: str, *, on_progress: ProgressCallback) -> None:
    """Mark a document whose ingestion cannot finish as failed, if it is still in progress."""
    document = Document.objects.filter(pk=document_id, status__in=IN_PROGRESS).first()
    if document is None:
        return
    Document.objects.filter(pk=document.pk).update(status=DocumentStatus.FAILED, error=message, interruptions=0)
    on_progress(Progress(document.pk, document.kb_id, DocumentStatus.FAILED, "failed", 0, message))


def newest_bytes(document: Document) -> bytes:
    """The bytes of the document's newest version (b"" when none are stored)."""
    stored = DocumentFile.objects.filter(document=document).values_list("data", flat=True).first()
    return bytes(stored) if stored is not None else b""


def _discard_unpublished_chunks(document: Document) -> None:
    # Leftovers of an interrupted run (a crash or a retried task) would duplicate chunks.
    Chunk.objects.filter(document=document).exclude(version=document.live_version).delete()


def _run_stages(run, job, stages: Sequence[Stage], on_progress: ProgressCallback) -> None:
    for position, stage in enumerate(stages):
        at_batch_boundary()
        percent = round(100 * position / (len(stages) + 1))
        _enter_stage(run, job, stage, percent, on_progress)
        started = perf_counter()
        with beating_meanwhile(run.document.pk, job.pk) if stage.beats_meanwhile else nullcontext():
            stage.run(run)
        run.timings_ms[stage.name] = round((perf_counter() - started) * 1000, 3)


def _enter_stage(run, job, stage: Stage, percent: int, on_progress: ProgressCallback) -> None:
    now = timezone.now()
    updated = Document.objects.filter(pk=run.document.pk, version=run.version, running_job=job).update(
        status=stage.status, progress=percent, heartbeat_at=now, updated_at=now
    )
    if not updated:
        raise Superseded if _is_superseded(run) else TakenOver
    job.status, job.stage, job.percent = stage.status, stage.name, percent
    job.save(update_fields=["status", "stage", "percent"])
    on_progress(_progress(run, stage.status, stage.name, percent))


def _is_superseded(run: IngestionRun) -> bool:
    return Document.objects.filter(pk=run.document.pk).exclude(version=run.version).exists()


def _publish(run: IngestionRun, job: IngestionJob, on_progress: ProgressCallback) -> None:
    """Make the new version live and drop the old one's chunks, in one transaction."""
    started = perf_counter()
    with transaction.atomic():
        document = Document.objects.select_for_update().get(pk=run.document.pk)
        if document.version != run.version:
            raise Superseded
        if not holds_claim(document, job):
            raise TakenOver
        Chunk.objects.filter(document=document).exclude(version=run.version).delete()
        _mark_ready(document, run)
        document.kb.bump_content_version([document.pk])
    run.timings_ms["publish"] = round((perf_counter() - started) * 1000, 3)
    job.embedded_chunks, job.reused_chunks = run.embedded_chunks, run.reused_chunks
    _finish_job(job, DocumentStatus.READY, timings=run.timings_ms)
    run.document = document
    on_progress(_progress(run, DocumentStatus.READY, "ready", 100))


def _mark_ready(document: Document, run: IngestionRun) -> None:
    parsed = run.parsed
    tags: dict[str, None] = {}
    for parent in run.parents:
        tags.update(dict.fromkeys(parent.tags))
    document.live_version = run.version
    document.status, document.progress, document.error = DocumentStatus.READY, 100, ""
    document.interruptions = 0
    document.char_count = parsed.char_count
    document.parent_count = len(run.parents)
    document.chunk_count = len(run.child_ids)
    document.ingested_at = timezone.now()
    document.metadata = {
        **document.metadata,
        "title": parsed.title,
        "tags": list(tags)[:20],
        "scope": document.metadata.get("scope", ""),
        "sections": len(parsed.sections),
    }
    document.save()


def _fail(run: IngestionRun, job: IngestionJob, message: str, on_progress: ProgressCallback) -> None:
    document = run.document
    if document.live_version:
        message = f"{message} (version {document.live_version} still serves)"
    Chunk.objects.filter(document_id=document.pk, version=run.version).exclude(
        version=document.live_version
    ).delete()
    Document.objects.filter(pk=document.pk, version=run.version).update(
        status=DocumentStatus.FAILED, progress=0, error=message, interruptions=0, updated_at=timezone.now()
    )
    _finish_job(job, DocumentStatus.FAILED, error=message, timings=run.timings_ms)
    on_progress(_progress(run, DocumentStatus.FAILED, "failed", 0, error=message))


def _finish_job(job: IngestionJob, status: str, *, error: str = "", timings=None) -> None:
    job.status, job.error, job.finished_at = status, error, timezone.now()
    job.percent = 100 if status == DocumentStatus.READY else job.percent
    job.timings_ms = timings or job.timings_ms
    job.save()


def _progress(run: IngestionRun, status: str, stage: str, percent: int, *, error: str = "") -> Progress:
    document = run.document
    return Progress(
        document_id=document.pk,
        kb_id=document.kb_id,
        status=str(status),
        stage=stage,
        percent=percent,
        error=error,
        chunk_count=len(run.child_ids),
    )
