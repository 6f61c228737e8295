"""Retrieval results cached per KB version, query and parameters (seed S1 §9.2).

A key holds everything a result depends on: the KB (its id and creation time, as ids come
back after a KB is deleted), its content version (ingestion, deletion and re-embedding bump
it, so their old entries are never read again), its embedder, its graph's version when the
mode reads the graph (a graph build does not move the content version), the query with its
whitespace collapsed as `retrieve` collapses it, and every retrieval parameter. A stale
entry is never invalidated: nothing computes its key any more, and it ages out of the LRU.

Results hold only the chunks of the KB they were searched in, and `retrieve` is only called
with a KB its caller may read, so an entry is shared by that KB's readers and by no one else.

Entries live in a bounded LRU in the process and, when the Django cache is shared (Redis),
there too, so the processes of a deployment share them. A shared cache that is down answers
as a miss (agentic_rag.redis_cache). Results are stored pickled: a caller that edits the
candidates it got (post-processing scores them in place) never edits the cached copy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import pickle
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .models import KnowledgeBase
from .retrieval import GRAPH_MODES, RetrievalParams, RetrievalResult

logger = logging.getLogger("knowledge.result_cache")

Retriever = Callable[..., RetrievalResult]  # retrieve(query, kb, params)
GraphVersion = Callable[[KnowledgeBase], Any]
KEY_PREFIX = "retrieval:v1:"
# A result with one of these warnings is as good as any: the others (a rerank that failed, a
# leg that timed out) say it is worse than the next search may be, so it is not kept.
HARMLESS_WARNINGS = ("the query was truncated",)


@dataclass(frozen=True)
class CacheStats:
    hits: int = 0
    misses: int = 0
    shared_hits: int = 0  # hits found in the shared cache, not this process's LRU
    uncached: int = 0  # results not kept (degraded) or searches that could not be keyed

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "hit_rate": round(self.hit_rate, 4)}


def normalise_query(query: str) -> str:
    """The query as `retrieve` searches it: whitespace collapsed (case kept, as the vector leg sees it)."""
    return " ".join((query or "").split())


def cache_key(query: str, kb_version: tuple, params: RetrievalParams, graph: Any = None) -> str:
    """The entry's key: a digest of the KB's version, the normalised query and every parameter."""
    parts = {
        "kb": [str(part) for part in kb_version],
        "graph": str(graph) if graph is not None else None,
        "query": normalise_query(query),
        "params": dataclasses.asdict(params),
    }
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=repr)
    return KEY_PREFIX + hashlib.sha256(text.encode()).hexdigest()


def kb_version(kb: KnowledgeBase) -> tuple | None:
    """What the KB's content is now, read from the database (a KB object may be older than an ingestion)."""
    row = KnowledgeBase.objects.filter(pk=kb.pk).values_list("content_version", "embedder", "created_at").first()
    return None if row is None else (kb.pk, *row)


class RetrievalCache:
    """A bounded LRU of retrieval results in this process, backed by a shared cache when given."""

    def __init__(
        self,
        *,
        entries: int,
        ttl_s: float,
        shared: Any = None,
        graph_version: GraphVersion | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.entries = entries
        self.ttl_s = ttl_s
        self.shared = shared
        self.graph_version = graph_version
        self._clock = clock
        self._lru: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._lock = threading.Lock()
        self._stats = CacheStats()

    @property
    def enabled(self) -> bool:
        return self.entries > 0

    def stats(self) -> CacheStats:
        with self._lock:
            return self._stats

    def reset_stats(self) -> None:
        with self._lock:
            self._stats = CacheStats()

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()
            self._stats = CacheStats()

    def wrap(self, retrieve: Retriever) -> Retriever:
        """`retrieve` with its results cached; the same signature."""

        def cached_retrieve(
            query: str, kb: KnowledgeBase, params: RetrievalParams = RetrievalParams(), **kwargs: Any
        ) -> RetrievalResult:
            return self.retrieve(retrieve, query, kb, params, **kwargs)

        return cached_retrieve

    def retrieve(
        self, retrieve: Retriever, query: str, kb: KnowledgeBase, params: RetrievalParams, **kwargs: Any
    ) -> RetrievalResult:
        """The cached result for this search, or `retrieve`'s, kept for the next time."""
        started = time.perf_counter()
        key = self._key(query, kb, params) if self.enabled and not kwargs else None
        if key is None:  # a caller's own backend or embedder: not what the key describes
            self._count(uncached=1)
            return retrieve(query, kb, params, **kwargs)
        found = self._get(key)
        if found is not None:
            result, shared = found
            ms = round((time.perf_counter() - started) * 1000, 3)
            result.timings_ms = {"cache": ms, "total": ms}
            self._count(hits=1, shared_hits=int(shared))
            return result
        self._count(misses=1)
        result = retrieve(query, kb, params)
        if all(warning.startswith(HARMLESS_WARNINGS) for warning in result.warnings):
            self._put(key, result)
        else:
            self._count(uncached=1)
        return result

    def _key(self, query: str, kb: KnowledgeBase, params: RetrievalParams) -> str | None:
        try:
            version = kb_version(kb)
            if version is None:
                return None
            graph = self.graph_version(kb) if self.graph_version and params.mode in GRAPH_MODES else None
            return cache_key(query, version, params, graph)
        except Exception:  # the search itself will say what is wrong
            logger.warning("the retrieval cache could not key a search; searching uncached", exc_info=True)
            return None

    def _get(self, key: str) -> tuple[RetrievalResult, bool] | None:
        now = self._clock()
        with self._lock:
            entry = self._lru.get(key)
            if entry is not None and entry[0] <= now:
                del self._lru[key]
                entry = None
            if entry is not None:
                self._lru.move_to_end(key)
        if entry is not None:
            return pickle.loads(entry[1]), False
        data = self._shared_get(key)
        if data is None:
            return None
        self._remember(key, data)
        return pickle.loads(data), True

    def _put(self, key: str, result: RetrievalResult) -> None:
        try:
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            logger.warning("a retrieval result could not be pickled; not cached", exc_info=True)
            self._count(uncached=1)
            return
        self._remember(key, data)
        if self.shared is not None:
            try:
                self.shared.set(key, data, timeout=self.ttl_s)
            except Exception:  # a shared cache that fails costs the other processes a search, no more
                logger.warning("the shared cache refused a retrieval result", exc_info=True)

    def _remember(self, key: str, data: bytes) -> None:
        with self._lock:
            self._lru[key] = (self._clock() + self.ttl_s, data)
            self._lru.move_to_end(key)
            while len(self._lru) > self.entries:
                self._lru.popitem(last=False)

    def _shared_get(self, key: str) -> bytes | None:
        if self.shared is None:
            return None
        try:
            data = self.shared.get(key)
        except Exception:
            logger.warning("the shared cache failed a read; searching", exc_info=True)
            return None
        return data if isinstance(data, bytes) else None

    def _count(self, **more: int) -> None:
        with self._lock:
            s = self._stats
            self._stats = CacheStats(
                s.hits + more.get("hits", 0), s.misses + more.get("misses", 0),
                s.shared_hits + more.get("shared_hits", 0), s.uncached + more.get("uncached", 0),
            )
