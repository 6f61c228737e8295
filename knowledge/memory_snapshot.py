"""A KB's searchable chunks in memory: built from the database, then changed by document.

A Snapshot never changes once made, since queries on other threads may be reading it. A
change makes a new snapshot that shares the old one's large arrays: the rows of changed
documents become dead rows that no query finds, their new rows go into a new vector block
and postings segment, the per-row arrays (a few bytes a row) are copied, and the lookups
by chunk take a layer of changes over the old ones. `compacted` drops the dead rows and
joins the blocks again, off the query path.
"""

from __future__ import annotations

import sys
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from agentic_rag.vectors import parse_vector

from .bm25 import BM25Index
from .layered import changed, flattened
from .models import KnowledgeBase
from .search import CHUNK_FIELDS, ChunkInfo, chunk_info, live_entries, live_entries_of
from .vector_rows import VectorRows

Row = tuple[ChunkInfo, np.ndarray]  # a live chunk and its vector, as loaded


@dataclass(frozen=True)
class UpdatePolicy:
    """When a change is applied to a snapshot in place, and when it is rebuilt or compacted."""

    # A change to more than this share of the rows is rebuilt instead: it would cost about
    # as much, and leave that many dead rows to scan until compacted.
    max_delta_share: float = 0.2
    # ... but not below this many rows, or every document added to a small KB would
    # rebuild it (8 documents, 1000 rows, took 70 ms at 10k and at 100k chunks; a
    # rebuild at 10k, 0.9 to 1.1 s).
    min_delta_rows: int = 1000
    # Dead rows still cost their scan and memory; many segments, a little per query each.
    compact_dead_share: float = 0.2
    compact_segments: int = 16

    def max_delta_rows(self, rows: int) -> int:
        return max(self.min_delta_rows, int(self.max_delta_share * rows))

    def wants_compaction(self, snapshot: Snapshot) -> bool:
        return any(
            level.bm25.n_dead > self.compact_dead_share * level.bm25.n_rows
            or len(level.bm25.segments) > self.compact_segments
            for level in snapshot.levels.values()
        )


@dataclass(frozen=True, eq=False)
class LevelIndex:
    """One chunk level (parents or children) of a KB: row i is chunk ids[i] while it is alive."""

    ids: np.ndarray  # int64; a dead row keeps the id it had
    vectors: VectorRows  # L2-normalised
    bm25: BM25Index  # knows which rows are alive

    @classmethod
    def build(cls, infos: Sequence[ChunkInfo], vectors: np.ndarray) -> LevelIndex:
        ids = _ids(infos)
        return cls(ids, VectorRows.of(vectors), BM25Index.build_from_strings(info.tokens for info in infos))

    @classmethod
    def of_rows(cls, rows: Sequence[Row]) -> LevelIndex:
        return cls.build([info for info, _ in rows], np.vstack([vector for _, vector in rows]))

    @property
    def alive(self) -> np.ndarray:
        return self.bm25.alive

    @cached_property
    def tiebreak(self) -> np.ndarray | None:
        """The ids to break equal scores by, None while rows ascend by id (a fresh build)."""
        return None if bool(np.all(self.ids[1:] > self.ids[:-1])) else self.ids

    def mask(self, only: Collection[int] | None) -> np.ndarray | None:
        if only is None:
            return None
        return np.isin(self.ids, np.fromiter(only, np.int64, len(only)))

    def changed(self, removed: dict[int, str], added: Sequence[Row]) -> LevelIndex:
        """Drop the rows `removed` names (row -> its indexed tokens), then append `added`."""
        bm25 = self.bm25.without(removed).appended(info.tokens for info, _ in added)
        if not added:
            return LevelIndex(self.ids, self.vectors, bm25)
        ids = np.concatenate((self.ids, _ids([info for info, _ in added])))
        ids.flags.writeable = False
        return LevelIndex(ids, self.vectors.appended(np.vstack([vector for _, vector in added])), bm25)

    def compacted(self) -> LevelIndex:
        """The same level without its dead rows, in one block and one segment."""
        alive = self.alive
        ids = self.ids[alive]
        ids.flags.writeable = False
        return LevelIndex(ids, self.vectors.compacted(alive), self.bm25.compacted())

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.vectors.nbytes + self.bm25.nbytes


