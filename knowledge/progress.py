"""Ingestion progress: one event shape, published to the knowledge base's websocket group."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from agentic_rag.background import notify_group


@dataclass(frozen=True)
class Progress:
    document_id: int
    kb_id: int
    status: str
    stage: str
    percent: int
    error: str = ""
    chunk_count: int = 0


def kb_group_name(kb_id: int) -> str:
    return f"kb-{kb_id}"


def publish_progress(progress: Progress) -> None:
    """Tell the KB's websocket listeners how a document's ingestion is going."""
    notify_group(kb_group_name(progress.kb_id), {"type": "ingest.progress", **asdict(progress)})
