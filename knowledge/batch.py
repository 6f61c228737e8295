"""Ingest files from disk: what `manage.py ingest`, the demo set-up and the benchmark share."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .ingest import ProgressCallback, check_upload, run_ingestion, submit_document
from .models import Document, DocumentStatus, IngestionJob, KnowledgeBase
from .search import refresh_planner_statistics


@dataclass(frozen=True)
class FileToIngest:
    path: str  # as the user gave it, for reports
    name: str  # the document name: relative to the folder it was found in
    file: Path | None  # None when the path does not exist


@dataclass(frozen=True)
class FileResult:
    path: str
    status: Literal["ingested", "unchanged", "failed"]
    error: str = ""
    document_id: int | None = None
    job: IngestionJob | None = None


def collect_files(paths: Iterable[str], *, recursive: bool) -> Iterator[FileToIngest]:
    """Expand files and folders into the files to ingest, hidden files skipped."""
    for given in paths:
        path = Path(given)
        if path.is_file():
            yield FileToIngest(given, path.name, path)
        elif path.is_dir():
            pattern = "**/*" if recursive else "*"
            for found in sorted(path.glob(pattern)):
                relative = found.relative_to(path)
                if found.is_file() and not any(p.startswith(".") for p in relative.parts):
                    yield FileToIngest(str(found), relative.as_posix(), found)
        else:
            yield FileToIngest(given, path.name, None)


def ingest_file(
    kb: KnowledgeBase,
    item: FileToIngest,
    *,
    on_progress: ProgressCallback,
    user=None,
) -> FileResult:
    """Submit one file and ingest it in this process, with the same code as the Celery task."""
    if item.file is None:
        return FileResult(item.path, "failed", "no such file or directory")
    try:
        error = check_upload(item.name, item.file.stat().st_size)
        data = b"" if error else item.file.read_bytes()
    except OSError as exc:
        return FileResult(item.path, "failed", f"cannot read the file: {exc.strerror or exc}")
    if error:
        return FileResult(item.path, "failed", error)
    # Ingest here rather than enqueue: the command shows progress and waits anyway.
    outcome = submit_document(kb, item.name, data, enqueue=_ingested_below, source=item.path, user=user)
    if outcome.status == "rejected":
        return FileResult(item.path, "failed", outcome.message)
    if outcome.status == "unchanged":
        return FileResult(item.path, "unchanged", document_id=outcome.document.pk)
    job = run_ingestion(outcome.document.pk, on_progress=on_progress)
    document = Document.objects.get(pk=outcome.document.pk)
    if document.status == DocumentStatus.READY:
        return FileResult(item.path, "ingested", document_id=document.pk, job=job)
    return FileResult(item.path, "failed", document.error or document.status, document.pk, job)


def _ingested_below(document_id: int) -> None:
    pass


def ingest_files(
    kb: KnowledgeBase,
    items: list[FileToIngest],
    *,
    on_progress: ProgressCallback,
    on_file: Callable[[int, FileToIngest], None] = lambda position, item: None,
    user=None,
) -> list[FileResult]:
    """Ingest each file in turn; one file's failure never stops the batch."""
    results = []
    for position, item in enumerate(items):
        on_file(position, item)
        results.append(ingest_file(kb, item, on_progress=on_progress, user=user))
    if len(items) > 1:
        refresh_planner_statistics()
    return results
