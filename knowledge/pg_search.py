"""The full-stack search backend: pgvector HNSW and a BM25 inverted index in SQL.

Every call reads the KB's search entries under the embedder the KB row names now, and a
result's liveness (`chunk.version = document.live_version`) from the database, so all
processes see a change once it commits.

- Vector: `embedding::vector(D) <=> q` with `dims = D`, the expression and predicate of the
  partial HNSW index of that dimension (migration 0002); pgvector's iterative scan keeps a
  filtered scan going until enough rows pass. Whether to use the index or score the KB's
  rows exactly is decided here, from cached counts (see _HNSW_READ_COST); a restriction to
  given chunks is always exact.
- Keyword: Okapi BM25 with Lucene's idf, the embedded leg's formula and scores, over the
  postings (term, chunk, tf, dl) that triggers keep beside the entries (migration 0007). A
  query reads each of its terms' postings in one index-only range scan, packed as bytes,
  and scores them with numpy; N and the mean length are cached per content version. Each
  process keeps the postings it has read for the KB's content version (PG_POSTINGS_CACHE_MB
  at most), so a term asked again costs nothing in the database. Ranking next to the data
  in PL/pgSQL (MaxScore over the postings) took 9-11 ms a query at 10k generated chunks,
  most of it summing the postings of words found in most rows; numpy sums them in ~0.1 ms.

Both legs rank the KB's entries on their own table, then test liveness (two primary-key
lookups) only for the best rows, best first: joining chunk and document before ranking
would make the planner hash whole tables or give up the HNSW ordering.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import TypeVar

import numpy as np
from django.conf import settings
from django.core.cache import cache as shared_cache
from django.db import InterfaceError, OperationalError, connection
from django.db.models import F, QuerySet, Subquery

from agentic_rag.side_connections import SideConnections
from agentic_rag.vectors import to_pgvector_text

from .bm25 import BM25Params, best_pairs, lucene_idf
from .models import Chunk, KnowledgeBase, SearchEntry
from .search import ChunkInfo, Hit, Placed, chunk_info, most_tagged

# The KB's entries under the embedder its row names now: reading it in the query, not from
# the caller's KB object, matches MemoryBackend, which rereads it too.
_ENTRIES = """
    e.kb_id = %(kb)s
    AND e.embedder = (SELECT k.embedder FROM knowledge_knowledgebase k WHERE k.id = %(kb)s)
"""
_LIVE_FROM = """
    FROM knowledge_searchentry e
    JOIN knowledge_chunk c ON c.id = e.chunk_id
    JOIN knowledge_document d ON d.id = c.document_id AND d.live_version = c.version
"""
_IS_LIVE = """EXISTS (
    SELECT FROM knowledge_chunk c
    JOIN knowledge_document d ON d.id = c.document_id AND d.live_version = c.version
    WHERE c.id = s.chunk_id
)"""

# Ranked rows fetched per wanted hit, before liveness: entries of a version still being
# ingested (or just replaced) are the only ones that fail, and rarely many at once.
_FETCH_FACTOR, _FETCH_EXTRA = 1, 10
_MIN_EF_SEARCH, _MAX_EF_SEARCH = 64, 1000
# The planner prices an exact scan without reading TOASTed vectors (~12 us a row for 1024-d
# here), so it picks one over the HNSW index even for 10k rows (119 ms against 7 ms); the
# choice is made here instead. An HNSW scan filtered to one KB reads about
# fetch × (index rows / KB rows) tuples, each (graph hops, neighbours' distances) costing
# about _HNSW_READ_COST rows scored exactly (measured 2-6), and pgvector stops it at
# hnsw.max_scan_tuples (20 000 by default).
_HNSW_READ_COST = 3
_MAX_HNSW_READ = 10_000

_VECTOR_SQL = """
    SELECT s.chunk_id, 1 - s.distance, {is_live}
    FROM (
        SELECT e.chunk_id, e.embedding::vector({dims}) <=> %(query)s::vector({dims}) AS distance
        FROM knowledge_searchentry e
        WHERE {entries} AND e.level = %(level)s AND e.dims = {dims} {only}
        ORDER BY {order}
        LIMIT %(fetch)s
    ) s
