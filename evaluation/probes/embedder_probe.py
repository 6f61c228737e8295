"""Measure candidate embedders, alone and fused with BM25, on a BEIR set and a SQuAD sample.

The record of how the default embedder was chosen. Run from the repository root:

    .venv/bin/python -m evaluation.probes.embedder_probe \\
        --beir ../shared/data/cranfield-beir \\
        --squad ../shared/data/cmrc2018/cmrc2018_dev.json --zh-paragraphs 848 --zh-queries 400 \\
        --embedders hashing-1024,use-m3,e5-small --bm25-weights 0.3,0.5 \\
        --vectors-dir var/probe-vectors --json var/embedder_probe.json

Add --stem for an English BM25 with Snowball stems and no stop words (vectors are reused
from --vectors-dir), and --skip-quality --speed-passages 10000 --speed-embedders NAME to
time the ingestion of ~300-char passages. Gains are the qrels scores as given (BEIR
convention), so figures match other BEIR tools. Model loading is excluded from the timings;
on a busy machine compare passages/cpu-s, which contention distorts less than passages/s.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter, process_time

import numpy as np

from agentic_rag.embeddings import EmbedderOptions, build_embedder


@dataclass(frozen=True)
class Dataset:
    name: str
    language: str
    doc_ids: list[str]
    doc_texts: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, int]]


def _read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_beir(directory: Path) -> Dataset:
    """Read corpus.jsonl, queries.jsonl and qrels/test.tsv; keep only judged queries."""
    qrels: dict[str, dict[str, int]] = {}
    for line in (directory / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, did, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, {})[did] = int(score)
    corpus = _read_jsonl(directory / "corpus.jsonl")
    texts = [_title_and_text(doc.get("title", ""), doc["text"]) for doc in corpus]
    queries = [q for q in _read_jsonl(directory / "queries.jsonl") if q["_id"] in qrels]
    return Dataset(
        name=directory.name,
        language="en",
        doc_ids=[str(doc["_id"]) for doc in corpus],
        doc_texts=texts,
        query_ids=[q["_id"] for q in queries],
        query_texts=[q["text"] for q in queries],
        qrels=qrels,
    )


def _title_and_text(title: str, text: str) -> str:
    # Cranfield's text already starts with its title; don't count it twice.
    return text if not title or text.startswith(title.strip()) else f"{title}\n{text}"


def load_squad(path: Path, *, paragraphs: int, queries: int, seed: int = 0) -> Dataset:
    """Sample paragraphs as documents; each sampled question's paragraph is its only relevant one."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    all_paragraphs = [p for article in data for p in article["paragraphs"]]
    rng = random.Random(seed)
    chosen = rng.sample(all_paragraphs, min(paragraphs, len(all_paragraphs)))
    pairs = [(qa["id"], qa["question"], f"p{i}") for i, p in enumerate(chosen) for qa in p["qas"]]
    pairs = rng.sample(pairs, min(queries, len(pairs)))
    return Dataset(
        name=f"{path.stem}[{len(chosen)}p/{len(pairs)}q]",
        language="zh",
        doc_ids=[f"p{i}" for i in range(len(chosen))],
        doc_texts=[p["context"] for p in chosen],
        query_ids=[qid for qid, _, _ in pairs],
        query_texts=[text for _, text, _ in pairs],
        qrels={qid: {did: 1} for qid, _, did in pairs},
    )


# --- BM25 leg (rank-bm25, the reference baseline) ---------------------------------

_WORD_RE = re.compile(r"\w+")


# A short English stop list, enough to show what stemming plus stop words add.
_STOP_TEXT = (
    "a an and are as at be by can do does for from has have how in is it its of on or that the "
    "their there these this to was were what when which with"
)
_STOP_WORDS = frozenset(_STOP_TEXT.split())


def tokenizer_for(language: str, *, stem: bool = False) -> Callable[[str], list[str]]:
    """Chinese: jieba search mode; English: lowercase words, optionally stemmed without stop words."""
    if language == "zh":
        import jieba

        jieba.setLogLevel(60)
        return lambda text: [t for t in jieba.lcut_for_search(text.lower()) if _WORD_RE.search(t)]
    if stem:
        import Stemmer  # PyStemmer, only for --stem

        stemmer = Stemmer.Stemmer("english")
        return lambda text: stemmer.stemWords(
            [w for w in _WORD_RE.findall(text.lower()) if w not in _STOP_WORDS]
        )
    return lambda text: _WORD_RE.findall(text.lower())


def bm25_scores(dataset: Dataset, *, stem: bool = False) -> np.ndarray:
    """Return the (queries, documents) BM25 score matrix, k1 1.5, b 0.75."""
    from rank_bm25 import BM25Okapi

    tokenize = tokenizer_for(dataset.language, stem=stem)
    index = BM25Okapi([tokenize(text) for text in dataset.doc_texts], k1=1.5, b=0.75)
    return np.vstack([index.get_scores(tokenize(q)) for q in dataset.query_texts])


