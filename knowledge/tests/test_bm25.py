from __future__ import annotations

import math

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from knowledge.analysis import analyze
from knowledge.bm25 import BM25Index, BM25Params, lucene_idf

TEXTS = [
    "An experimental study of a wing in a propeller slipstream.",
    "The lift of a wing depends on the angle of attack of the wing.",
    "Boundary layer transition on a flat plate at high speed.",
    "Heat transfer in the boundary layer of a hypersonic wing.",
    "Propeller noise measured in a wind tunnel.",
    "Wing flutter at transonic speed in the wind tunnel.",
    "混凝土浇筑前应检查模板支撑体系的稳定性。",
    "钢筋隐蔽工程验收合格后方可浇筑混凝土。",
    "Shock waves at supersonic speed.",
    "高处作业人员必须系挂安全带。",
]
DOCS = [analyze(text) for text in TEXTS]
QUERIES = [
    ["wing"],
    analyze("lift of a wing at high angle of attack"),
    analyze("wind tunnel propeller noise"),
    analyze("混凝土浇筑模板"),
    ["wing", "wing", "tunnel"],  # a repeated term counts twice, as in rank-bm25
    ["wing", "no-such-term"],
]


def _reference_scores(docs: list[list[str]], query: list[str], params: BM25Params = BM25Params()) -> np.ndarray:
    """Okapi BM25 with Lucene's idf, term by term and row by row, as the formula reads."""
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    scores = np.zeros(n)
    for term in query:
        df = sum(term in doc for doc in docs)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for row, doc in enumerate(docs):
            tf = doc.count(term)
            scores[row] += idf * tf * (params.k1 + 1) / (tf + params.k1 * (1 - params.b + params.b * len(doc) / avgdl))
    return scores


def _reference_ranking(scores: np.ndarray, top_k: int) -> list[int]:
    best = np.argsort(-scores, kind="stable")[:top_k]
    return [int(row) for row in best if scores[row] > 0]