"""
_ONLY = "AND e.chunk_id = ANY(%(only)s::bigint[])"
# Exact: best score first, an order no index provides, so every row is scored.
_EXACT_ORDER = "1 - (e.embedding::vector({dims}) <=> %(query)s::vector({dims})) DESC, e.chunk_id"

# Each term's postings as one bytea of 16-byte records (chunk id int8, tf int4, dl int4),
# every entry under the KB's embedder: liveness is tested for the best rows only, as the
# vector leg does. A subquery per term keeps each a range scan of the index (as
# `term = ANY(...)`, a planner without statistics yet read the KB's every posting).
_POSTINGS_SQL = """
    SELECT q.term, (
        SELECT string_agg(int8send(p.chunk_id) || int4send(p.tf) || int4send(p.dl), '')
        FROM knowledge_searchposting p
        WHERE p.kb_id = %(kb)s AND p.level = %(level)s AND p.embedder = %(embedder)s AND p.term = q.term
    )
    FROM unnest(%(terms)s::text[]) AS q(term)
"""
_POSTING = np.dtype([("chunk", ">i8"), ("tf", ">i4"), ("dl", ">i4")])
_LIVE_SQL = """
    SELECT c.id FROM knowledge_chunk c
    JOIN knowledge_document d ON d.id = c.document_id AND d.live_version = c.version
    WHERE c.id = ANY(%(ids)s::bigint[])
"""

# Sums of the ledger that triggers keep beside the entries (migration 0011): no entry is read.
_STATS_SQL = """
    SELECT coalesce(sum(s.entries), 0), coalesce(sum(s.tokens), 0), coalesce(max(s.dims), 0),
           (SELECT greatest(i.reltuples, 0) FROM pg_class i
            WHERE i.relname = 'knowledge_searchentry_hnsw_' || max(s.dims))
    FROM knowledge_searchstats s
    WHERE s.kb_id = %(kb)s AND s.level = %(level)s
      AND s.embedder = (SELECT k.embedder FROM knowledge_knowledgebase k WHERE k.id = %(kb)s)
"""
_STATS_TTL_S = 3600
# A remembered liveness (key tuple, int, bool, the map's slot) takes about 200 bytes.
_LIVENESS_ENTRY_BYTES = 200
_LIVENESS_CACHE_BYTES = 16 * 1024 * 1024

# Threads that run a hybrid query's vector leg beside its keyword leg, each on a connection
# of its own (a process holds this many more while it serves queries).
_SIDE_LEGS = SideConnections(settings.PG_SIDE_CONNECTIONS)

T = TypeVar("T")

_VERSION_SQL = "SELECT content_version, embedder, created_at FROM knowledge_knowledgebase WHERE id = %s"

_TAGGED_SQL = f"""
    WITH pairs AS (
        SELECT e.chunk_id, k.keyword
        {_LIVE_FROM}
        CROSS JOIN LATERAL jsonb_array_elements_text(
            CASE WHEN jsonb_typeof(c.tags) = 'array' THEN c.tags ELSE '[]'::jsonb END
        ) AS t(tag)
        JOIN unnest(%(keywords)s::text[]) AS k(keyword) ON strpos(lower(t.tag), k.keyword) > 0
        WHERE {_ENTRIES}
    ), kept AS (
        SELECT keyword FROM pairs GROUP BY keyword
        HAVING %(most)s::float8 IS NULL OR count(DISTINCT chunk_id) <= %(most)s::float8
    )
    SELECT chunk_id, count(*) AS matches FROM pairs
    WHERE keyword IN (SELECT keyword FROM kept)
    GROUP BY chunk_id
    ORDER BY matches DESC, chunk_id
    LIMIT %(limit)s
