"""The embedded search backend: per-KB numpy vectors and BM25 postings in this process.

A snapshot (knowledge.memory_snapshot) is built lazily from the database and tagged with
the KB's content_version and embedder. Every change bumps the version and records which
documents it touched (ContentChange), so every process notices on its next query (one
indexed lookup) and replaces just those documents' rows. It rebuilds only when it cannot
tell what changed (first load, another embedder, a change log pruned past its version, a
bump that named no documents) or when the change is large (UpdatePolicy).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from time import perf_counter

import numpy as np
from django.db import connection

from .memory_snapshot import Snapshot, UpdatePolicy, build_snapshot, compacted, load_documents, with_documents
from .models import ContentChange, KnowledgeBase
from .search import ChunkInfo, Hit, Placed, most_tagged

log = logging.getLogger(__name__)

Version = tuple[int, str]  # (content_version, embedder)
Job = Callable[[], None]

_VERSION_SQL = "SELECT content_version, embedder FROM {table} WHERE id = %s"


def current_version(kb_id: int) -> Version:
    """The KB's (content_version, embedder), read with one indexed lookup.

    Every query asks, so this skips the ORM's query building (~0.3 ms a call against
    ~0.03 ms for the statement itself).
    """
    with connection.cursor() as cursor:
        cursor.execute(_VERSION_SQL.format(table=KnowledgeBase._meta.db_table), [kb_id])
        row = cursor.fetchone()
    if row is None:
        raise KnowledgeBase.DoesNotExist(f"no knowledge base {kb_id}")
    return int(row[0]), str(row[1])


def _top(ids: np.ndarray, scores: np.ndarray, top_k: int) -> list[Hit]:
    """The top_k finite scores, best first; equal scores go to the lower chunk id.

    By id, not by row: a snapshot that took changes holds its rows in another order than
    a fresh build, and both must rank alike.
    """
    if top_k <= 0 or scores.size == 0:
        return []
    top_k = min(top_k, scores.size)
    kth = np.partition(scores, scores.size - top_k)[scores.size - top_k]
    above, ties = np.flatnonzero(scores > kth), np.flatnonzero(scores == kth)
    need = top_k - above.size  # at least 1: kth is itself among the top_k
    if ties.size > need:
        ties = ties[np.argpartition(ids[ties], need - 1)[:need]]
    best = np.concatenate((above, ties))
    best = best[np.lexsort((ids[best], -scores[best]))]
    return [(int(ids[i]), float(scores[i])) for i in best if np.isfinite(scores[i])]


_compaction_pool: ThreadPoolExecutor | None = None
_compaction_pool_lock = threading.Lock()


def run_in_background(job: Job) -> None:
    """Run a compaction on this process's one compaction thread, off every query's path."""
    global _compaction_pool
    with _compaction_pool_lock:
        if _compaction_pool is None:
            _compaction_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-compaction")
    _compaction_pool.submit(job)


class MemoryBackend:
    """Search backend over in-process snapshots, one per KB.

    `run_compaction` runs a job that compacts a snapshot (default: on a background
    thread; tests pass one that runs it at once).
    """

    def __init__(
        self,
        *,
        policy: UpdatePolicy = UpdatePolicy(),
        run_compaction: Callable[[Job], object] = run_in_background,
    ) -> None:
        self._snapshots: dict[int, Snapshot] = {}
        self._lock = threading.Lock()
        self._pinned = threading.local()
        self._policy = policy
        self._run_compaction = run_compaction
        self._compacting: set[int] = set()  # KBs with a compaction queued or running
        # How snapshots were made: "rebuilt", "changed" (in place) or "compacted".
        self.updates: Counter[str] = Counter()

    @contextmanager
    def pinned(self, kb: KnowledgeBase) -> Iterator[None]:
        """Check the KB's version once and serve every call inside from that snapshot."""
        pins = self._pinned.__dict__.setdefault("by_kb", {})
        outer = pins.get(kb.pk)
        pins[kb.pk] = outer or self.snapshot(kb)
        try:
            yield
        finally:
            if outer is None:
                pins.pop(kb.pk, None)

    def snapshot(self, kb: KnowledgeBase) -> Snapshot:
        pinned = self._pinned.__dict__.get("by_kb", {}).get(kb.pk)
        if pinned is not None:
            return pinned
        # Read the version before the entries: a change landing in between makes the
        # snapshot look older than it is (its documents applied once more), never newer.
        version = current_version(kb.pk)
        snapshot = self._snapshots.get(kb.pk)
        if snapshot is not None and snapshot.version == version:
            return snapshot
        with self._lock:
            snapshot = self._snapshots.get(kb.pk)
            if snapshot is not None and snapshot.version[0] > version[0]:
                # Another thread applied a change newer than the version this one read.
                version = current_version(kb.pk)
            if snapshot is None or snapshot.version != version:
                snapshot = self._snapshots[kb.pk] = self._updated(kb, snapshot, version)
        self._compact_if_worth_it(kb.pk)
        return snapshot

    def _updated(self, kb: KnowledgeBase, held: Snapshot | None, version: Version) -> Snapshot:
        """The KB's snapshot at `version`: `held` with the changes since, or else rebuilt."""
        started = perf_counter()
        changed = self._with_changes(kb, held, version) if held is not None else "first load"
        if isinstance(changed, Snapshot):
            self.updates["changed"] += 1
            log.debug("applied KB %s's changes from version %s to %s in %.1f ms",
                      kb.pk, held.version[0], version[0], (perf_counter() - started) * 1000)
            return changed
        kb.embedder = version[1]
        snapshot = build_snapshot(kb, version)
        self.updates["rebuilt"] += 1
        log.info("rebuilt the index of KB %s at version %s in %.2f s (%s)",
                 kb.pk, version[0], perf_counter() - started, changed)
        return snapshot

    def _with_changes(self, kb: KnowledgeBase, held: Snapshot, version: Version) -> Snapshot | str:
        """`held` with the documents changed since its version replaced, or why it cannot be."""
        if held.version[1] != version[1]:
            return "another embedder"
        documents = ContentChange.objects.documents_changed(kb.pk, since=held.version[0], until=version[0])
        if documents is None:
            return f"no record of what changed from version {held.version[0]}"
        limit = self._policy.max_delta_rows(len(held.chunks))
        removed = sum(len(held.by_document.get(document, ())) for document in documents)
        rows = load_documents(kb, documents, limit=limit - removed + 1) if removed <= limit else []
        if removed + len(rows) > limit:
            return f"more than {limit} chunks changed"
        return with_documents(held, version, documents, rows)

    def _compact_if_worth_it(self, kb_id: int) -> None:
        with self._lock:
            snapshot = self._snapshots.get(kb_id)
            if kb_id in self._compacting or snapshot is None or not self._policy.wants_compaction(snapshot):
                return
            self._compacting.add(kb_id)
        self._run_compaction(partial(self._compact, kb_id))

    def _compact(self, kb_id: int) -> None:
        """Compact the KB's newest snapshot, and again if a change replaced it meanwhile."""
        try:
            while True:
                with self._lock:
                    snapshot = self._snapshots.get(kb_id)
                    if snapshot is None or not self._policy.wants_compaction(snapshot):
                        self._compacting.discard(kb_id)
                        return
                started = perf_counter()
                compact = compacted(snapshot)
                with self._lock:
                    if self._snapshots.get(kb_id) is snapshot:
                        self._snapshots[kb_id] = compact
                        self.updates["compacted"] += 1
                        self._compacting.discard(kb_id)
                        log.info("compacted the index of KB %s in %.2f s", kb_id, perf_counter() - started)
                        return
                # A change replaced the snapshot meanwhile: compact the newer one.
        except Exception:
            log.exception("compacting the index of KB %s failed", kb_id)
            with self._lock:
                self._compacting.discard(kb_id)

    def keyword(self, kb, tokens: Sequence[str], *, level: int, top_k: int, only=None) -> list[Hit]:
        index = self.snapshot(kb).levels.get(level)
        if index is None or not tokens:
            return []
        hits = index.bm25.search(tokens, top_k, allowed=index.mask(only), tiebreak=index.tiebreak)
        return [(int(index.ids[row]), score) for row, score in hits]

    def vector(self, kb, query: np.ndarray, *, level: int, top_k: int, only=None) -> list[Hit]:
        index = self.snapshot(kb).levels.get(level)
        if index is None or not np.any(query):
            return []  # a zero vector ranks nothing; its arbitrary order would still earn RRF credit
        scores = index.vectors.similarities(query.astype(np.float32, copy=False))
        mask = index.mask(only)
        if index.bm25.n_dead:
            mask = index.alive if mask is None else mask & index.alive
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        return _top(index.ids, scores, top_k)

    def chunks(self, kb, chunk_ids: Collection[int]) -> dict[int, ChunkInfo]:
        known = self.snapshot(kb).chunks
        return {chunk_id: known[chunk_id] for chunk_id in chunk_ids if chunk_id in known}

    def tagged(self, kb, keywords: Sequence[str], *, limit: int, max_share: float | None = None) -> list[int]:
        snapshot = self.snapshot(kb)
        most = most_tagged(max_share, len(snapshot.chunks))
        matches: Counter[int] = Counter()
        for keyword in {k.lower() for k in keywords if k}:
            # A substring match, as SQL's LIKE '%keyword%'; one count per matching tag.
            found = Counter(chunk_id for tag, ids in snapshot.tags.items() if keyword in tag for chunk_id in ids)
            if most is None or len(found) <= most:
                matches.update(found)
        return sorted(matches, key=lambda chunk_id: (-matches[chunk_id], chunk_id))[:limit]

    def in_chapter(self, kb, chapter_level_1: str, chapter_level_2: str) -> list[int]:
        return list(self.snapshot(kb).chapters.get((chapter_level_1, chapter_level_2), ()))

    def cosines(self, kb, query: np.ndarray, chunk_ids: Sequence[int]) -> np.ndarray:
        snapshot = self.snapshot(kb)
        scores = np.zeros(len(chunk_ids), dtype=np.float32)
        by_level: dict[int, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        for position, chunk_id in enumerate(chunk_ids):
            if chunk_id in snapshot.rows:
                level, row = snapshot.rows[chunk_id]
                by_level[level][0].append(position)
                by_level[level][1].append(row)
        for level, (positions, rows) in by_level.items():
            scores[positions] = snapshot.levels[level].vectors.take(rows) @ query
        return scores

    def neighbours(self, kb, chunks: Sequence[Placed]) -> Mapping[tuple[int, int, int], str]:
        by_position = self.snapshot(kb).by_position
        wanted = {(c.doc_id, c.level, c.index + step) for c in chunks for step in (-1, 1)}
        return {key: by_position[key] for key in wanted if key in by_position}

    def size(self, kb) -> dict[str, int]:
        snapshot = self.snapshot(kb)
        return {"chunks": len(snapshot.chunks), "bytes": snapshot.nbytes}

    def has_entries(self, kb) -> bool:
        return bool(self.snapshot(kb).chunks)

    def embedder_name(self, kb) -> str:
        return self.snapshot(kb).version[1]
