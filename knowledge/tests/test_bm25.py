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
    index = BM25Index.build(DOCS).appended(["wing wing"]).without({0: " ".join(DOCS[0])})
    for array in (index.segments[0].tf, index.segments[1].rows, index.dfs[0], index.alive, index.norm):
        with pytest.raises(ValueError):
            array[0] = 1


@pytest.mark.parametrize("texts", [
    ["wing flow", "flow flow tunnel", "", "机翼 流动 flow"],
    ["a"],
    [],
])
def test_it_builds_the_same_index_from_token_strings(texts):
    from_lists = BM25Index.build([text.split() for text in texts])
    from_strings = BM25Index.build_from_strings(iter(texts))

    assert from_strings.n_rows == from_lists.n_rows == len(texts)
    assert len(from_strings.segments) == len(from_lists.segments) == (1 if texts else 0)
    for strings, lists in zip(from_strings.segments, from_lists.segments, strict=True):
        assert strings.vocabulary == lists.vocabulary
        for array_name in ("indptr", "rows", "tf"):
            np.testing.assert_array_equal(getattr(strings, array_name), getattr(lists, array_name))
    np.testing.assert_array_equal(from_strings.norm, from_lists.norm)


# --- rows added and removed ------------------------------------------------------------------


def _random_texts(rng: np.random.Generator, count: int, vocabulary: int = 60) -> list[str]:
    lengths = rng.integers(0, 25, size=count)
    return [" ".join(f"t{rank}" for rank in (rng.zipf(1.3, length) - 1) % vocabulary) for length in lengths]


QUERIES_BY_RANK = [["t0"], ["t1", "t0", "t0"], ["t7", "t30"], ["t59", "t2", "t3", "t4"], ["t0", "t1", "t2", "t3", "t5"]]


def _assert_scores_as_built_from(index: BM25Index, live: dict[int, str]) -> None:
    """Scores of every live row equal those of a fresh build over the live rows alone."""
    rows = sorted(live)
    fresh = BM25Index.build_from_strings(live[row] for row in rows)
    for query in QUERIES_BY_RANK:
        scores = index.scores(query)
        np.testing.assert_allclose(scores[rows], fresh.scores(query), rtol=1e-6)
        assert not np.delete(scores, rows).any()  # removed rows score nothing
        expected = [(rows[row], score) for row, score in fresh.search(query, 8)]
        found = index.search(query, 8)
        assert [row for row, _ in found] == [row for row, _ in expected]
        np.testing.assert_allclose([s for _, s in found], [s for _, s in expected], rtol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_rows_added_and_removed_score_as_a_fresh_build(seed):
    rng = np.random.default_rng(seed)
    texts = _random_texts(rng, 300)
    index = BM25Index.build_from_strings(texts)
    live = dict(enumerate(texts))
    for _ in range(6):  # a document replaced: some rows out, a few new ones in
        out = {int(row): live.pop(int(row)) for row in rng.choice(sorted(live), size=20, replace=False)}
        added = _random_texts(rng, int(rng.integers(0, 30)))
        index = index.without(out).appended(added)
        live.update({index.n_rows - len(added) + i: text for i, text in enumerate(added)})
        _assert_scores_as_built_from(index, live)

    assert len(index.segments) > 1 and index.n_live == len(live)
    compact = index.compacted()
    assert len(compact.segments) == 1 and compact.n_rows == compact.n_live == len(live)
    _assert_scores_as_built_from(compact, dict(enumerate(live[row] for row in sorted(live))))
    fresh = BM25Index.build_from_strings(live[row] for row in sorted(live))
    assert set(compact.segments[0].vocabulary) == set(fresh.segments[0].vocabulary)


def test_a_term_whose_rows_are_all_removed_finds_nothing():
    index = BM25Index.build_from_strings(["alpha beta", "beta gamma", "gamma"])

    changed = index.without({0: "alpha beta"})

    assert changed.search(["alpha"]) == [] and not changed.scores(["alpha"]).any()
    assert [row for row, _ in changed.search(["beta", "gamma"])] == [1, 2]
    assert "alpha" not in changed.compacted().segments[0].vocabulary
    assert changed.n_live == 2 and len(changed) == 3


def test_it_removes_only_live_rows_of_the_index():
    index = BM25Index.build_from_strings(["alpha beta", "beta gamma"]).without({0: "alpha beta"})

    for rows in ({0: "alpha beta"}, {2: "beta"}, {-1: "beta"}):
        with pytest.raises(ValueError):
            index.without(rows)


def test_a_change_leaves_the_index_it_came_from_as_it_was():
    index = BM25Index.build_from_strings(["alpha beta", "beta gamma", "gamma delta"])
    before = index.scores(["beta", "gamma"])

    index.without({1: "beta gamma"}).appended(["beta beta beta"])

    np.testing.assert_array_equal(index.scores(["beta", "gamma"]), before)
    assert index.n_live == 3 and len(index.segments) == 1
