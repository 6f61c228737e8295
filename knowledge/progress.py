"""Ingestion progress: one event shape, published to the knowledge base's websocket group."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from django.core.cache import cache

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


@dataclass(frozen=True)
class BackgroundIndexing:
    """A KB's vectors being moved to another embedder (the KB page shows it).

    `step` is "loading" (the model) or "embedding". While documents of the KB are still
    being ingested, chunks the run has not counted yet will join it: `total_final` is False
    and the page shows the count done without a percentage, which could only go backwards.
    """

    kb_id: int
    embedder: str
    done: int
    total: int
    step: str = "embedding"
    total_final: bool = True

    @property
    def percent(self) -> int | None:
        if not (self.total and self.total_final):
            return None
        return min(100, round(100 * self.done / self.total))


def _background_key(kb_id: int) -> str:
    return f"kb-background-indexing:{kb_id}"


def publish_background_indexing(state: BackgroundIndexing | None, kb_id: int) -> None:
    """Record (None: clear) a KB's background indexing and tell its page.

    The cache holds it for pages rendered meanwhile: Redis in the full stack, so every
    process sees what a worker is doing; the process's memory in the embedded default, where
    the task runs in the server's own process.
    """
    if state is None:
        cache.delete(_background_key(kb_id))
    else:
        cache.set(_background_key(kb_id), asdict(state), timeout=6 * 3600)
    notify_group(kb_group_name(kb_id), {"type": "kb.background", "kb_id": kb_id})


def background_indexing(kb_id: int) -> BackgroundIndexing | None:
    stored = cache.get(_background_key(kb_id))
    return BackgroundIndexing(**stored) if stored else None
