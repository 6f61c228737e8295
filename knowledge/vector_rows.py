"""Rows of float32 vectors kept in blocks, so appending never copies the rows already held."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from django.conf import settings


@dataclass(frozen=True, eq=False)
class VectorRows:
    """Read-only (n, dims) rows split over blocks; row i of the whole is row i of their concatenation.

    A full build is one block. A change appends a block instead of copying 100k × 1024
    floats (765 ms measured), and `compacted` joins them again off the query path.
    """

    blocks: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, matrix: np.ndarray) -> VectorRows:
        return cls(()).appended(matrix)

    def appended(self, matrix: np.ndarray) -> VectorRows:
        """These rows followed by the rows of `matrix`."""
        if not len(matrix):
            return self
        if self.blocks and matrix.shape[1] != self.dims:
            raise ValueError(f"rows of {matrix.shape[1]} dimensions cannot join rows of {self.dims}")
        block = np.ascontiguousarray(matrix, dtype=np.float32)
        block.flags.writeable = False
        return VectorRows((*self.blocks, block))

    def compacted(self, keep: np.ndarray) -> VectorRows:
        """The rows where `keep` is True, in order, in one block."""
        kept = [block[keep[start:end]] for block, start, end in self._spans()]
        return VectorRows(()).appended(np.concatenate(kept) if kept else np.zeros((0, self.dims), np.float32))

    @cached_property
    def starts(self) -> np.ndarray:
        """The first row of each block, and the row count last."""
        return np.concatenate(([0], np.cumsum([len(block) for block in self.blocks], dtype=np.int64)))

    @property
    def n_rows(self) -> int:
        return int(self.starts[-1])

    @property
    def dims(self) -> int:
        return self.blocks[0].shape[1] if self.blocks else 0

    @property
    def nbytes(self) -> int:
        return sum(block.nbytes for block in self.blocks)

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Every row @ query."""
        if len(self.blocks) == 1:
            return similarities(self.blocks[0], query)
        scores = np.empty(self.n_rows, dtype=np.result_type(np.float32, query))
        for block, start, end in self._spans():
            scores[start:end] = similarities(block, query)
        return scores

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The given rows, as a (len(rows), dims) matrix."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(self.blocks) == 1:
            return self.blocks[0][rows]
        which = np.searchsorted(self.starts, rows, side="right") - 1
        taken = np.empty((len(rows), self.dims), dtype=np.float32)
        for block in np.unique(which).tolist():
            here = which == block
            taken[here] = self.blocks[block][rows[here] - self.starts[block]]
        return taken

    def _spans(self) -> list[tuple[np.ndarray, int, int]]:
        starts = self.starts.tolist()
        return [(block, starts[i], starts[i + 1]) for i, block in enumerate(self.blocks)]


_scan_pools: dict[int, ThreadPoolExecutor] = {}  # by thread count
_scan_pool_lock = threading.Lock()


def similarities(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """vectors @ query, in shards on several threads when the matrix is large.

    A matrix-vector product is bound by memory bandwidth, which one core does not use up:
    two shards at 100k × 1024 take 20 ms where one takes 28 ms (2 cores).
    """
    threads = settings.VECTOR_SCAN_THREADS
    rows = vectors.shape[0]
    if threads < 2 or rows < max(settings.VECTOR_SCAN_PARALLEL_ROWS, threads):
        return vectors @ query
    scores = np.empty(rows, dtype=np.result_type(vectors, query))
    bounds = np.linspace(0, rows, threads + 1, dtype=np.int64)

    def scan(shard: int) -> None:
        start, end = bounds[shard], bounds[shard + 1]
        np.matmul(vectors[start:end], query, out=scores[start:end])

    list(_pool(threads).map(scan, range(threads)))
    return scores


def _pool(threads: int) -> ThreadPoolExecutor:
    with _scan_pool_lock:
        if threads not in _scan_pools:
            _scan_pools[threads] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="vector-scan")
        return _scan_pools[threads]