@dataclass(frozen=True, eq=False)
class Snapshot:
    """Everything the embedded backend searches in one KB, as of one (content_version, embedder)."""

    version: tuple[int, str]
    levels: dict[int, LevelIndex]
    # Live chunks only, as every lookup below. The per-chunk lookups are plain dicts in a
    # fresh snapshot and LayeredDicts after a change, so a change copies only what it
    # changes; the per-key ones are plain dicts of ascending ids, whose (fewer) keys a
    # change copies.
    chunks: Mapping[int, ChunkInfo]
    rows: Mapping[int, tuple[int, int]]  # chunk id -> (level, row)
    tags: dict[str, list[int]]  # lowercased tag -> chunk ids
    chapters: dict[tuple[str, str], list[int]]
    by_position: Mapping[tuple[int, int, int], str]  # (doc, level, index) -> text
    by_document: dict[int, list[int]]  # doc id -> chunk ids

    @cached_property
    def nbytes(self) -> int:
        texts = sum(sys.getsizeof(info.text) for info in self.chunks.values())
        return texts + sum(level.nbytes for level in self.levels.values())


def build_snapshot(kb: KnowledgeBase, version: tuple[int, str]) -> Snapshot:
    """Load the KB's live entries and index them by level.

    Rows stream from the database in batches and vectors are packed into float32 blocks
    as they come, so the peak stays near the size of the finished index.
    """
    infos: list[ChunkInfo] = []
    blocks: dict[int, _VectorBlocks] = defaultdict(_VectorBlocks)
    entries = live_entries(kb).order_by("chunk_id").values_list(*CHUNK_FIELDS, "embedding")
    for row in entries.iterator(chunk_size=2000):
        info = chunk_info(row[:-1])
        infos.append(info)
        blocks[info.level].add(parse_vector(row[-1]))
    levels = {
        level: LevelIndex.build([info for info in infos if info.level == level], vectors.matrix())
        for level, vectors in blocks.items()
    }
    chunks = {info.chunk_id: info for info in infos}
    return Snapshot(version, levels, chunks, _positions(levels), **_lookups(infos))


def load_documents(kb: KnowledgeBase, documents: Collection[int], *, limit: int) -> list[Row]:
    """The live entries of some documents of the KB, in chunk order; at most `limit` of them."""
    rows = live_entries_of(kb, documents).order_by("chunk_id").values_list(*CHUNK_FIELDS, "embedding")[:limit]
    return [(chunk_info(row[:-1]), parse_vector(row[-1])) for row in rows]


class _VectorBlocks:
    """Vectors packed into float32 blocks of _BLOCK rows as they arrive."""

    _BLOCK = 4096

    def __init__(self) -> None:
        self.blocks: list[np.ndarray] = []
        self.pending: list[np.ndarray] = []

    def add(self, vector: np.ndarray) -> None:
        self.pending.append(vector)
        if len(self.pending) == self._BLOCK:
            self._pack()

    def _pack(self) -> None:
        if self.pending:
            self.blocks.append(np.vstack(self.pending).astype(np.float32, copy=False))
            self.pending = []

    def matrix(self) -> np.ndarray:
        self._pack()
        return np.concatenate(self.blocks) if len(self.blocks) > 1 else self.blocks[0]


def with_documents(
    snapshot: Snapshot, version: tuple[int, str], documents: Collection[int], rows: Sequence[Row]
) -> Snapshot:
    """The snapshot with the chunks of `documents` replaced by `rows`, their live chunks now.

    A document with no rows was deleted (or has nothing live). Rows are in chunk order.
    """
    gone = [snapshot.chunks[chunk_id] for doc in documents for chunk_id in snapshot.by_document.get(doc, ())]
    gone_ids = [info.chunk_id for info in gone]
    levels, positions = _changed_levels(snapshot, gone, rows)
    chunks = changed(snapshot.chunks, gone_ids, {info.chunk_id: info for info, _ in rows})
    lookups = _changed_lookups(snapshot, gone, [info for info, _ in rows])
    return Snapshot(version, levels, chunks, changed(snapshot.rows, gone_ids, positions), **lookups)


def _changed_levels(
    snapshot: Snapshot, gone: Sequence[ChunkInfo], rows: Sequence[Row]
) -> tuple[dict[int, LevelIndex], dict[int, tuple[int, int]]]:
    """The levels with the `gone` chunks' rows dead and `rows` appended; where those rows went."""
    levels = snapshot.levels.copy()
    positions: dict[int, tuple[int, int]] = {}
    for level in sorted({info.level for info in gone} | {info.level for info, _ in rows}):
        removed = {snapshot.rows[info.chunk_id][1]: info.tokens for info in gone if info.level == level}
        new = [row for row in rows if row[0].level == level]
        held = levels.get(level)
        start = held.bm25.n_rows if held else 0
        levels[level] = held.changed(removed, new) if held else LevelIndex.of_rows(new)
        positions.update({info.chunk_id: (level, start + i) for i, (info, _) in enumerate(new)})
    return levels, positions


