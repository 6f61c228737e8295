"""Compare BM25Index with rank-bm25's BM25Okapi on the same tokens: quality and speed.

Usage: python -m evaluation.probes.keyword_probe DATA_DIR [--cmrc-questions N] [--scale N]

DATA_DIR holds cranfield-beir/ (BEIR layout) and cmrc2018/cmrc2018_dev.json (SQuAD
layout; each question's relevant document is its paragraph). It prints, per set,
nDCG@10, Recall@5, Hit@5, MRR@10 and queries/s of both, build time and memory, the
throughput of analyze(), and build and query figures on a generated corpus of N rows.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter

import numpy as np
from rank_bm25 import BM25Okapi

from knowledge.analysis import analyze, clear_caches
from knowledge.bm25 import BM25Index

Ranker = Callable[[Sequence[str]], list[int]]
TOP = 10


@dataclass(frozen=True)
class Dataset:
    name: str
    texts: list[str]
    queries: list[str]
    qrels: list[dict[int, int]]  # per query: row -> graded gain


@dataclass(frozen=True)
class Metrics:
    ndcg10: float
    recall5: float
    hit5: float
    mrr10: float


@dataclass(frozen=True)
class LegReport:
    name: str
    metrics: Metrics
    qps: float
    build_s: float
    memory_mb: float


def load_cranfield(folder: Path) -> Dataset:
    """Read a BEIR folder; title and text make a document, qrels/test.tsv the gains."""
    corpus = [json.loads(line) for line in (folder / "corpus.jsonl").open(encoding="utf-8")]
    row_of = {doc["_id"]: row for row, doc in enumerate(corpus)}
    gains: dict[str, dict[int, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        query_id, doc_id, score = line.split("\t")
        if int(score) > 0 and doc_id in row_of:
            gains.setdefault(query_id, {})[row_of[doc_id]] = int(score)
    queries = [json.loads(line) for line in (folder / "queries.jsonl").open(encoding="utf-8")]
    queries = [query for query in queries if query["_id"] in gains]
    return Dataset(
        "cranfield-beir",
        [f"{doc['title']}\n{doc['text']}" for doc in corpus],
        [query["text"] for query in queries],
        [gains[query["_id"]] for query in queries],
    )


def load_squad(path: Path, limit: int, seed: int = 13) -> Dataset:
    """Read a SQuAD file; paragraphs are documents, a sample of questions the queries."""
    texts, questions = [], []
    for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            texts.append(f"{article.get('title', '')}\n{paragraph['context']}")
            questions += [(qa["question"], len(texts) - 1) for qa in paragraph["qas"]]
    if 0 < limit < len(questions):
        questions = random.Random(seed).sample(questions, limit)
    return Dataset(path.parent.name, texts, [q for q, _ in questions], [{row: 1} for _, row in questions])


def score_rankings(rankings: Sequence[list[int]], qrels: Sequence[dict[int, int]]) -> Metrics:
    """Average nDCG@10 (linear gains), Recall@5, Hit@5 and MRR@10 over the queries."""
    ndcg = recall = hit = mrr = 0.0
    for ranking, gains in zip(rankings, qrels, strict=True):
        dcg = sum(gains.get(row, 0) / math.log2(rank + 2) for rank, row in enumerate(ranking[:TOP]))
        ideal = sorted(gains.values(), reverse=True)[:TOP]
        ndcg += dcg / sum(gain / math.log2(rank + 2) for rank, gain in enumerate(ideal))
        found = len(set(ranking[:5]) & gains.keys())
        recall += found / len(gains)
        hit += found > 0
        first = next((rank for rank, row in enumerate(ranking[:TOP]) if row in gains), None)
        mrr += 0.0 if first is None else 1 / (first + 1)
    n = max(len(qrels), 1)
    return Metrics(ndcg / n, recall / n, hit / n, mrr / n)


def best_qps(rankers: Sequence[Ranker], queries: Sequence[Sequence[str]], min_seconds: float) -> list[float]:
    """Time whole passes of each ranker in turn; return each one's best queries/s.

    Taking turns and keeping the best pass makes the ratio fair on a shared, busy machine.
    """
    best = [0.0] * len(rankers)
    rounds, started = 0, perf_counter()
    while rounds < 3 or perf_counter() - started < min_seconds:
        for i, rank in enumerate(rankers):
            pass_started = perf_counter()
            for query in queries:
                rank(query)
            best[i] = max(best[i], len(queries) / (perf_counter() - pass_started))
        rounds += 1
    return best


def measure_build(build: Callable[[], object]) -> tuple[object, float, float]:
    """Build twice: once timed, once traced; return the index, seconds and retained MB."""
    started = perf_counter()
    index = build()
    seconds = perf_counter() - started
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    traced = build()
    retained = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del traced
    return index, seconds, retained / 1e6


def ours_ranker(index: BM25Index) -> Ranker:
    return lambda query: [row for row, _ in index.search(query, TOP)]


def reference_ranker(reference: BM25Okapi) -> Ranker:
    # Stable sort: ties go to the lower row, as in BM25Index.search.
    def rank(query: Sequence[str]) -> list[int]:
        scores = reference.get_scores(query)
        best = np.argsort(-scores, kind="stable")[:TOP]
        return [int(row) for row in best if scores[row] > 0]

    return rank


def compare(dataset: Dataset, min_seconds: float) -> list[LegReport]:
    """Tokenise once, then evaluate both indexes on the same document and query tokens."""
    docs = [analyze(text) for text in dataset.texts]
    queries = [analyze(query) for query in dataset.queries]
    ours, ours_build_s, ours_mb = measure_build(lambda: BM25Index.build(docs))
    reference, reference_build_s, reference_mb = measure_build(lambda: BM25Okapi(docs))
    rankers = [ours_ranker(ours), reference_ranker(reference)]
    qps = best_qps(rankers, queries, min_seconds)
    metrics = [score_rankings([rank(query) for query in queries], dataset.qrels) for rank in rankers]
    return [
        LegReport("BM25Index", metrics[0], qps[0], ours_build_s, ours_mb),
        LegReport("rank-bm25 BM25Okapi", metrics[1], qps[1], reference_build_s, reference_mb),
    ]


def measure_analysis(texts: Sequence[str]) -> dict[str, float]:
    """Return analyze() throughput with cold caches, as at first ingestion."""
    analyze("预热 warm-up")  # loads jieba's dictionary outside the timing
    clear_caches()
    started = perf_counter()
    tokens = sum(len(analyze(text)) for text in texts)
    elapsed = perf_counter() - started
    chars = sum(map(len, texts))
    return {
        "docs_per_s": len(texts) / elapsed,
        "tokens_per_s": tokens / elapsed,
        "chars_per_s": chars / elapsed,
        "tokens": tokens,
    }


def generated_corpus(n_rows: int, seed: int = 7) -> tuple[list[list[str]], list[list[str]]]:
    """Return n_rows rows of Zipf-distributed terms (40-160 each) and 200 short queries."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"t{i}" for i in range(200_000)]
    ids = (rng.zipf(1.2, size=n_rows * 100) - 1) % len(vocabulary)
    lengths = rng.integers(40, 161, size=n_rows)
    starts = np.concatenate(([0], np.cumsum(lengths)))
    ids = np.resize(ids, starts[-1])
    rows = [[vocabulary[i] for i in ids[a:b]] for a, b in zip(starts[:-1], starts[1:], strict=True)]
    queries = [list(rng.choice(rows[int(rng.integers(n_rows))], size=4)) for _ in range(200)]
    return rows, queries


