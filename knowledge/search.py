"""The search backend contract: keyword and vector legs over a KB's live chunks.

Two backends keep it: `memory_index.MemoryBackend` (embedded default: per-process numpy
and BM25 indexes, updated with the changed documents when the KB's content_version
moves) and `pg_search.PgBackend` (full stack: pgvector HNSW and a postings index in SQL; no
process holds an index).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from time import perf_counter
from typing import Protocol, TypeVar

import numpy as np
from django.db import connection
from django.db.models import F, Q, QuerySet, Subquery

from .candidates import Candidate
from .models import Chunk, KnowledgeBase, SearchEntry

log = logging.getLogger(__name__)

Hit = tuple[int, float]  # (chunk id, score), best first
T = TypeVar("T")


class Placed(Protocol):
    """Where a chunk sits: a ChunkInfo or a Candidate."""

    doc_id: int
    level: int
    index: int


@dataclass(frozen=True)
class ChunkInfo:
    """What a candidate needs to know about its chunk, loaded once."""

    chunk_id: int
    doc_id: int
    doc_name: str
    text: str
    level: int
    parent_id: int | None
    index: int
    section_index: str
    section_title: str
    chapter_level_1: str
    chapter_level_2: str
    tags: tuple[str, ...]
    scope: str
    tokens: str  # the search tokens, space-separated, as indexed
    doc_title: str = ""  # its document's title (its Markdown heading or the parser's)

    def candidate(self, score: float = 0.0, source: str = "") -> Candidate:
        return Candidate(
            chunk_id=self.chunk_id,
            doc_id=self.doc_id,
            doc_name=self.doc_name,
            text=self.text,
            level=self.level,
            parent_id=self.parent_id,
            index=self.index,
            section_index=self.section_index,
            section_title=self.section_title,
            chapter_level_1=self.chapter_level_1,
            chapter_level_2=self.chapter_level_2,
            tags=self.tags,
            metadata={"scope": self.scope} if self.scope else {},
            tokens=self.tokens,
            doc_title=self.doc_title,
            score=score,
            scores={source: score} if source else {},
            sources={source} if source else set(),
        )


class SearchBackend(Protocol):
    def keyword(
        self, kb: KnowledgeBase, tokens: Sequence[str], *, level: int, top_k: int,
        only: Collection[int] | None = None,
    ) -> list[Hit]: ...

    def vector(
        self, kb: KnowledgeBase, query: np.ndarray, *, level: int, top_k: int,
        only: Collection[int] | None = None,
    ) -> list[Hit]: ...

    def chunks(self, kb: KnowledgeBase, chunk_ids: Collection[int]) -> dict[int, ChunkInfo]: ...

    def tagged(
        self, kb: KnowledgeBase, keywords: Sequence[str], *, limit: int, max_share: float | None = None,
    ) -> list[int]:
        """Chunk ids whose tags contain one of the keywords (LIKE), most matches first.

        With `max_share`, a keyword found in the tags of more than that share of the KB's
        chunks (and of more than MIN_GENERAL_TAGGED) is a general word, not a tag worth
        matching, and is left out.
        """
        ...

    def in_chapter(self, kb: KnowledgeBase, chapter_level_1: str, chapter_level_2: str) -> list[int]: ...

    def cosines(self, kb: KnowledgeBase, query: np.ndarray, chunk_ids: Sequence[int]) -> np.ndarray: ...

    def neighbours(self, kb: KnowledgeBase, chunks: Sequence[Placed]) -> Mapping[tuple[int, int, int], str]:
        """Texts of the chunks right before and after each given one, keyed (doc, level, index)."""
        ...

    def size(self, kb: KnowledgeBase) -> dict[str, int]:
        """Chunks searchable and bytes this process holds for the KB."""
        ...

    def has_entries(self, kb: KnowledgeBase) -> bool:
        """Whether the KB has anything to search (cheaper than counting it)."""
        ...

    def embedder_name(self, kb: KnowledgeBase) -> str:
        """The embedder the KB's vectors were made with ("" before its first document)."""
        ...


# Below this many tagged chunks a keyword is never "general": in a KB of a few dozen
# chunks a 5% share would be one chunk, and every tag would count as a general word.
MIN_GENERAL_TAGGED = 3


def most_tagged(max_share: float | None, chunks: int) -> float | None:
    """The most chunks a keyword may tag before it counts as a general word (None: no cap)."""
    return None if max_share is None else max(MIN_GENERAL_TAGGED, max_share * chunks)


def pinned(backend: SearchBackend, kb: KnowledgeBase) -> AbstractContextManager:
    """Let a backend serve one query's many calls from one view of the KB, if it can.

    The embedded backend then checks the KB's content_version once per query instead of
    once per call; a backend without `pinned` (PostgreSQL reads live rows) needs nothing.
    """
    pin = getattr(backend, "pinned", None)
    return pin(kb) if pin is not None else nullcontext()


def alongside(backend: SearchBackend, kb: KnowledgeBase, work: Callable[[], T]) -> Callable[[], T] | None:
    """Start `work` beside the caller's next steps if the backend can; call the result for its value.

    None when the backend runs everything in the caller (the embedded one scores in memory).
    """
    start = getattr(backend, "alongside", None)
    return start(kb, work) if start is not None else None


def live_entries(kb: KnowledgeBase) -> QuerySet:
    """The KB's search entries under its embedder, for live chunks only."""
    # The embedder comes from the KB row, not the object: one loaded before the first
    # ingestion still says "".
    current_embedder = KnowledgeBase.objects.filter(pk=kb.pk).values("embedder")[:1]
    return SearchEntry.objects.filter(kb=kb, embedder=Subquery(current_embedder)).filter(
        chunk__version=F("chunk__document__live_version")
    )