"""

_COSINES_SQL = """
    SELECT e.chunk_id, 1 - (e.embedding::vector({dims}) <=> %(query)s::vector({dims}))
    {live_from}
    WHERE {entries} AND e.dims = {dims} AND e.chunk_id = ANY(%(ids)s::bigint[])
"""

# CHUNK_FIELDS in raw SQL: the ORM spent more building this query than the database running it.
# With the texts of the chunks before and after each, of the same (live) version and level.
_CHUNKS_SQL = f"""
    SELECT e.chunk_id, c.document_id, d.name, c.text, e.level, c.parent_id, c.index, c.section_index,
           c.section_title, c.chapter_level_1, c.chapter_level_2, c.tags, d.metadata, e.tokens,
           (SELECT n.text FROM knowledge_chunk n WHERE n.document_id = c.document_id AND n.level = c.level
                AND n.index = c.index - 1 AND n.version = c.version),
           (SELECT n.text FROM knowledge_chunk n WHERE n.document_id = c.document_id AND n.level = c.level
                AND n.index = c.index + 1 AND n.version = c.version)
    {_LIVE_FROM}
    WHERE {_ENTRIES} AND e.chunk_id = ANY(%(ids)s::bigint[])
"""

_HAS_ENTRIES_SQL = f"SELECT EXISTS (SELECT {_LIVE_FROM} WHERE {_ENTRIES})"

_NEIGHBOURS_SQL = f"""
    SELECT c.document_id, c.level, c.index, c.text
    FROM unnest(%(docs)s::bigint[], %(levels)s::int[], %(indexes)s::int[]) AS w(doc, level, idx)
    JOIN knowledge_chunk c ON c.document_id = w.doc AND c.level = w.level AND c.index = w.idx
    JOIN knowledge_document d ON d.id = c.document_id AND d.live_version = c.version
    JOIN knowledge_searchentry e ON e.chunk_id = c.id
    WHERE {_ENTRIES}
