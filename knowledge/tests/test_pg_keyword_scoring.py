"""The PostgreSQL keyword leg's scoring in process: no database needed."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge.bm25 import BM25Index, BM25Params
from knowledge.pg_search import _POSTING, CorpusStats, _BoundedCache, bm25_weights, summed_by_chunk


@pytest.mark.parametrize("spread", [1, 10_000_000])  # a dense id range, then a sparse one
def test_it_sums_each_chunks_weights_in_chunk_order(spread):
    chunks = np.array([5, 3, 5, 9, 3, 3], dtype=np.int64) * spread
    weights = np.array([1.0, 2.0, 0.5, 4.0, 0.25, 0.25])

    ids, totals = summed_by_chunk(chunks, weights)

    assert ids.tolist() == [3 * spread, 5 * spread, 9 * spread]
    assert totals.tolist() == [2.5, 1.5, 4.0]


def _packed(rows: list[tuple[int, int, int]]) -> np.ndarray:
    return np.array(rows, dtype=_POSTING)


def test_it_scores_postings_as_the_embedded_index_does():
    texts = ["zeolite concrete concrete", "concrete formwork", "formwork formwork formwork zeolite", "steel"]
    index = BM25Index.build_from_strings(texts)
    tokens = [text.split() for text in texts]
    postings = {
        term: _packed([(row, doc.count(term), len(doc)) for row, doc in enumerate(tokens) if term in doc])
        for term in ("zeolite", "concrete", "formwork")
    }
    stats = CorpusStats(rows=4, mean_length=sum(map(len, tokens)) / 4, dims=0, indexed_rows=None, embedder="")
    query = {"zeolite": 1, "formwork": 2, "concrete": 1}

    chunks, weights = bm25_weights(postings, query, stats, BM25Params())
    ids, totals = summed_by_chunk(chunks, weights)

    expected = index.scores(["zeolite", "formwork", "formwork", "concrete"])
    assert np.allclose(totals, expected[ids], rtol=1e-6)
    assert set(ids.tolist()) == {0, 1, 2}


def test_the_postings_cache_keeps_the_most_recently_used_within_its_bytes():
    cache = _BoundedCache(max_bytes=100)
    cache.put("a", "A", 40)
    cache.put("b", "B", 40)
    assert cache.get("a") == "A"  # a is now the most recent
    cache.put("c", "C", 40)  # over 100: the least recent (b) goes

    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("A", None, "C")
    cache.put("huge", "H", 101)
    assert cache.get("huge") is None and cache.get("a") == "A"