@pytest.mark.parametrize("query", QUERIES)
def test_it_scores_okapi_bm25_with_lucene_idf(query):
    expected = _reference_scores(DOCS, query)
    assert np.allclose(BM25Index.build(DOCS).scores(query), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("params", [BM25Params(), BM25Params(k1=0.9, b=0.4)])
def test_it_ranks_like_the_formula_on_a_larger_corpus(params):
    rng = np.random.default_rng(3)
    vocabulary = [f"t{i}" for i in range(300)]
    docs = [[vocabulary[i] for i in (rng.zipf(1.3, rng.integers(1, 40)) - 1) % 300] for _ in range(500)]
    index = BM25Index.build(docs, params)
    # Rare and common terms, so both the sparse and the dense summing paths run.
    for query in [["t299", "t150"], ["t0", "t1", "t2"], ["t5"], ["t0", "t77"]]:
        expected = _reference_scores(docs, query, params)
        assert np.allclose(index.scores(query), expected, rtol=1e-5)
        assert [row for row, _ in index.search(query, 7)] == _reference_ranking(expected, 7)


def test_idf_is_positive_and_falls_as_more_rows_hold_the_term():
    idf = lucene_idf(np.array([4, 3, 1]), 4)
    assert idf[0] > 0 and idf[0] < idf[1] < idf[2]
    # rank-bm25 gives a term in every row a floor of a quarter of the mean idf instead,
    # more than a term in just under half the rows gets.
    docs = [["common", *(f"rare{row}-{i}" for i in range(5)), *(["half"] if row < 4 else [])] for row in range(10)]
    reference = BM25Okapi(docs)
    assert reference.idf["common"] > reference.idf["half"]


def test_it_finds_a_one_section_document_that_rank_bm25_scores_at_zero():
    # One short document indexes as its section and its paragraph: every term is in
    # every row, and rank-bm25 scores every match at or below zero.
    section = analyze("Formwork must be checked before pouring concrete.")
    paragraph = analyze("Formwork must be checked.")
    docs = [section, paragraph]
    assert not any(BM25Okapi(docs).get_scores(["formwork"]) > 0)
    hits = BM25Index.build(docs).search(["formwork"], top_k=5)
    assert [row for row, _ in hits] == [1, 0]  # both match; the shorter row ranks first
    # Rarer terms still weigh more: "pour" is in the section only.
    idf = lucene_idf(np.array([2, 1]), 2)
    assert idf[1] > idf[0] > 0


def test_it_returns_best_rows_first_with_positive_scores_only():
    hits = BM25Index.build(DOCS).search(analyze("wing in the wind tunnel"), top_k=3)
    assert [row for row, _ in hits] == [5, 4, 1]  # 5 has all three words, 1 has "wing" twice
    scores = [score for _, score in hits]
    assert scores == sorted(scores, reverse=True) and all(score > 0 for score in scores)


def test_it_only_returns_allowed_rows():
    allowed = np.zeros(len(DOCS), dtype=bool)
    allowed[[1, 3]] = True
    hits = BM25Index.build(DOCS).search(["wing"], top_k=10, allowed=allowed)
    assert [row for row, _ in hits] == [1, 3]


def test_it_rejects_a_mask_that_does_not_fit_the_rows():
    with pytest.raises(ValueError):
        BM25Index.build(DOCS).search(["wing"], allowed=np.ones(3, dtype=bool))
    with pytest.raises(ValueError):
        BM25Index.build(DOCS).search(["wing"], allowed=np.ones(len(DOCS), dtype=int))


@pytest.mark.parametrize("query", [[], ["no-such-term"], ["zzz", "yyy"]])
def test_it_finds_nothing_for_empty_or_unknown_queries(query):
    index = BM25Index.build(DOCS)
    assert index.search(query) == []
    assert not index.scores(query).any()


def test_it_returns_every_match_when_top_k_exceeds_the_corpus():
    hits = BM25Index.build(DOCS).search(["wing"], top_k=1000)
    assert sorted(row for row, _ in hits) == [0, 1, 3, 5]


def test_it_returns_nothing_for_top_k_zero():
    assert BM25Index.build(DOCS).search(["wing"], top_k=0) == []


def test_it_breaks_ties_by_lower_row():
    docs = [["x", "y"], ["x", "z"], ["x", "y"], ["w"], ["v"]]
    hits = BM25Index.build(docs).search(["x"], top_k=2)
    assert [row for row, _ in hits] == [0, 1] and hits[0][1] == hits[1][1]


def test_it_handles_an_empty_corpus_and_empty_rows():
    assert BM25Index.build([]).search(["wing"]) == []
    assert len(BM25Index.build([[], []]).scores(["wing"])) == 2
    index = BM25Index.build([[], ["wing"], [], ["tail"]])
    assert index.search(["wing"]) == [(1, pytest.approx(index.scores(["wing"])[1]))]


def test_it_reports_its_length_and_memory():
    small, large = BM25Index.build(DOCS[:2]), BM25Index.build(DOCS * 20)
    assert (len(small), len(large)) == (2, len(DOCS) * 20)
    assert 0 < small.nbytes < large.nbytes


def test_it_cannot_be_changed_after_build():
    index = BM25Index.build(DOCS)
    with pytest.raises(ValueError):
        index.weights[0] = 1.0


@pytest.mark.parametrize("texts", [
    ["wing flow", "flow flow tunnel", "", "机翼 流动 flow"],
    ["a"],
    [],
])
def test_it_builds_the_same_index_from_token_strings(texts):
    from_lists = BM25Index.build([text.split() for text in texts])
    from_strings = BM25Index.build_from_strings(iter(texts))

    assert from_strings.vocabulary == from_lists.vocabulary and from_strings.n_rows == from_lists.n_rows
    for array_name in ("indptr", "rows", "weights"):
        np.testing.assert_array_equal(getattr(from_strings, array_name), getattr(from_lists, array_name))