"""


@dataclass(frozen=True)
class CorpusStats:
    """What the legs need to know about a KB level beyond the rows they rank."""

    rows: int
    mean_length: float  # in tokens
    dims: int
    # Rows in the HNSW index of that dimension, every KB's, as of the last ANALYZE (0: not
    # counted yet); None when no index covers the dimension.
    indexed_rows: int | None
    embedder: str  # the one whose entries these are

    def is_worth_hnsw(self, dims: int, fetch: int) -> bool:
        """Whether a filtered HNSW scan for `fetch` rows beats scoring every row exactly."""
        if dims != self.dims or self.indexed_rows is None or self.rows == 0:
            return False
        reads = fetch * max(self.indexed_rows, self.rows) / self.rows
        return reads <= _MAX_HNSW_READ and reads * _HNSW_READ_COST <= self.rows


def vector_sql(dims: int, *, is_ann: bool, restricted: bool = False) -> str:
    """The vector leg for `dims`-d queries: by the HNSW index or exact; restricted to %(only)s."""
    return _VECTOR_SQL.format(
        dims=dims, entries=_ENTRIES, is_live=_IS_LIVE, only=_ONLY if restricted else "",
        order="distance" if is_ann else _EXACT_ORDER.format(dims=dims),
    )


def _live_entries(kb: KnowledgeBase) -> QuerySet:
    """The KB's live search entries under the embedder its row names (not the object's copy)."""
    embedder = KnowledgeBase.objects.filter(pk=kb.pk).values("embedder")
    return SearchEntry.objects.filter(kb=kb, embedder=Subquery(embedder)).filter(
        chunk__version=F("chunk__document__live_version")
    )


class PgBackend:
    """Search backend over PostgreSQL: every query goes to the database."""

    def __init__(self, params: BM25Params = BM25Params()) -> None:
        self.params = params
        self._pinned = threading.local()
        # A term in most rows of a 10k-chunk KB has 160 kB of postings, read from the index in
        # ~5 ms and scored from here in ~0.1 ms.
        self._postings = _BoundedCache(settings.PG_POSTINGS_CACHE_MB * 1024 * 1024)
        # Whether a chunk is live, per content version: publishing a version, deleting a
        # document or moving the KB to another embedder bumps the version in its transaction.
        self._liveness = _BoundedCache(_LIVENESS_CACHE_BYTES)
        self._queries_in_flight = 0  # pinned queries of this process (see alongside)
        self._in_flight_lock = threading.Lock()

    @contextmanager
    def pinned(self, kb: KnowledgeBase) -> Iterator[None]:
        """Serve one query's many calls from one read of the KB's version row.

        A hybrid query asked for it three times (the embedder, then each leg's statistics):
        1 ms of round trips. Inside, the chunks loaded bring their neighbours' texts along,
        for the context window to find without a query of its own (2-3 ms at 10k chunks).
        """
        pins = self._pinned.__dict__.setdefault("by_kb", {})
        outer = pins.get(kb.pk)
        if outer is not None:
            yield
            return
        pins[kb.pk] = _Pin(_version_row(kb.pk))
        self._count_query(1)
        try:
            yield
        finally:
            pins.pop(kb.pk, None)
            self._count_query(-1)

    def _count_query(self, step: int) -> None:
        with self._in_flight_lock:
            self._queries_in_flight += step

    def alongside(self, kb, work: Callable[[], T]) -> Callable[[], T] | None:
        """Start `work` (one leg of this query) on a side connection; call the result for its value.

        None when it must run in the caller: inside a transaction, whose uncommitted rows
        another connection cannot see; while other queries of this process are searching,
        whose work already keeps the cores busy; or when every side connection is busy.
        The work sees this query's pin, so the KB's version row is read once for both legs.
        """
        # Under load the side thread only moves work between threads: 200 chat sessions at
        # once on 2 cores took 21.0-21.3 s to their answers with it, 18.9-20.3 s without.
        if connection.in_atomic_block or self._queries_in_flight > 1:
            return None
        pin = self._pin(kb)

        def run() -> T:
            pins = self._pinned.__dict__.setdefault("by_kb", {})
            pins[kb.pk] = pin
            try:
                return work()
            finally:
                pins.pop(kb.pk, None)

        future = _SIDE_LEGS.try_submit(run)
        if future is None:
            return None

        def result() -> T:
            try:
                return future.result()
            except (InterfaceError, OperationalError):
                return work()  # once more on the caller's connection, which says if the database is down

        return result

    def _pin(self, kb) -> _Pin | None:
        return self._pinned.__dict__.get("by_kb", {}).get(kb.pk)

    def _version(self, kb) -> tuple | None:
        """(content_version, embedder, created_at) of the KB: the pinned row, else read now."""
        pin = self._pin(kb)
        return pin.version if pin is not None else _version_row(kb.pk)

    def keyword(self, kb, tokens: Sequence[str], *, level: int, top_k: int, only=None) -> list[Hit]:
        counts = Counter(tokens)
        if not counts or top_k <= 0 or (only is not None and not only):
            return []
        version = self._version(kb)
        stats = _corpus_stats(kb.pk, version, level)
        if version is None or stats.rows == 0:
            return []
        postings = self._term_postings(kb.pk, version, level, sorted(counts))
        chunks, weights = bm25_weights(postings, counts, stats, self.params)
        if only is not None:
            keep = np.isin(chunks, np.asarray(_ids(only), dtype=np.int64))
            chunks, weights = chunks[keep], weights[keep]
        if chunks.size == 0:
            return []
        ids, totals = summed_by_chunk(chunks, weights)

        def rank(fetch: int) -> list[tuple]:
            head = best_pairs(ids, totals, fetch)  # equal scores go to the lower chunk id
            live = self._live(kb.pk, version, [chunk_id for chunk_id, _ in head])
            return [(chunk_id, score, chunk_id in live) for chunk_id, score in head]

        return _best_live(rank, top_k)

    def _term_postings(self, kb_id: int, version: tuple, level: int, terms: list[str]) -> dict[str, np.ndarray]:
        """Each term's postings (chunk, tf, dl), from this process's cache or the postings index."""
        prefix = (_version_key(kb_id, version), level)
        found = {term: postings for term in terms if (postings := self._postings.get((*prefix, term))) is not None}
        missing = [term for term in terms if term not in found]
        if missing:
            with connection.cursor() as cursor:
                cursor.execute(_POSTINGS_SQL, {"kb": kb_id, "level": level, "embedder": version[1], "terms": missing})
                rows = cursor.fetchall()
            for term, packed in rows:  # an unknown term has none: remembered too
                postings = np.frombuffer(bytes(packed or b""), dtype=_POSTING)
                found[term] = postings
                self._postings.put((*prefix, term), postings, postings.nbytes)
        return found

    def _live(self, kb_id: int, version: tuple, chunk_ids: Sequence[int]) -> set[int]:
        """Which of the chunks are live at the KB's content version: remembered, else asked."""
        key = _version_key(kb_id, version)
        known = {chunk_id: self._liveness.get((key, chunk_id)) for chunk_id in chunk_ids}
        missing = [chunk_id for chunk_id, is_live in known.items() if is_live is None]
        if missing:
            live = _live_now(missing)
            self._remember_live(kb_id, version, ((chunk_id, chunk_id in live) for chunk_id in missing))
            known.update((chunk_id, chunk_id in live) for chunk_id in missing)
        return {chunk_id for chunk_id, is_live in known.items() if is_live}

    def _remember_live(self, kb_id: int, version: tuple, liveness: Iterable[tuple[int, bool]]) -> None:
        key = _version_key(kb_id, version)
        for chunk_id, is_live in liveness:
            self._liveness.put((key, int(chunk_id)), bool(is_live), _LIVENESS_ENTRY_BYTES)

    def corpus_stats(self, kb, level: int) -> CorpusStats:
        """Row count, mean length and index size of the KB level, cached per content version."""
        return _corpus_stats(kb.pk, self._version(kb), level)

    def vector(self, kb, query: np.ndarray, *, level: int, top_k: int, only=None) -> list[Hit]:
        query = np.asarray(query, dtype=np.float32).ravel()
        if top_k <= 0 or not query.any() or (only is not None and not only):
            return []  # a zero vector has no direction: every cosine would be NaN
        dims = int(query.shape[0])
        # Without pgvector 0.8's iterative scan, a filtered HNSW scan may come back short.
        is_ann_possible = only is None and _has_iterative_scan(connection.alias)
        version = self._version(kb)
        stats = _corpus_stats(kb.pk, version, level) if is_ann_possible else None
        params = {"kb": kb.pk, "level": level, "query": to_pgvector_text(query), "only": _ids(only)}

        def rank(fetch: int) -> list[tuple]:
            is_ann = stats is not None and stats.is_worth_hnsw(dims, fetch)
            sql = vector_sql(dims, is_ann=is_ann, restricted=only is not None)
            with connection.cursor() as cursor:
                if is_ann:
                    rows = _scan_hnsw(cursor, sql, {**params, "fetch": fetch}, fetch)
                else:
                    cursor.execute(sql, {**params, "fetch": fetch})
                    rows = cursor.fetchall()
            if version is not None:  # the keyword leg often ranks the same chunks next
                self._remember_live(kb.pk, version, ((chunk_id, is_live) for chunk_id, _, is_live in rows))
            return rows

        return _best_live(rank, top_k)

    def chunks(self, kb, chunk_ids: Collection[int]) -> dict[int, ChunkInfo]:
        if not chunk_ids:
            return {}
        with connection.cursor() as cursor:
            cursor.execute(_CHUNKS_SQL, {"kb": kb.pk, "ids": _ids(chunk_ids)})
            rows = cursor.fetchall()
        pin = self._pin(kb)
        if pin is not None:
            for row in rows:  # "" stands for no neighbour: the first or last chunk
                doc_id, level, index, before, after = row[1], row[4], row[6], row[14], row[15]
                pin.neighbours[(doc_id, level, index - 1)] = before or ""
                pin.neighbours[(doc_id, level, index + 1)] = after or ""
        return {row[0]: chunk_info((*row[:11], _json(row[11]), _json(row[12]), row[13])) for row in rows}

    def tagged(self, kb, keywords: Sequence[str], *, limit: int, max_share: float | None = None) -> list[int]:
        # strpos on lowercased tags is ILIKE '%keyword%' without LIKE's wildcards in keywords.
        keywords = sorted({keyword.lower() for keyword in keywords if keyword})
        if not keywords or limit <= 0:
            return []
        # The row counts come from the per-version cache the keyword leg keeps.
        chunks = sum(self.corpus_stats(kb, level).rows for level in (Chunk.PARENT, Chunk.CHILD))
        most = most_tagged(max_share, chunks)
        with connection.cursor() as cursor:
            cursor.execute(_TAGGED_SQL, {"kb": kb.pk, "keywords": keywords, "limit": limit, "most": most})
            return [int(chunk_id) for chunk_id, _ in cursor.fetchall()]

    def in_chapter(self, kb, chapter_level_1: str, chapter_level_2: str) -> list[int]:
        entries = _live_entries(kb).filter(
            chunk__chapter_level_1=chapter_level_1, chunk__chapter_level_2=chapter_level_2
        )
        return list(entries.order_by("chunk_id").values_list("chunk_id", flat=True))

    def cosines(self, kb, query: np.ndarray, chunk_ids: Sequence[int]) -> np.ndarray:
        scores = np.zeros(len(chunk_ids), dtype=np.float32)
        query = np.asarray(query, dtype=np.float32).ravel()
        if not chunk_ids or not query.any():
            return scores
        sql = _COSINES_SQL.format(dims=int(query.shape[0]), live_from=_LIVE_FROM, entries=_ENTRIES)
        with connection.cursor() as cursor:
            cursor.execute(sql, {"kb": kb.pk, "query": to_pgvector_text(query), "ids": _ids(chunk_ids)})
            found = {int(chunk_id): score for chunk_id, score in cursor.fetchall()}
        for i, chunk_id in enumerate(chunk_ids):
            score = found.get(chunk_id)
            if score is not None and np.isfinite(score):
                scores[i] = score
        return scores

    def neighbours(self, kb, chunks: Sequence[Placed]) -> Mapping[tuple[int, int, int], str]:
        wanted = sorted({(c.doc_id, c.level, c.index + step) for c in chunks for step in (-1, 1)})
        wanted = [key for key in wanted if key[2] >= 0]
        if not wanted:
            return {}
        pin = self._pin(kb)
        known = pin.neighbours if pin is not None else {}
        texts = {key: known[key] for key in wanted if known.get(key)}
        missing = [key for key in wanted if key not in known]
        if missing:
            docs, levels, indexes = (list(column) for column in zip(*missing, strict=True))
            with connection.cursor() as cursor:
                cursor.execute(_NEIGHBOURS_SQL, {"kb": kb.pk, "docs": docs, "levels": levels, "indexes": indexes})
                texts.update({(doc, level, index): text for doc, level, index, text in cursor.fetchall()})
        return texts

    def size(self, kb) -> dict[str, int]:
        return {"chunks": _live_entries(kb).count(), "bytes": 0}

    def has_entries(self, kb) -> bool:
        version = self._version(kb)
        if version is None:
            return False
        # Whatever makes an entry live or not (a version published, a document deleted, a
        # move to another embedder) bumps the version in its transaction: cached per version.
        def read() -> bool:
            with connection.cursor() as cursor:  # the ORM's query took 2.7 ms, this one 0.2
                cursor.execute(_HAS_ENTRIES_SQL, {"kb": kb.pk})
                return bool(cursor.fetchone()[0])

        return _per_version(f"pg-search:has-entries:{_version_key(kb.pk, version)}", read)

    def embedder_name(self, kb) -> str:
        version = self._version(kb)
        return version[1] if version else ""


def bm25_weights(
    postings: Mapping[str, np.ndarray], counts: Mapping[str, int], stats: CorpusStats, params: BM25Params
) -> tuple[np.ndarray, np.ndarray]:
    """Every posting's BM25 term weight (Lucene's idf, the embedded leg's formula), with its chunk."""
    chunks, weights = [], []
    for term, records in postings.items():
        if not records.size:
            continue
        idf = lucene_idf(records.size, stats.rows)  # a term's df is the length of its postings
        tf = records["tf"].astype(np.float64)
        norm = params.k1 * (1 - params.b + params.b * records["dl"] / (stats.mean_length or 1.0))
        chunks.append(records["chunk"].astype(np.int64))
        weights.append(counts[term] * idf * (params.k1 + 1) * tf / (tf + norm))
    if not chunks:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    return np.concatenate(chunks), np.concatenate(weights)


def summed_by_chunk(chunks: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each chunk's total weight, chunks ascending: a dense count over the id range when it is
    not much wider than the postings (a sort of 40k postings took 2 ms, this 0.1)."""
    low, high = int(chunks.min()), int(chunks.max())
    if high - low < 8 * chunks.size + 1024:
        totals = np.bincount(chunks - low, weights=weights)
        ids = np.flatnonzero(totals)
        return ids + low, totals[ids]
    ids, inverse = np.unique(chunks, return_inverse=True)
    return ids, np.bincount(inverse, weights=weights)


def _live_now(chunk_ids: Iterable[int]) -> set[int]:
    """Which of the chunks belong to their document's live version."""
    ids = list(chunk_ids)
    if not ids:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(_LIVE_SQL, {"ids": ids})
        return {int(chunk_id) for (chunk_id,) in cursor.fetchall()}


class _BoundedCache:
    """A thread-safe least-recently-used map, bounded by the bytes of what it holds."""

    def __init__(self, max_bytes: int) -> None:
        self._items: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._bytes = 0
        self._max_bytes = max_bytes
        self._lock = threading.Lock()

    def get(self, key: Hashable):
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def built_once(self, key: Hashable, build: Callable[[], T], size: Callable[[T], int]) -> T:
        """The value kept at key, else what build makes, kept for next time if it fits."""
        value = self.get(key)
        if value is None:
            value = build()
            self.put(key, value, size(value))
        return value

    def put(self, key: Hashable, value: object, size: int) -> None:
        if size > self._max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            self._bytes += size - (old[1] if old else 0)
            self._items[key] = (value, size)
            while self._bytes > self._max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped


@dataclass
class _Pin:
    """What one query reads once: the KB's version row, and the neighbours of the chunks it loaded."""

    version: tuple | None
    neighbours: dict[tuple[int, int, int], str] = field(default_factory=dict)


def _corpus_stats(kb_id: int, version: tuple | None, level: int) -> CorpusStats:
    """CorpusStats of the KB level at version (the KB's version row), cached per version."""
    if version is None:
        return CorpusStats(0, 0.0, 0, None, "")

    def read() -> tuple:
        with connection.cursor() as cursor:
            cursor.execute(_STATS_SQL, {"kb": kb_id, "level": level})
            rows, tokens, dims, indexed_rows = cursor.fetchone()
        indexed_rows = None if indexed_rows is None else int(indexed_rows)
        mean_length = int(tokens) / int(rows) if rows else 0.0
        return (int(rows), mean_length, int(dims), indexed_rows, version[1])

    return CorpusStats(*_per_version(f"pg-search:stats:{_version_key(kb_id, version)}:{level}", read))


# What a KB's content version determines never changes, so each process keeps what it has
# read (or another process shared) in front of the shared cache: the shared cache's round
# trips were 1-2 ms of a hybrid query.
_VERSIONED = _BoundedCache(1024 * 1024)


def _per_version(key: str, read: Callable[[], Hashable]):
    """The value for a key that names a content version: this process's, the shared cache's, or read."""
    found = _VERSIONED.get(key)
    if found is None:
        found = shared_cache.get(key)
        if found is None:
            found = read()
            shared_cache.set(key, found, _STATS_TTL_S)
        _VERSIONED.put(key, found, len(key) + 100)
    return found


def _version_row(kb_id: int) -> tuple | None:
    with connection.cursor() as cursor:  # the ORM took 1.3 ms to ask for this row
        cursor.execute(_VERSION_SQL, [kb_id])
        return cursor.fetchone()


def _version_key(kb_id: int, version: tuple) -> str:
    """A cache key part naming one content version of one KB under one embedder."""
    content_version, embedder, created_at = version
    # created_at tells a KB from one with the same pk in a database created again (tests).
    return f"{kb_id}:{created_at.timestamp()}:{content_version}:{embedder}"


def _best_live(rank: Callable[[int], Sequence[tuple]], top_k: int) -> list[Hit]:
    """Rank rows that say if their chunk is live, fetching more until top_k are.

    `rank(fetch)` gives up to `fetch` (chunk id, score, is live, ...) rows, best first.
    """
    fetch = _FETCH_FACTOR * top_k + _FETCH_EXTRA
    while True:
        rows = rank(fetch)
        hits = [(int(row[0]), float(row[1])) for row in rows if row[2]]
        if len(hits) >= top_k or len(rows) < fetch:
            # An iterative HNSW scan may yield rows slightly out of order (relaxed_order).
            hits = [hit for hit in hits if np.isfinite(hit[1])]
            return sorted(hits, key=lambda hit: (-hit[1], hit[0]))[:top_k]
        fetch *= 4


def _json(value):
    """A jsonb column as Python: Django has psycopg hand jsonb over as text, for its fields to parse."""
    return json.loads(value) if isinstance(value, str) else value


def _ids(chunk_ids: Collection[int] | None) -> list[int]:
    return [int(chunk_id) for chunk_id in chunk_ids] if chunk_ids is not None else []


def _hnsw_settings(fetch: int) -> str:
    """For the transaction: order by the HNSW index, not a sort, and scan on until `fetch` pass."""
    ef_search = min(max(_MIN_EF_SEARCH, fetch), _MAX_EF_SEARCH)
    return (
        f"SELECT set_config('hnsw.ef_search', '{ef_search:d}', true), set_config('enable_sort', 'off', true),"
        " set_config('hnsw.iterative_scan', 'relaxed_order', true)"
    )


def _scan_hnsw(cursor, sql: str, params: Mapping, fetch: int) -> list[tuple]:
    """Run the HNSW query `sql` under its settings in one round trip, leaving no setting behind.

    The statements of one message run in one transaction (PostgreSQL's implicit block), so
    settings made local end with it; inside the caller's transaction a savepoint rolled back
    undoes them. An atomic block of its own cost three more round trips: 2 ms of a 10 ms leg.
    """
    if connection.in_atomic_block:
        script = f"SAVEPOINT hnsw_scan; {_hnsw_settings(fetch)}; {sql}; ROLLBACK TO SAVEPOINT hnsw_scan; RELEASE SAVEPOINT hnsw_scan"
        before = 2
    else:
        script, before = f"{_hnsw_settings(fetch)}; {sql}", 1
    cursor.execute(script, params)
    for _ in range(before):
        cursor.nextset()
    return cursor.fetchall()


@cache
def _has_iterative_scan(alias: str) -> bool:
    """Whether the installed pgvector (0.8 or later) has `hnsw.iterative_scan`."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    if row is None:
        return False
    major, minor = (int(part) for part in row[0].split(".")[:2])
    return (major, minor) >= (0, 8)