def kb_mentions(kb: KnowledgeBase, name: str) -> bool:
    """Whether a live chunk of the KB, its section title or its document's name holds name (case
    aside): one indexed scan of the KB's chunks, stopped at the first that does."""
    live = Chunk.objects.filter(kb=kb, version=F("document__live_version"))
    return live.filter(
        Q(text__icontains=name) | Q(section_title__icontains=name) | Q(document__name__icontains=name)
    ).exists()


def live_entries_of(kb: KnowledgeBase, documents: Collection[int]) -> QuerySet:
    """`live_entries` of some of the KB's documents, found from the documents' chunks.

    Filtered on the entry's own KB column, SQLite scans all the KB's entries once there
    are two or more documents (220 ms for 8 documents at 100k chunks, against 17 ms).
    """
    current_embedder = KnowledgeBase.objects.filter(pk=kb.pk).values("embedder")[:1]
    return SearchEntry.objects.filter(
        chunk__document_id__in=list(documents), chunk__document__kb=kb, embedder=Subquery(current_embedder)
    ).filter(chunk__version=F("chunk__document__live_version"))


CHUNK_FIELDS = (
    "chunk_id", "chunk__document_id", "chunk__document__name", "chunk__text", "level", "chunk__parent_id",
    "chunk__index", "chunk__section_index", "chunk__section_title", "chunk__chapter_level_1",
    "chunk__chapter_level_2", "chunk__tags", "chunk__document__metadata", "tokens",
)


def chunk_info(row: Sequence) -> ChunkInfo:
    """Build a ChunkInfo from a `values_list(*CHUNK_FIELDS)` row."""
    (chunk_id, doc_id, doc_name, text, level, parent_id, index, section_index, section_title,
     chapter_1, chapter_2, tags, metadata, tokens) = row
    metadata = metadata or {}
    return ChunkInfo(
        chunk_id, doc_id, doc_name, text, level, parent_id, index, section_index, section_title,
        chapter_1, chapter_2, tuple(tags or ()), str(metadata.get("scope", "")), tokens or "",
        # One string per title, not one per chunk: an index holds every chunk's info.
        sys.intern(str(metadata.get("title") or "")),
    )


def best_of(hit_lists: Sequence[Sequence[Hit]], top_k: int) -> list[Hit]:
    """Merge hit lists (a query's variants), keeping each chunk's best score."""
    if len(hit_lists) == 1:
        return list(hit_lists[0])[:top_k]
    best: dict[int, float] = {}
    for hits in hit_lists:
        for chunk_id, score in hits:
            best[chunk_id] = max(score, best.get(chunk_id, score))
    return sorted(best.items(), key=lambda hit: -hit[1])[:top_k]


def refresh_planner_statistics() -> None:
    """After a bulk load on PostgreSQL, let the planner see the new rows at once.

    Until autovacuum analyses them (if it runs at all), the planner takes a fresh KB's rows
    for none: it once read every row of a KB to match a few terms (800 ms instead of 20 for
    a keyword query on cranfield-beir right after its import), and still prices the vector
    leg's joins blind.
    """
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE knowledge_searchentry, knowledge_chunk, knowledge_document")
        # VACUUM also marks the new postings' pages all-visible, so the keyword leg reads them
        # from the index alone (100k generated chunks: p50 80 ms before, 31 ms after). It
        # cannot run inside a transaction; there ANALYZE at least gives the planner counts.
        maintain = "ANALYZE" if connection.in_atomic_block else "VACUUM (ANALYZE)"
        cursor.execute(f"{maintain} knowledge_searchposting")


@contextmanager
def hnsw_index_built_after(dims: int, *, expected_rows: int) -> Iterator[None]:
    """Bulk-load the first vectors of `dims` dimensions without their HNSW index, then build it.

    Inserting rows into the index one by one took 3/4 of a 3k-chunk synthetic load here
    (42.6 s against 10.5 s plus a 7 s build). Only when no row of that dimension exists yet:
    dropping an index others search would slow their queries for the whole load. And only
    outside a transaction: PostgreSQL builds no index on a table with pending trigger events.
    """
    index = f"knowledge_searchentry_hnsw_{int(dims)}"
    definition = None
    is_alone = connection.vendor == "postgresql" and not connection.in_atomic_block
    if is_alone and not SearchEntry.objects.filter(dims=dims).exists():
        with connection.cursor() as cursor:
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [index])
            row = cursor.fetchone()
            if row is not None:
                definition = row[0]
                cursor.execute(f'DROP INDEX "{index}"')
    try:
        yield
    finally:
        if definition is not None:
            # The graph builds several times faster when it fits in maintenance_work_mem (a
            # 1024-d row takes about 4.4 kB in it); capped, for machines smaller than this one.
            memory_mb = min(4096, max(64, expected_rows * (dims * 4 + 300) // 1_000_000 * 5 // 4))
            started = perf_counter()
            with connection.cursor() as cursor:
                cursor.execute(f"SET maintenance_work_mem = '{memory_mb}MB'")
                cursor.execute(definition)
                cursor.execute("RESET maintenance_work_mem")
            log.info("built %s after the load in %.1f s (maintenance_work_mem %s MB)", index, perf_counter() - started, memory_mb)


_backend: SearchBackend | None = None


def get_backend() -> SearchBackend:
    """The backend this deployment's database calls for: pgvector on PostgreSQL, else memory."""
    global _backend
    if _backend is None:
        if connection.vendor == "postgresql":
            from .pg_search import PgBackend

            _backend = PgBackend()
        else:
            from .memory_index import MemoryBackend

            _backend = MemoryBackend()
    return _backend
