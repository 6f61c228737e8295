"""Ranking metrics with the BEIR / trec_eval definitions, and their summaries.

A ranking is a list of ids, best first; duplicates after the first count as absent.
Relevance maps an id to its graded gain (the qrels score as given); ids with a gain of
0 or less, and ids missing from it, are not relevant.

    DCG@k     = sum over ranks i = 1..k of gain(ranked[i]) / log2(i + 1)
    nDCG@k    = DCG@k / DCG@k of the ideal ranking (the qrels' gains sorted, best first)
    Recall@k  = relevant ids in the top k / all relevant ids
    Hit@k     = 1 if any relevant id is in the top k, else 0
    MRR@k     = 1 / rank of the first relevant id in the top k, 0 if none
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

# The keys every summary (and `manage.py evaluate --json`) reports, in display order.
METRIC_KEYS = ("ndcg@10", "recall@5", "recall@10", "hit@5", "mrr@10")


def _unique(ranked_ids: Sequence[Hashable], k: int) -> list[Hashable]:
    seen: set[Hashable] = set()
    top = []
    for item in ranked_ids:
        if len(top) == k:
            break
        if item not in seen:
            seen.add(item)
            top.append(item)
    return top


def _relevant(relevance: Mapping[Hashable, int]) -> dict[Hashable, int]:
    return {item: gain for item, gain in relevance.items() if gain > 0}


def dcg(gains: Sequence[float]) -> float:
    """Return the discounted cumulative gain of gains in rank order."""
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1))


def ndcg_at_k(ranked_ids: Sequence[Hashable], relevance: Mapping[Hashable, int], k: int) -> float:
    """Return graded nDCG@k; 0 when nothing is relevant."""
    relevant = _relevant(relevance)
    ideal = dcg(sorted(relevant.values(), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    return dcg([relevant.get(item, 0) for item in _unique(ranked_ids, k)]) / ideal


def recall_at_k(ranked_ids: Sequence[Hashable], relevance: Mapping[Hashable, int], k: int) -> float:
    """Return the share of relevant ids found in the top k; 0 when nothing is relevant."""
    relevant = _relevant(relevance)
    if not relevant:
        return 0.0
    return sum(item in relevant for item in _unique(ranked_ids, k)) / len(relevant)


def hit_at_k(ranked_ids: Sequence[Hashable], relevance: Mapping[Hashable, int], k: int) -> float:
    """Return 1.0 when a relevant id is in the top k, else 0.0."""
    relevant = _relevant(relevance)
    return float(any(item in relevant for item in _unique(ranked_ids, k)))


def mrr_at_k(ranked_ids: Sequence[Hashable], relevance: Mapping[Hashable, int], k: int) -> float:
    """Return the reciprocal rank of the first relevant id in the top k, 0 if none."""
    relevant = _relevant(relevance)
    for rank, item in enumerate(_unique(ranked_ids, k), start=1):
        if item in relevant:
            return 1.0 / rank
    return 0.0


def score_ranking(ranked_ids: Sequence[Hashable], relevance: Mapping[Hashable, int]) -> dict[str, float]:
    """Return one query's value of every reported metric."""
    return {
        "ndcg@10": ndcg_at_k(ranked_ids, relevance, 10),
        "recall@5": recall_at_k(ranked_ids, relevance, 5),
        "recall@10": recall_at_k(ranked_ids, relevance, 10),
        "hit@5": hit_at_k(ranked_ids, relevance, 5),
        "mrr@10": mrr_at_k(ranked_ids, relevance, 10),
    }


def summarise(per_query: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Return the mean of each reported metric over queries (0 for no queries)."""
    count = len(per_query)
    return {key: (sum(query[key] for query in per_query) / count if count else 0.0) for key in METRIC_KEYS}


def percentile(values: Sequence[float], q: float) -> float:
    """Return the q-th percentile (0-100) with linear interpolation, as numpy's default."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    """Return the p50 and p95 of per-query latencies in milliseconds."""
    return {"p50": percentile(latencies_ms, 50), "p95": percentile(latencies_ms, 95)}
