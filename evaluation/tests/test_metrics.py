from __future__ import annotations

import pytest

from evaluation.metrics import (
    METRIC_KEYS,
    hit_at_k,
    latency_summary,
    mrr_at_k,
    ndcg_at_k,
    percentile,
    recall_at_k,
    score_ranking,
    summarise,
)

# b (gain 2) at rank 2, d (gain 1) at rank 4; x (gain 3) is never retrieved.
RANKED = ["a", "b", "c", "d"]
QRELS = {"b": 2, "d": 1, "x": 3, "z": 0}


def test_it_computes_graded_ndcg_with_the_ideal_from_the_qrels():
    # DCG  = 2/log2(3) + 1/log2(5)          = 1.26186 + 0.43068 = 1.69254
    # IDCG = 3/log2(2) + 2/log2(3) + 1/log2(4) = 3 + 1.26186 + 0.5 = 4.76186
    assert ndcg_at_k(RANKED, QRELS, 10) == pytest.approx(0.355436, abs=1e-6)


def test_it_cuts_both_rankings_at_k():
    # DCG@2 = 2/log2(3) = 1.26186; IDCG@2 = 3 + 2/log2(3) = 4.26186
    assert ndcg_at_k(RANKED, QRELS, 2) == pytest.approx(0.296082, abs=1e-6)
    assert ndcg_at_k(RANKED, QRELS, 1) == 0.0


def test_it_gives_a_perfect_ranking_ndcg_one():
    assert ndcg_at_k(["x", "b", "d"], QRELS, 10) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("k", "recall", "hit", "mrr"),
    [(1, 0.0, 0.0, 0.0), (2, 1 / 3, 1.0, 0.5), (5, 2 / 3, 1.0, 0.5)],
)
def test_it_computes_recall_hit_and_mrr(k, recall, hit, mrr):
    assert recall_at_k(RANKED, QRELS, k) == pytest.approx(recall)
    assert hit_at_k(RANKED, QRELS, k) == hit
    assert mrr_at_k(RANKED, QRELS, k) == pytest.approx(mrr)


def test_it_counts_a_repeated_id_once():
    ranked = ["b", "b", "b", "d"]
    assert recall_at_k(ranked, QRELS, 2) == pytest.approx(2 / 3)
    # DCG = 2/1 + 1/log2(3) = 2.63093; IDCG@10 = 4.76186
    assert ndcg_at_k(ranked, QRELS, 10) == pytest.approx(0.552500, abs=1e-6)


def test_it_scores_zero_when_nothing_is_relevant():
    for metric in (ndcg_at_k, recall_at_k, hit_at_k, mrr_at_k):
        assert metric(RANKED, {"a": 0}, 10) == 0.0
        assert metric([], QRELS, 10) == 0.0


def test_it_summarises_the_mean_of_every_reported_metric():
    first = score_ranking(RANKED, QRELS)
    second = score_ranking(["x"], {"x": 1})
    summary = summarise([first, second])
    assert tuple(summary) == METRIC_KEYS
    assert summary["recall@5"] == pytest.approx((2 / 3 + 1) / 2)
    assert summary["mrr@10"] == pytest.approx((0.5 + 1) / 2)
    assert summary["ndcg@10"] == pytest.approx((0.355436 + 1) / 2, abs=1e-6)
    assert summarise([]) == dict.fromkeys(METRIC_KEYS, 0.0)


def test_it_interpolates_latency_percentiles():
    assert percentile([40, 10, 30, 20], 50) == pytest.approx(25.0)
    # position 0.95 * 3 = 2.85: 30 + 0.85 * (40 - 30)
    assert latency_summary([10, 20, 30, 40]) == {"p50": pytest.approx(25.0), "p95": pytest.approx(38.5)}
    assert percentile([], 95) == 0.0
    assert percentile([7.0], 95) == 7.0
