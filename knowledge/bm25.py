"""A sparse in-memory BM25 index over rows that come and go, scored exactly.

Scores are Okapi BM25 with Lucene's idf, the same as the PostgreSQL backend's SQL:

    idf(t)     = ln(1 + (N - df + 0.5) / (df + 0.5))
    w(t, d)    = idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avgdl))
    score(q, d) = sum over query tokens t (repeats count again) of w(t, d)

rank-bm25's ``BM25Okapi`` differs only in its idf, ln((N - df + 0.5) / (df + 0.5)) with
negative values floored to a quarter of the vocabulary's mean idf. That floor needs every
term's df to score any query, so a database cannot keep it current cheaply, and it gives
a term in every row more weight than one in just under half of them. Lucene's idf is
positive and falls with df; on the same tokens it scores nDCG@10 0.383 against 0.374 on
cranfield-beir and 0.9913 against 0.9914 on CMRC2018 dev (all 3,219 questions).
rank-bm25 stays the reference baseline in the benchmarks.

Postings hold term counts in CSR layout, one `Postings` segment per batch of rows added:
the postings of term t are ``rows[indptr[t]:indptr[t + 1]]`` with counts at the same
positions. Removing rows only marks them dead; `compacted` drops them. N, df and avgdl
are kept for the live rows, and w is computed at query time for the query's postings
alone, because one added row changes N and avgdl and with them every stored weight would
be stale: an index that took changes scores exactly as one built from its live rows.
A query gathers its terms' slices, weighs them and sums them with ``np.bincount``. Weighing
made a six-word query over 100k generated rows take 2.2 ms instead of 1.5, so an index keeps
each term's weighed postings once asked: a term asked again costs a slice.
"""

from __future__ import annotations

import math
import sys
from array import array
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, count

import numpy as np

# Below this ratio of postings to rows, summing over the touched rows only is cheaper
# than a dense pass over every row.
_SPARSE_RATIO = 0.125
# Terms whose weighed postings an index keeps; past it the cache starts again, which
# bounds its memory by this many terms' postings.
_WEIGHED_TERMS = 4096
_NO_POSTINGS = (np.empty(0, np.int32), np.empty(0, np.float32))


@dataclass(frozen=True)
class BM25Params:
    """Okapi BM25 constants."""

    k1: float = 1.5
    b: float = 0.75


@dataclass(frozen=True, eq=False)
class Postings:
    """The term counts of one run of rows added together, in CSR layout, read-only."""

    vocabulary: dict[str, int] = field(repr=False)
    indptr: np.ndarray = field(repr=False)  # int64, len(vocabulary) + 1
    rows: np.ndarray = field(repr=False)  # int32, row position (in the whole index) of each posting
    tf: np.ndarray = field(repr=False)  # float32, the term's count in that row
    first_row: int
    n_rows: int

    @classmethod
    def from_term_ids(
        cls, vocabulary: dict[str, int], term_ids: np.ndarray, lengths: np.ndarray, first_row: int
    ) -> Postings:
        """Count each row's terms; `lengths` splits `term_ids` into rows numbered from first_row."""
        n_rows = len(lengths)
        row_ids = np.repeat(np.arange(n_rows, dtype=np.int64), lengths)
        terms, rows, tf = _count_pairs(term_ids, row_ids, n_rows)
        indptr = np.concatenate(([0], np.cumsum(np.bincount(terms, minlength=len(vocabulary)))))
        return cls(vocabulary, _frozen(indptr), _frozen((rows + first_row).astype(np.int32)),
                   _frozen(tf.astype(np.float32)), first_row, n_rows)

    @property
    def df(self) -> np.ndarray:
        """Rows holding each term, as built (removed rows still counted)."""
        return np.diff(self.indptr)

    @property
    def nbytes(self) -> int:
        arrays = self.indptr.nbytes + self.rows.nbytes + self.tf.nbytes
        # Term strings, their int ids (28 bytes each above 256) and the dict's own table.
        words = sum(sys.getsizeof(term) for term in self.vocabulary)
        return arrays + words + sys.getsizeof(self.vocabulary) + 28 * len(self.vocabulary)


