"""A sparse in-memory BM25 index: per-term postings with precomputed weights.

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

w is computed once at build time and stored per posting, in CSR layout: the postings
of term t are ``rows[indptr[t]:indptr[t + 1]]`` with weights at the same positions.
A query gathers its terms' slices and sums them with ``np.bincount``.
"""

from __future__ import annotations

import sys
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain, count

import numpy as np

# Below this ratio of postings to rows, summing over the touched rows only is cheaper
# than a dense pass over every row.
_SPARSE_RATIO = 0.125


@dataclass(frozen=True)
class BM25Params:
    """Okapi BM25 constants."""

    k1: float = 1.5
    b: float = 0.75


@dataclass(frozen=True, eq=False)
class BM25Index:
    """Term postings (row positions and BM25 weights) in CSR layout."""

    vocabulary: dict[str, int] = field(repr=False)
    indptr: np.ndarray = field(repr=False)  # int64, len(vocabulary) + 1
    rows: np.ndarray = field(repr=False)  # int32, row position of each posting
    weights: np.ndarray = field(repr=False)  # float32, w(t, d) of each posting
    n_rows: int
    params: BM25Params = BM25Params()

    @classmethod
    def build(
        cls, docs_tokens: Sequence[Sequence[str]], params: BM25Params = BM25Params()
    ) -> BM25Index:
        """Index each row's tokens; row positions are the positions in docs_tokens."""
        lengths = np.fromiter(map(len, docs_tokens), dtype=np.int64, count=len(docs_tokens))
        vocabulary, term_ids = _term_ids(docs_tokens, int(lengths.sum()))
        return cls._from_term_ids(vocabulary, term_ids, lengths, params)

    @classmethod
    def build_from_strings(cls, texts: Iterable[str], params: BM25Params = BM25Params()) -> BM25Index:
        """Index rows given as space-separated tokens, one row's token list alive at a time.

        The same index as `build([text.split() for text in texts])`, without holding every
        row's token strings at once: 12M of them took ~1 GB for 100k chunks.
        """
        vocabulary: dict[str, int] = {}
        assign = vocabulary.setdefault
        term_ids, lengths = array("q"), array("q")
        for text in texts:
            tokens = text.split()
            lengths.append(len(tokens))
            term_ids.extend([assign(token, len(vocabulary)) for token in tokens])
        return cls._from_term_ids(
            vocabulary, np.frombuffer(term_ids, dtype=np.int64), np.frombuffer(lengths, dtype=np.int64), params
        )

    @classmethod
    def _from_term_ids(
        cls, vocabulary: dict[str, int], term_ids: np.ndarray, lengths: np.ndarray, params: BM25Params
    ) -> BM25Index:
        n_rows = len(lengths)
        row_ids = np.repeat(np.arange(n_rows, dtype=np.int64), lengths)
        terms, rows, tf = _count_pairs(term_ids, row_ids, n_rows)
        df = np.bincount(terms, minlength=len(vocabulary))
        idf = lucene_idf(df, n_rows)
        avgdl = lengths.mean() if lengths.sum() else 1.0
        weights = _term_weights(idf[terms], tf, lengths[rows] / avgdl, params)
        indptr = np.concatenate(([0], np.cumsum(df)))
        return cls(vocabulary, _frozen(indptr), _frozen(rows.astype(np.int32)),
                   _frozen(weights.astype(np.float32)), n_rows, params)

    def __len__(self) -> int:
        """Return the number of rows indexed."""
        return self.n_rows

    @property
    def nbytes(self) -> int:
        """Return the approximate memory held by the arrays and the vocabulary."""
        arrays = self.indptr.nbytes + self.rows.nbytes + self.weights.nbytes
        # Term strings, their int ids (28 bytes each above 256) and the dict's own table.
        words = sum(sys.getsizeof(term) for term in self.vocabulary)
        return arrays + words + sys.getsizeof(self.vocabulary) + 28 * len(self.vocabulary)

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """Return the float64 BM25 score of every row, zero where no term matches."""
        rows, weights, _ = self._postings(query_tokens)
        totals = np.bincount(rows, weights=weights, minlength=self.n_rows)
        return totals.astype(np.float64, copy=False)  # bincount of nothing is int

    def search(
        self, query_tokens: Sequence[str], top_k: int = 10, *, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """Return up to top_k (row, score) pairs with a positive score, best first."""
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
            return _top_k(rows, weights, top_k)
        if rows.size < _SPARSE_RATIO * self.n_rows:
            touched, inverse = np.unique(rows, return_inverse=True)
            return _top_k(touched, np.bincount(inverse, weights=weights), top_k)
        totals = np.bincount(rows, weights=weights, minlength=self.n_rows)
        # Select before ranking: np.partition crawls over a long run of equal zeros.
        touched = np.flatnonzero(totals > 0)
        return _top_k(touched, totals[touched], top_k)

    def _postings(self, query_tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray, int]:
        """Gather the postings of known query terms, weighted by repeats; count the terms."""
        bounds = self.indptr.data  # a memoryview: indexing it yields plain ints, fast
        spans = [(bounds[term_id], bounds[term_id + 1], repeats)
                 for term, repeats in Counter(query_tokens).items()
                 if (term_id := self.vocabulary.get(term)) is not None]
        if not spans:
            return np.empty(0, np.int32), np.empty(0, np.float32), 0
        rows = [self.rows[start:end] for start, end, _ in spans]
        weights = [self.weights[start:end] * np.float32(repeats) if repeats > 1
                   else self.weights[start:end] for start, end, repeats in spans]
        if len(spans) == 1:
            return rows[0], weights[0], 1
        return np.concatenate(rows), np.concatenate(weights), len(spans)


def lucene_idf(df: np.ndarray, n_rows: int) -> np.ndarray:
    """Return Lucene's BM25 idf per term: positive, and lower the more rows hold the term."""
    return np.log1p((n_rows - df + 0.5) / (df + 0.5))


def _term_ids(docs_tokens: Sequence[Sequence[str]], total: int) -> tuple[dict[str, int], np.ndarray]:
    """Number the distinct terms in order of first appearance; return every token's id."""
    # Two passes that iterate in C beat one Python-level setdefault per token.
    distinct = dict.fromkeys(chain.from_iterable(docs_tokens))
    vocabulary = dict(zip(distinct, count()))
    ids = map(vocabulary.__getitem__, chain.from_iterable(docs_tokens))
    return vocabulary, np.fromiter(ids, dtype=np.int64, count=total)


def _count_pairs(
    term_ids: np.ndarray, row_ids: np.ndarray, n_rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (term, row, tf) for each distinct pair, sorted by term then row."""
    keys, tf = np.unique(term_ids * max(n_rows, 1) + row_ids, return_counts=True)
    return keys // max(n_rows, 1), keys % max(n_rows, 1), tf


def _term_weights(
    idf: np.ndarray, tf: np.ndarray, relative_lengths: np.ndarray, params: BM25Params
) -> np.ndarray:
    """Return w(t, d) for each posting, in float64; lengths are relative to avgdl."""
    norm = params.k1 * (1 - params.b + params.b * relative_lengths)
    return idf * tf * (params.k1 + 1) / (tf + norm)


def _top_k(rows: np.ndarray, totals: np.ndarray, top_k: int) -> list[tuple[int, float]]:
    """Return the best top_k positive (row, score) pairs; ties go to the lower row."""
    picked = np.flatnonzero(_best_mask(totals, top_k))
    rows, scores = rows[picked], totals[picked]
    # rows ascend in every caller, so a stable sort breaks ties by row.
    order = np.argsort(-scores, kind="stable")[:top_k]
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