def compacted(snapshot: Snapshot) -> Snapshot:
    """The same snapshot without dead rows: each level in one vector block and one postings segment."""
    levels = {level: index.compacted() for level, index in snapshot.levels.items()}
    return replace(snapshot, levels=levels, rows=_positions(levels), chunks=flattened(snapshot.chunks),
                   by_position=flattened(snapshot.by_position))


def _positions(levels: Mapping[int, LevelIndex]) -> dict[int, tuple[int, int]]:
    """Where each chunk is: (level, row)."""
    return {
        chunk_id: (level, row) for level, index in levels.items() for row, chunk_id in enumerate(index.ids.tolist())
    }


# --- the lookups by tag, chapter, position and document ------------------------------------


def _tag_keys(info: ChunkInfo) -> list[str]:
    return [tag.lower() for tag in info.tags]


def _chapter_keys(info: ChunkInfo) -> list[tuple[str, str]]:
    return [(info.chapter_level_1, info.chapter_level_2)]


def _document_keys(info: ChunkInfo) -> list[int]:
    return [info.doc_id]


def _lookups(infos: Sequence[ChunkInfo]) -> dict[str, Mapping]:
    return {
        "tags": _grouped(infos, _tag_keys),
        "chapters": _grouped(infos, _chapter_keys),
        "by_position": {(info.doc_id, info.level, info.index): info.text for info in infos},
        "by_document": _grouped(infos, _document_keys),
    }


def _grouped(infos: Iterable[ChunkInfo], keys: Callable[[ChunkInfo], list[Hashable]]) -> dict:
    grouped: dict = defaultdict(list)
    for info in infos:
        for key in keys(info):
            grouped[key].append(info.chunk_id)
    return dict(grouped)


def _changed_lookups(
    snapshot: Snapshot, gone: Sequence[ChunkInfo], added: Sequence[ChunkInfo]
) -> dict[str, Mapping]:
    by_position = changed(
        snapshot.by_position,
        [(info.doc_id, info.level, info.index) for info in gone],
        {(info.doc_id, info.level, info.index): info.text for info in added},
    )
    return {
        "tags": _regrouped(snapshot.tags, _tag_keys, gone, added),
        "chapters": _regrouped(snapshot.chapters, _chapter_keys, gone, added),
        "by_position": by_position,
        "by_document": _regrouped(snapshot.by_document, _document_keys, gone, added),
    }


def _regrouped(grouped: dict, keys: Callable[[ChunkInfo], list[Hashable]], gone: Sequence[ChunkInfo],
               added: Sequence[ChunkInfo]) -> dict:
    """A copy of a key -> chunk ids lookup with `gone` taken out and `added` put in.

    The lists of the snapshot it came from are shared, never changed: touched keys get new ones.
    """
    changed = grouped.copy()
    for key, chunk_ids in _grouped(gone, keys).items():
        remaining = _without_sorted(changed[key], chunk_ids)
        if remaining:
            changed[key] = remaining
        else:
            del changed[key]  # as a fresh build, which never has an empty list
    for key, chunk_ids in _grouped(added, keys).items():
        held = changed.get(key, [])
        # In id order, as a build loads them. New chunks mostly have the highest ids, but a
        # document published after a later-stored one does not.
        changed[key] = held + chunk_ids if not held or held[-1] <= chunk_ids[0] else sorted(held + chunk_ids)
    return changed


def _without_sorted(chunk_ids: list[int], gone: list[int]) -> list[int]:
    """A copy of an ascending list without the ids in `gone`, cut out by slices.

    A chapter or tag can hold most of a KB's chunks: one Python step per chunk took 5 ms
    at 100k; slices of the runs between the gone ids take a fraction of that.
    """
    kept: list[int] = []
    start = 0
    for chunk_id in sorted(set(gone)):
        low = bisect_left(chunk_ids, chunk_id, start)
        kept += chunk_ids[start:low]
        start = bisect_right(chunk_ids, chunk_id, low)  # a chunk tagged twice is listed twice
    kept += chunk_ids[start:]
    return kept


def _ids(infos: Sequence[ChunkInfo]) -> np.ndarray:
    ids = np.fromiter((info.chunk_id for info in infos), dtype=np.int64, count=len(infos))
    ids.flags.writeable = False
    return ids