@dataclass(frozen=True, eq=False)
class BM25Index:
    """BM25 over rows that can be added and removed; nothing changes in place.

    Rows keep their positions until `compacted`: removed ones stay as dead rows that no
    query finds, and added ones go after the last.
    """

    segments: tuple[Postings, ...] = field(repr=False)
    dfs: tuple[np.ndarray, ...] = field(repr=False)  # per segment: live rows holding each term
    lengths: np.ndarray = field(repr=False)  # int64, token count of each row
    alive: np.ndarray = field(repr=False)  # bool, False once the row is removed
    # float32 k1 * (1 - b + b * len / avgdl) of each row; +inf for a dead row, so its
    # weights come out 0 and it never ranks.
    norm: np.ndarray = field(repr=False)
    n_live: int
    params: BM25Params = BM25Params()
    # Each queried term's weighed postings, per (segment, term id): an index never changes, so
    # a term asked again costs a slice, as it did when weights were stored at build time.
    _weighed: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(
        cls, docs_tokens: Sequence[Sequence[str]], params: BM25Params = BM25Params()
    ) -> BM25Index:
        """Index each row's tokens; row positions are the positions in docs_tokens."""
        lengths = np.fromiter(map(len, docs_tokens), dtype=np.int64, count=len(docs_tokens))
        index = cls.empty(params)
        if not len(lengths):
            return index
        vocabulary, term_ids = _term_ids(docs_tokens, int(lengths.sum()))
        return index._with_segment(Postings.from_term_ids(vocabulary, term_ids, lengths, 0), lengths)

    @classmethod
    def build_from_strings(cls, texts: Iterable[str], params: BM25Params = BM25Params()) -> BM25Index:
        """Index rows given as space-separated tokens, one row's token list alive at a time.

        The same index as `build([text.split() for text in texts])`, without holding every
        row's token strings at once: 12M of them took ~1 GB for 100k chunks.
        """
        index = cls.empty(params)
        vocabulary, term_ids, lengths = _string_term_ids(texts)
        if not len(lengths):
            return index
        return index._with_segment(Postings.from_term_ids(vocabulary, term_ids, lengths, 0), lengths)

    @classmethod
    def empty(cls, params: BM25Params = BM25Params()) -> BM25Index:
        """An index of no rows."""
        nothing = np.zeros(0, dtype=np.int64)
        return cls._assemble((), (), nothing, np.zeros(0, dtype=bool), params)

    @classmethod
    def _assemble(cls, segments, dfs, lengths: np.ndarray, alive: np.ndarray, params: BM25Params) -> BM25Index:
        """Make an index of these parts, with its live-row statistics worked out."""
        n_live = int(np.count_nonzero(alive))
        total = int(lengths[alive].sum())
        avgdl = total / n_live if total else 1.0
        norm = params.k1 * (1 - params.b + params.b * lengths / avgdl)
        norm = np.where(alive, norm, np.inf).astype(np.float32)
        return cls(tuple(segments), tuple(dfs), _frozen(lengths), _frozen(alive), _frozen(norm), n_live, params)

    def appended(self, texts: Iterable[str]) -> BM25Index:
        """Index more rows, given as space-separated tokens, after the last one.

        Meant for a few documents' rows at a time: their token lists are all held at once,
        which numbers the terms faster than `build_from_strings` does.
        """
        docs_tokens = [text.split() for text in texts]
        if not docs_tokens:
            return self
        lengths = np.fromiter(map(len, docs_tokens), dtype=np.int64, count=len(docs_tokens))
        vocabulary, term_ids = _term_ids(docs_tokens, int(lengths.sum()))
        return self._with_segment(Postings.from_term_ids(vocabulary, term_ids, lengths, self.n_rows), lengths)

    def _with_segment(self, postings: Postings, lengths: np.ndarray) -> BM25Index:
        alive = np.concatenate((self.alive, np.ones(len(lengths), dtype=bool)))
        lengths = np.concatenate((self.lengths, lengths))
        return self._assemble((*self.segments, postings), (*self.dfs, _frozen(postings.df)), lengths, alive, self.params)

    def without(self, rows: Mapping[int, str]) -> BM25Index:
        """Remove live rows, each given with the space-separated tokens it was indexed with.

        The tokens say whose document frequencies fall without a pass over the postings.
        """
        if not rows:
            return self
        positions = np.fromiter(rows, dtype=np.int64, count=len(rows))
        if positions.min() < 0 or positions.max() >= self.n_rows or not self.alive[positions].all():
            raise ValueError("only live rows of the index can be removed")
        alive = self.alive.copy()
        alive[positions] = False
        dfs = list(self.dfs)
        for segment, term_ids in self._term_ids_by_segment(rows).items():
            df = dfs[segment] - np.bincount(term_ids, minlength=len(dfs[segment])).astype(dfs[segment].dtype)
            dfs[segment] = _frozen(df)
        return self._assemble(self.segments, dfs, self.lengths, alive, self.params)

    def _term_ids_by_segment(self, rows: Mapping[int, str]) -> dict[int, np.ndarray]:
        firsts = [segment.first_row for segment in self.segments]
        found: dict[int, list[int]] = defaultdict(list)
        for row, text in rows.items():
            segment = bisect_right(firsts, row) - 1
            vocabulary = self.segments[segment].vocabulary
            found[segment].extend(map(vocabulary.__getitem__, set(text.split())))
        return {segment: np.array(ids, dtype=np.int64) for segment, ids in found.items()}

    def compacted(self) -> BM25Index:
        """The same index over the live rows only, in one segment, renumbered in their order.

        Terms no live row holds are dropped. Scores are unchanged; row r becomes
        `np.cumsum(alive)[r] - 1`.
        """
        vocabulary, term_maps = self._live_vocabulary()
        new_rows = np.cumsum(self.alive) - 1
        parts = [_live_postings(segment, term_map, self.alive, new_rows)
                 for segment, term_map in zip(self.segments, term_maps, strict=True)]
        terms = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        rows = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
        tf = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.float32)
        order = np.argsort(terms * max(self.n_live, 1) + rows)  # (term, row) pairs are unique
        indptr = np.concatenate(([0], np.cumsum(np.bincount(terms, minlength=len(vocabulary)))))
        postings = Postings(vocabulary, _frozen(indptr), _frozen(rows[order].astype(np.int32)),
                            _frozen(tf[order]), 0, self.n_live)
        return self.empty(self.params)._with_segment(postings, self.lengths[self.alive])

    def _live_vocabulary(self) -> tuple[dict[str, int], list[np.ndarray]]:
        """Number the terms some live row holds; map each segment's term ids to the new ones."""
        vocabulary: dict[str, int] = {}
        term_maps = []
        for segment, df in zip(self.segments, self.dfs, strict=True):
            names = list(segment.vocabulary)  # in id order: ids are given in insertion order
            term_map = np.full(len(names), -1, dtype=np.int64)
            for term_id in np.flatnonzero(df > 0).tolist():
                term_map[term_id] = vocabulary.setdefault(names[term_id], len(vocabulary))
            term_maps.append(term_map)
        return vocabulary, term_maps

    @property
    def n_rows(self) -> int:
        """Row positions in use, dead rows included."""
        return len(self.lengths)

    def __len__(self) -> int:
        """Return the number of row positions (live and dead)."""
        return self.n_rows

    @property
    def n_dead(self) -> int:
        return self.n_rows - self.n_live

    @property
    def nbytes(self) -> int:
        """Return the approximate memory held by the arrays and the vocabularies."""
        per_row = self.lengths.nbytes + self.alive.nbytes + self.norm.nbytes
        return per_row + sum(s.nbytes for s in self.segments) + sum(df.nbytes for df in self.dfs)

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """Return the float64 BM25 score of every row, zero where no term matches."""
        rows, weights, _ = self._postings(query_tokens)
        totals = np.bincount(rows, weights=weights, minlength=self.n_rows)
        return totals.astype(np.float64, copy=False)  # bincount of nothing is int

    def search(
        self, query_tokens: Sequence[str], top_k: int = 10, *, allowed: np.ndarray | None = None,
        tiebreak: np.ndarray | None = None,
    ) -> list[tuple[int, float]]:
        """Return up to top_k (row, score) pairs with a positive score, best first.

        Equal scores go to the lower row, or with `tiebreak` (a key per row) the lower key.
        """
        if allowed is not None and (allowed.dtype != np.bool_ or allowed.shape != (self.n_rows,)):
            raise ValueError(f"allowed must be a boolean mask of {self.n_rows} rows")
        rows, weights, n_terms = self._postings(query_tokens)
        if allowed is not None:
            keep = allowed[rows]
            rows, weights = rows[keep], weights[keep]
        if top_k <= 0 or rows.size == 0:
            return []
        if n_terms == 1:
            # One term's postings name each row once: nothing to add up.
            return best_pairs(rows, weights, top_k, tiebreak)
        if rows.size < _SPARSE_RATIO * self.n_rows:
            touched, inverse = np.unique(rows, return_inverse=True)
            return best_pairs(touched, np.bincount(inverse, weights=weights), top_k, tiebreak)
        totals = np.bincount(rows, weights=weights, minlength=self.n_rows)
        # Select before ranking: np.partition crawls over a long run of equal zeros.
        touched = np.flatnonzero(totals > 0)
        return best_pairs(touched, totals[touched], top_k, tiebreak)

    def _postings(self, query_tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray, int]:
        """Gather and weigh the postings of known query terms, repeats counted; count the terms."""
        rows: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        for term, repeats in Counter(query_tokens).items():
            weighed = self._weighed.get(term)
            if weighed is None:
                weighed = self._weigh(term)
                if len(self._weighed) >= _WEIGHED_TERMS:
                    self._weighed.clear()
                self._weighed[term] = weighed
            term_rows, weight = weighed
            if term_rows.size:
                rows.append(term_rows)
                weights.append(weight * np.float32(repeats) if repeats > 1 else weight)
        if not rows:
            return np.empty(0, np.int32), np.empty(0, np.float32), 0
        if len(rows) == 1:
            return rows[0], weights[0], 1
        return np.concatenate(rows), np.concatenate(weights), len(rows)

    def _weigh(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """The term's postings in every segment, and idf * tf * (k1 + 1) / (tf + norm) of each."""
        spans = self._spans(term)
        if not spans:
            return _NO_POSTINGS
        scale = np.float32(_idf(sum(df for _, _, df in spans), self.n_live) * (self.params.k1 + 1))
        rows, weights = [], []
        for segment, term_id, _ in spans:
            bounds = segment.indptr.data  # a memoryview: indexing it yields plain ints, fast
            start, end = bounds[term_id], bounds[term_id + 1]
            term_rows, tf = segment.rows[start:end], segment.tf[start:end]
            weight = self.norm.take(term_rows)  # then tf * scale / (tf + norm), in place
            np.add(weight, tf, out=weight)
            np.divide(tf, weight, out=weight)
            weight *= scale
            rows.append(term_rows)
            weights.append(weight)
        if len(rows) == 1:
            return rows[0], _frozen(weights[0])
        # Segments hold ascending row ranges, so the term's rows still ascend when joined.
        return _frozen(np.concatenate(rows)), _frozen(np.concatenate(weights))

    def _spans(self, term: str) -> list[tuple[Postings, int, int]]:
        """(segment, term id, live df there) of each segment that knows the term."""
        return [(segment, term_id, int(df[term_id]))
                for segment, df in zip(self.segments, self.dfs, strict=True)
                if (term_id := segment.vocabulary.get(term)) is not None]


def lucene_idf(df: np.ndarray, n_rows: int) -> np.ndarray:
    """Return Lucene's BM25 idf per term: positive, and lower the more rows hold the term."""
    return np.log1p((n_rows - df + 0.5) / (df + 0.5))


def _idf(df: int, n_rows: int) -> float:
    """lucene_idf of one term, without numpy's per-call overhead."""
    return math.log1p((n_rows - df + 0.5) / (df + 0.5))


def _term_ids(docs_tokens: Sequence[Sequence[str]], total: int) -> tuple[dict[str, int], np.ndarray]:
    """Number the distinct terms in order of first appearance; return every token's id."""
    # Two passes that iterate in C beat one Python-level setdefault per token.
    distinct = dict.fromkeys(chain.from_iterable(docs_tokens))
    vocabulary = dict(zip(distinct, count()))
    ids = map(vocabulary.__getitem__, chain.from_iterable(docs_tokens))
    return vocabulary, np.fromiter(ids, dtype=np.int64, count=total)


def _string_term_ids(texts: Iterable[str]) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
    """Number the terms of space-separated rows; return them, every token's id and row lengths."""
    vocabulary: dict[str, int] = {}
    assign = vocabulary.setdefault
    term_ids, lengths = array("q"), array("q")
    for text in texts:
        tokens = text.split()
        lengths.append(len(tokens))
        term_ids.extend([assign(token, len(vocabulary)) for token in tokens])
    return vocabulary, np.frombuffer(term_ids, dtype=np.int64), np.frombuffer(lengths, dtype=np.int64)


def _count_pairs(
    term_ids: np.ndarray, row_ids: np.ndarray, n_rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (term, row, tf) for each distinct pair, sorted by term then row."""
    keys, tf = np.unique(term_ids * max(n_rows, 1) + row_ids, return_counts=True)
    return keys // max(n_rows, 1), keys % max(n_rows, 1), tf


def _live_postings(
    segment: Postings, term_map: np.ndarray, alive: np.ndarray, new_rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A segment's postings of live rows as (new term id, new row, tf)."""
    terms = np.repeat(term_map, np.diff(segment.indptr))
    keep = alive[segment.rows]
    return terms[keep], new_rows[segment.rows[keep]], segment.tf[keep]


def best_pairs(
    rows: np.ndarray, totals: np.ndarray, top_k: int, tiebreak: np.ndarray | None = None
) -> list[tuple[int, float]]:
    """Return the best top_k positive (row, score) pairs; ties go to the lower row (or key)."""
    picked = np.flatnonzero(_best_mask(totals, top_k))
    rows, scores = rows[picked], totals[picked]
    if tiebreak is None:
        # rows ascend in every caller, so a stable sort breaks ties by row.
        order = np.argsort(-scores, kind="stable")[:top_k]
    else:
        order = np.lexsort((tiebreak[rows], -scores))[:top_k]
    return list(zip(rows[order].tolist(), scores[order].tolist(), strict=True))


def _best_mask(totals: np.ndarray, top_k: int) -> np.ndarray:
    """Mark positive totals at or above the k-th best, keeping every tie with it."""
    if totals.size > top_k:
        kth = np.partition(totals, totals.size - top_k)[totals.size - top_k]
        if kth > 0:
            return totals >= kth
    return totals > 0


def _frozen(array: np.ndarray) -> np.ndarray:
    """Make array read-only: indexes are shared between requests and never change."""
    array.flags.writeable = False
    return array