# --- dense leg ---------------------------------------------------------------------


@dataclass(frozen=True)
class DenseRun:
    scores: np.ndarray
    passages_per_s: float
    passages_per_cpu_s: float
    queries_per_s: float
    query_ms_p50: float


def dense_scores(
    embedder_name: str, dataset: Dataset, options: EmbedderOptions, vectors_dir: Path | None = None
) -> DenseRun:
    """Embed passages in batches and queries one by one (as at query time); time both.

    With `vectors_dir`, vectors and timings are saved there and reused on the next run,
    so fusion settings can be swept without embedding again.
    """
    saved = vectors_dir / f"{dataset.name}.{embedder_name}.npz" if vectors_dir else None
    if saved and saved.exists():
        with np.load(saved) as data:
            return _dense_run(data["passages"], data["queries"], data["timings"])
    embedder = build_embedder(embedder_name, options=options)
    embedder.embed_query("warm up")  # model load is not throughput
    started, cpu_started = perf_counter(), process_time()
    passages = embedder.embed_passages(dataset.doc_texts)
    passage_s, passage_cpu_s = perf_counter() - started, process_time() - cpu_started
    query_vectors, query_ms = [], []
    for text in dataset.query_texts:
        started = perf_counter()
        query_vectors.append(embedder.embed_query(text))
        query_ms.append((perf_counter() - started) * 1000)
    timings = np.array([passage_s / len(passages), passage_cpu_s / len(passages), *query_ms])
    if saved:
        saved.parent.mkdir(parents=True, exist_ok=True)
        np.savez(saved, passages=passages, queries=np.vstack(query_vectors), timings=timings)
    return _dense_run(passages, np.vstack(query_vectors), timings)


def _dense_run(passages: np.ndarray, queries: np.ndarray, timings: np.ndarray) -> DenseRun:
    seconds_per_passage, cpu_seconds_per_passage, query_ms = timings[0], timings[1], timings[2:]
    return DenseRun(
        scores=queries @ passages.T,
        passages_per_s=1 / seconds_per_passage,
        passages_per_cpu_s=1 / cpu_seconds_per_passage,
        queries_per_s=1000 * len(query_ms) / query_ms.sum(),
        query_ms_p50=float(np.median(query_ms)),
    )


# --- fusion and metrics ------------------------------------------------------------


def minmax(scores: np.ndarray) -> np.ndarray:
    low = scores.min(axis=1, keepdims=True)
    span = scores.max(axis=1, keepdims=True) - low
    return (scores - low) / np.where(span > 0, span, 1.0)


def weighted_fusion(bm25: np.ndarray, dense: np.ndarray, bm25_weight: float = 0.3) -> np.ndarray:
    return bm25_weight * minmax(bm25) + (1 - bm25_weight) * minmax(dense)


def rrf_fusion(legs: Sequence[np.ndarray], k: int = 60) -> np.ndarray:
    fused = np.zeros_like(legs[0], dtype=np.float64)
    for scores in legs:
        ranks = np.argsort(np.argsort(-scores, axis=1, kind="stable"), axis=1, kind="stable")
        fused += 1.0 / (k + 1 + ranks)
    return fused


def evaluate(scores: np.ndarray, dataset: Dataset) -> dict[str, float]:
    """Mean nDCG@10 (graded), Recall@5, Hit@5 and MRR@10 over the queries."""
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    rows = [
        _query_metrics(top[i], dataset.qrels[qid], dataset.doc_ids) for i, qid in enumerate(dataset.query_ids)
    ]
    return {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}


def _query_metrics(top: np.ndarray, relevant: dict[str, int], doc_ids: list[str]) -> dict[str, float]:
    gains = [relevant.get(doc_ids[i], 0) for i in top]
    ideal = sorted(relevant.values(), reverse=True)[:10]
    discounts = 1 / np.log2(np.arange(2, 12))
    ndcg = float(np.dot(gains, discounts[: len(gains)]) / np.dot(ideal, discounts[: len(ideal)]))
    hits = [g > 0 for g in gains]
    first = next((rank for rank, hit in enumerate(hits, 1) if hit), 0)
    return {
        "ndcg@10": ndcg,
        "recall@5": sum(hits[:5]) / len(relevant),
        "hit@5": float(any(hits[:5])),
        "mrr@10": 1 / first if first else 0.0,
    }


# --- ingestion speed ------------------------------------------------------------


def sample_passages(datasets: Sequence[Dataset], *, count: int, chars: int = 300) -> list[str]:
    """Cut the corpora into `chars`-long windows, alternating languages, `count` in all."""
    pools = [
        [t[i : i + chars] for t in d.doc_texts for i in range(0, len(t) - chars + 1, chars)] for d in datasets
    ]
    mixed = [text for group in zip(*pools, strict=False) for text in group]
    return [mixed[i % len(mixed)] for i in range(count)]