def scale_probe(n_rows: int, baseline_queries: int) -> dict[str, float]:
    """Build both indexes on a generated corpus and time queries (few for rank-bm25)."""
    rows, queries = generated_corpus(n_rows)
    index, build_s, memory_mb = measure_build(lambda: BM25Index.build(rows))
    latencies = []
    for query in queries:
        started = perf_counter()
        index.search(query, TOP)
        latencies.append((perf_counter() - started) * 1000)
    started = perf_counter()
    reference = BM25Okapi(rows)
    reference_build_s = perf_counter() - started
    qps = best_qps([ours_ranker(index)], queries, 1.0)[0]
    reference_qps = best_qps([reference_ranker(reference)], queries[:baseline_queries], 0.0)[0]
    return {
        "rows": n_rows,
        "tokens": int(sum(map(len, rows))),
        "build_s": build_s,
        "memory_mb": memory_mb,
        "nbytes_mb": index.nbytes / 1e6,
        "qps": qps,
        "p50_ms": float(np.percentile(latencies, 50)),
        "p95_ms": float(np.percentile(latencies, 95)),
        "baseline_build_s": reference_build_s,
        "baseline_qps": reference_qps,
    }


def print_comparison(dataset: Dataset, reports: list[LegReport]) -> None:
    print(f"\n## {dataset.name}: {len(dataset.texts)} documents, {len(dataset.queries)} queries")
    print("| index | nDCG@10 | Recall@5 | Hit@5 | MRR@10 | queries/s | build s | memory MB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in reports:
        m = r.metrics
        print(
            f"| {r.name} | {m.ndcg10:.4f} | {m.recall5:.4f} | {m.hit5:.4f} | {m.mrr10:.4f} "
            f"| {r.qps:,.0f} | {r.build_s:.3f} | {r.memory_mb:.1f} |"
        )
    print(f"speed ratio: {reports[0].qps / reports[1].qps:.1f}x")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the probe on DATA_DIR and print Markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--cmrc-questions", type=int, default=1000, help="sample size; 0 = all")
    parser.add_argument("--scale", type=int, default=100_000, help="generated rows; 0 = skip")
    parser.add_argument("--min-seconds", type=float, default=5.0, help="query timing per set")
    args = parser.parse_args(argv)
    datasets = [
        load_cranfield(args.data_dir / "cranfield-beir"),
        load_squad(args.data_dir / "cmrc2018" / "cmrc2018_dev.json", args.cmrc_questions),
    ]
    print("## analyze() throughput, cold caches")
    for dataset in datasets:
        stats = measure_analysis(dataset.texts)
        print(f"{dataset.name}: " + ", ".join(f"{k} {v:,.0f}" for k, v in stats.items()))
    for dataset in datasets:
        print_comparison(dataset, compare(dataset, args.min_seconds))
    if args.scale:
        print(f"\n## generated corpus: {json.dumps(scale_probe(args.scale, 10))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
