"""The full-stack search backend: pgvector HNSW and PostgreSQL full-text, no index in process.

Every call is SQL over the KB's live search entries (`chunk.version = document.live_version`,
under the embedder the KB row names now), so all processes see a change once it commits.

- Vector: `embedding::vector(D) <=> q` with `dims = D`, the expression and predicate of the
  partial HNSW index of that dimension (migration 0002); pgvector's iterative scan keeps a
  filtered scan going until enough rows pass. Whether to use the index or score the KB's
  rows exactly is decided here, from cached counts (see _HNSW_READ_COST); a restriction to
  given chunks is always exact.
- Keyword: the GIN index on `to_tsvector('simple', tokens)` finds the rows holding each
  query token; they are ranked by Okapi BM25 (Lucene's idf), with term frequencies counted
  in the space-joined tokens and N and the mean length cached per content version.

Both legs rank the KB's entries on their own table, then test liveness (two primary-key
lookups) only for the best rows, best first: joining chunk and document before ranking
would make the planner hash whole tables or give up the HNSW ordering.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cache

import numpy as np
from django.core.cache import cache as shared_cache
from django.db import connection, transaction
from django.db.models import F, QuerySet, Subquery

from agentic_rag.vectors import to_pgvector_text

from .bm25 import BM25Params
from .models import Chunk, KnowledgeBase, SearchEntry
from .search import CHUNK_FIELDS, ChunkInfo, Hit, chunk_info, most_tagged

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
_FETCH_FACTOR, _FETCH_EXTRA = 2, 10
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

# Each term's postings come from its own index scan, so only rows holding a term are read,
# and df is their count. A row's length is its tokens' bytes, a stand-in for their count
# that needs no parsing (BM25 nDCG@10 on cranfield-beir: 0.380 with bytes, 0.383 with
# counts). tf is a lookup in the row's term counts (jsonb, kept by a trigger: migration
# 0004); a restricted query looks it up only in the chunks it may return. A query's
# cross-language variants share most terms, so one statement reads each term's postings
# once and keeps each chunk's best variant (one statement per variant: keyword leg p50 13.9
# ms on cranfield-beir; one for all: 12.0 ms).
_KEYWORD_SQL = """
    WITH query(variant, term, qtf) AS (
        SELECT * FROM unnest(%(variants)s::int[], %(terms)s::text[], %(counts)s::int[])
    ),
    postings AS (
        SELECT e.chunk_id, t.term, octet_length(e.tokens) AS dl, {tf} AS tf
        FROM unnest(%(distinct_terms)s::text[]) AS t(term)
        JOIN knowledge_searchentry e
          ON to_tsvector('simple', e.tokens) @@ plainto_tsquery('simple', t.term)
        WHERE {entries} AND e.level = %(level)s
    ),
    idf AS (
        SELECT term, ln(1 + (%(n)s::float8 - count(*) + 0.5) / (count(*) + 0.5)) AS idf
        FROM postings GROUP BY term
    ),
    scored AS (
        SELECT q.variant, p.chunk_id,
               sum(q.qtf * i.idf * p.tf * (%(k1)s::float8 + 1) / (p.tf + %(k1)s::float8
                   * (1 - %(b)s::float8 + %(b)s::float8 * p.dl / %(avgdl)s::float8))) AS score
        FROM query q JOIN postings p USING (term) JOIN idf i USING (term)
        WHERE p.tf > 0
        GROUP BY q.variant, p.chunk_id
    )
    SELECT s.chunk_id, s.score, {is_live}
    FROM (
        SELECT chunk_id, max(score) AS score FROM scored
        GROUP BY chunk_id
        ORDER BY score DESC, chunk_id
        LIMIT %(fetch)s
    ) s
"""
_TF = "coalesce((e.term_counts ->> t.term)::int, 0)"
_TF_ONLY = f"CASE WHEN e.chunk_id = ANY(%(only)s::bigint[]) THEN {_TF} ELSE 0 END"

_STATS_SQL = f"""
    SELECT count(*), coalesce(avg(octet_length(e.tokens)), 0), coalesce(max(e.dims), 0),
           (SELECT greatest(i.reltuples, 0) FROM pg_class i
            WHERE i.relname = 'knowledge_searchentry_hnsw_' || max(e.dims))
    FROM knowledge_searchentry e
    WHERE {_ENTRIES} AND e.level = %(level)s