def speed_rows(passages: list[str], embedder_names: Sequence[str], options: EmbedderOptions) -> list[dict]:
    rows = []
    for name in embedder_names:
        embedder = build_embedder(name, options=options)
        embedder.embed_query("warm up")
        started, cpu_started = perf_counter(), process_time()
        embedder.embed_passages(passages)
        wall, cpu = perf_counter() - started, process_time() - cpu_started
        rows.append(
            {
                "set": f"{len(passages)} passages of ~{np.mean([len(p) for p in passages]):.0f} chars",
                "method": f"{name} ingestion",
                "passages/s": len(passages) / wall,
                "passages/cpu-s": len(passages) / cpu,
                "wall s": wall,
                "10k passages min": 10_000 / (len(passages) / wall) / 60,
            }
        )
        print(f"  timed {name}", file=sys.stderr, flush=True)
    return rows


# --- report ------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeConfig:
    embedders: tuple[str, ...]
    options: EmbedderOptions
    bm25_weights: tuple[float, ...] = (0.3,)
    stem: bool = False
    vectors_dir: Path | None = None


def probe(dataset: Dataset, config: ProbeConfig) -> list[dict]:
    """Score BM25, each embedder alone, and their weighted and RRF fusions."""
    started = perf_counter()
    bm25 = bm25_scores(dataset, stem=config.stem)
    bm25_qps = len(dataset.query_texts) / (perf_counter() - started)
    bm25_name = "BM25 stemmed" if config.stem and dataset.language == "en" else "BM25"
    rows = [{"set": dataset.name, "method": bm25_name, **evaluate(bm25, dataset), "queries/s": bm25_qps}]
    for name in config.embedders:
        run = dense_scores(name, dataset, config.options, config.vectors_dir)
        speed = {
            "passages/s": run.passages_per_s,
            "passages/cpu-s": run.passages_per_cpu_s,
            "queries/s": run.queries_per_s,
            "query p50 ms": run.query_ms_p50,
        }
        rows.append(
            {"set": dataset.name, "method": f"{name} dense", **evaluate(run.scores, dataset), **speed}
        )
        for weight in config.bm25_weights:
            fused = weighted_fusion(bm25, run.scores, weight)
            method = f"{weight:g}·{bm25_name}+{1 - weight:g}·{name}"
            rows.append({"set": dataset.name, "method": method, **evaluate(fused, dataset)})
        rrf = rrf_fusion([bm25, run.scores])
        rows.append({"set": dataset.name, "method": f"RRF({bm25_name},{name})", **evaluate(rrf, dataset)})
        print(f"  done {name} on {dataset.name}", file=sys.stderr, flush=True)
    return rows


COLUMNS = (
    "ndcg@10",
    "recall@5",
    "hit@5",
    "mrr@10",
    "passages/s",
    "passages/cpu-s",
    "queries/s",
    "query p50 ms",
    "wall s",
    "10k passages min",
)


def markdown_table(rows: list[dict]) -> str:
    lines = ["| set | method | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 2) + "|"]
    for row in rows:
        cells = [_cell(row.get(column)) for column in COLUMNS]
        lines.append(f"| {row['set']} | {row['method']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" if value < 10 else f"{value:,.0f}"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beir", type=Path, action="append", default=[], help="BEIR directory")
    parser.add_argument("--squad", type=Path, action="append", default=[], help="SQuAD-layout JSON (Chinese)")
    parser.add_argument("--zh-paragraphs", type=int, default=300)
    parser.add_argument("--zh-queries", type=int, default=300)
    parser.add_argument("--embedders", default="hashing-1024,use-m3,e5-small")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--speed-passages", type=int, default=0, help="also time ingestion of N ~300-char passages"
    )
    parser.add_argument("--speed-embedders", default="", help="embedders to time (default: --embedders)")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument(
        "--bm25-weights", default="0.3", help="BM25 weights of the weighted fusion, e.g. 0.2,0.3,0.5"
    )
    parser.add_argument("--stem", action="store_true", help="English BM25 with Snowball stems, no stop words")
    parser.add_argument("--vectors-dir", type=Path, help="save vectors here and reuse them on later runs")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    datasets = [load_beir(path) for path in args.beir]
    datasets += [
        load_squad(path, paragraphs=args.zh_paragraphs, queries=args.zh_queries) for path in args.squad
    ]
    options = EmbedderOptions(batch_size=args.batch_size)
    config = ProbeConfig(
        embedders=tuple(args.embedders.split(",")),
        options=options,
        bm25_weights=tuple(float(w) for w in args.bm25_weights.split(",")),
        stem=args.stem,
        vectors_dir=args.vectors_dir,
    )
    rows = [] if args.skip_quality else [row for dataset in datasets for row in probe(dataset, config)]
    if args.speed_passages:
        passages = sample_passages(datasets, count=args.speed_passages)
        rows += speed_rows(passages, (args.speed_embedders or args.embedders).split(","), options)
    lengths = (f"{d.name} {np.mean([len(t) for t in d.doc_texts]):.0f}" for d in datasets)
    print("mean chars per passage: " + ", ".join(lengths))
    print(markdown_table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