"""
_STATS_TTL_S = 3600

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
    mean_length: float  # of the tokens, in bytes
    dims: int
    # Rows in the HNSW index of that dimension, every KB's, as of the last ANALYZE (0: not
    # counted yet); None when no index covers the dimension.
    indexed_rows: int | None

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


def keyword_sql(*, restricted: bool) -> str:
    """The keyword leg; restricted ranks only the chunks in %(only)s (statistics stay whole)."""
    return _KEYWORD_SQL.format(entries=_ENTRIES, is_live=_IS_LIVE, tf=_TF_ONLY if restricted else _TF)


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

    def keyword(self, kb, tokens: Sequence[str], *, level: int, top_k: int, only=None) -> list[Hit]:
        return self.keyword_variants(kb, [tokens], level=level, top_k=top_k, only=only)

    def keyword_variants(self, kb, variants: Sequence[Sequence[str]], *, level: int, top_k: int,
                         only=None) -> list[Hit]:
        # A token without a letter or digit parses to no lexeme: the index cannot look it up.
        counted = [Counter(token for token in tokens if any(ch.isalnum() for ch in token)) for tokens in variants]
        rows = [(variant, term, qtf) for variant, counts in enumerate(counted) for term, qtf in counts.items()]
        if not rows or top_k <= 0 or (only is not None and not only):
            return []
        stats = self.corpus_stats(kb, level)
        if stats.rows == 0:
            return []
        numbers, terms, counts = (list(column) for column in zip(*rows, strict=True))
        params = {
            "kb": kb.pk, "level": level, "variants": numbers, "terms": terms, "counts": counts,
            "distinct_terms": sorted(set(terms)), "n": stats.rows, "avgdl": stats.mean_length or 1.0,
            "k1": float(self.params.k1), "b": float(self.params.b), "only": _ids(only),
        }
        sql = keyword_sql(restricted=only is not None)
        return _best_live(lambda fetch: (sql, False), params, top_k)

    def corpus_stats(self, kb, level: int) -> CorpusStats:
        """Row count, mean length and index size of the KB level, cached per content version."""
        row = KnowledgeBase.objects.filter(pk=kb.pk).values_list("content_version", "embedder", "created_at")
        version = row.first()
        if version is None:
            return CorpusStats(0, 0.0, 0, None)
        # created_at tells a KB from one with the same pk in a database created again (tests).
        content_version, embedder, created_at = version
        key = f"pg-search:stats:{kb.pk}:{created_at.timestamp()}:{content_version}:{embedder}:{level}"
        stats = shared_cache.get(key)
        if stats is None:
            with connection.cursor() as cursor:
                cursor.execute(_STATS_SQL, {"kb": kb.pk, "level": level})
                rows, mean_length, dims, indexed_rows = cursor.fetchone()
            stats = (int(rows), float(mean_length), int(dims), None if indexed_rows is None else int(indexed_rows))
            shared_cache.set(key, stats, _STATS_TTL_S)
        return CorpusStats(*stats)

    def vector(self, kb, query: np.ndarray, *, level: int, top_k: int, only=None) -> list[Hit]:
        query = np.asarray(query, dtype=np.float32).ravel()
        if top_k <= 0 or not query.any() or (only is not None and not only):
            return []  # a zero vector has no direction: every cosine would be NaN
        dims = int(query.shape[0])
        # Without pgvector 0.8's iterative scan, a filtered HNSW scan may come back short.
        is_ann_possible = only is None and _has_iterative_scan(connection.alias)
        stats = self.corpus_stats(kb, level) if is_ann_possible else None
        params = {"kb": kb.pk, "level": level, "query": to_pgvector_text(query), "only": _ids(only)}

        def plan(fetch: int) -> tuple[str, bool]:
            is_ann = stats is not None and stats.is_worth_hnsw(dims, fetch)
            return vector_sql(dims, is_ann=is_ann, restricted=only is not None), is_ann

        return _best_live(plan, params, top_k)

    def chunks(self, kb, chunk_ids: Collection[int]) -> dict[int, ChunkInfo]:
        if not chunk_ids:
            return {}
        rows = _live_entries(kb).filter(chunk_id__in=list(chunk_ids)).values_list(*CHUNK_FIELDS)
        return {row[0]: chunk_info(row) for row in rows}

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

    def neighbours(self, kb, chunks: Sequence[ChunkInfo]) -> Mapping[tuple[int, int, int], str]:
        wanted = sorted({(c.doc_id, c.level, c.index + step) for c in chunks for step in (-1, 1)})
        wanted = [key for key in wanted if key[2] >= 0]
        if not wanted:
            return {}
        docs, levels, indexes = (list(column) for column in zip(*wanted, strict=True))
        with connection.cursor() as cursor:
            cursor.execute(_NEIGHBOURS_SQL, {"kb": kb.pk, "docs": docs, "levels": levels, "indexes": indexes})
            return {(doc, level, index): text for doc, level, index, text in cursor.fetchall()}

    def size(self, kb) -> dict[str, int]:
        return {"chunks": _live_entries(kb).count(), "bytes": 0}

    def has_entries(self, kb) -> bool:
        return _live_entries(kb).exists()

    def embedder_name(self, kb) -> str:
        return KnowledgeBase.objects.filter(pk=kb.pk).values_list("embedder", flat=True).first() or ""


def _best_live(plan: Callable[[int], tuple[str, bool]], params: dict, top_k: int) -> list[Hit]:
    """Run a ranked query whose rows say if their chunk is live; fetch more until top_k are.

    `plan(fetch)` gives the SQL and whether it must scan the HNSW index.
    """
    fetch = _FETCH_FACTOR * top_k + _FETCH_EXTRA
    while True:
        sql, is_ann = plan(fetch)
        # SET LOCAL needs a transaction of its own; the keyword leg does not.
        with transaction.atomic() if is_ann else nullcontext(), connection.cursor() as cursor:
            if is_ann:
                _use_hnsw(cursor, fetch)
            cursor.execute(sql, {**params, "fetch": fetch})
            rows = cursor.fetchall()
        hits = [(int(chunk_id), float(score)) for chunk_id, score, is_live in rows if is_live]
        if len(hits) >= top_k or len(rows) < fetch:
            # An iterative HNSW scan may yield rows slightly out of order (relaxed_order).
            hits = [hit for hit in hits if np.isfinite(hit[1])]
            return sorted(hits, key=lambda hit: (-hit[1], hit[0]))[:top_k]
        fetch *= 4


def _ids(chunk_ids: Collection[int] | None) -> list[int]:
    return [int(chunk_id) for chunk_id in chunk_ids] if chunk_ids is not None else []


def _use_hnsw(cursor, fetch: int) -> None:
    """For this transaction: order by the HNSW index, not a sort, and scan on until `fetch` pass."""
    ef_search = str(min(max(_MIN_EF_SEARCH, fetch), _MAX_EF_SEARCH))
    cursor.execute(
        "SELECT set_config('hnsw.ef_search', %s, true), set_config('enable_sort', 'off', true),"
        " set_config('hnsw.iterative_scan', 'relaxed_order', true)",
        [ef_search],
    )


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
