"""Score candidate untuned hybrid defaults against both legs and rank-bm25 on KBs' golden questions.

Usage (from the repository root, with the VAR_DIR the KBs live in):

    python -m evaluation.probes.fusion_probe --kb SLUG [--kb SLUG ...] \\
        [--fusions weighted:0.7,weighted:0.5,rrf:0.7] [--rerank-depths 20] [--multipath] \\
        [--limit N] [--json OUT]

Every row runs through `retrieve` as `manage.py evaluate` does (the KB's settings, no
post-processing, no gate): the legs with rerank off and on, the KB's current default
hybrid, then each fusion ("mode:vector weight", BM25 gets the rest) with rerank off and
on at each rerank depth (how much of the ranking's head the rerank reorders), and with
--multipath the multipath mode at each depth. Each question's embedding is computed once
and shared by all rows, so a row costs what search costs. --limit N keeps every k-th
question, N in all.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from knowledge.fusion import FusionParams


@dataclass(frozen=True)
class Variant:
    name: str
    mode: str
    overrides: dict


class _MemoisedEmbedder:
    """An embedder that embeds each distinct query once; passages go straight through."""

    def __init__(self, embedder) -> None:
        self._embedder = embedder
        self.name, self.dims = embedder.name, embedder.dims
        self._queries: dict[str, np.ndarray] = {}

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self._queries:
            self._queries[text] = self._embedder.embed_query(text)
        return self._queries[text]

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._embedder.embed_passages(texts)


def parse_fusions(spec: str) -> list[FusionParams]:
    """Turn "weighted:0.7,rrf:0.5" into FusionParams (vector weight given, BM25 the rest)."""
    fusions = []
    for item in filter(None, spec.split(",")):
        mode, _, weight = item.partition(":")
        vector = float(weight)
        fusions.append(FusionParams(mode=mode, vector_weight=vector, bm25_weight=round(1 - vector, 2)))
    return fusions


def variants(fusions: Sequence[FusionParams], depths: Sequence[int] = (20,), *, multipath: bool = False) -> list[Variant]:
    """The legs, the current default hybrid, each fusion with rerank off and at each depth, multipath."""
    rows = [
        Variant("bm25", "bm25", {}),
        Variant("vector, rerank off", "vector", {"rerank": False}),
    ]
    for depth in depths:
        suffix = f" (depth {depth})" if len(depths) > 1 else ""
        rows.append(Variant(f"vector, rerank on{suffix}", "vector", {"rerank": True, "rerank_depth": depth}))
    rows.append(Variant("hybrid, current default", "hybrid", {}))
    for fusion in fusions:
        label = f"{fusion.mode} {fusion.vector_weight:g}/{fusion.bm25_weight:g}"
        rows.append(Variant(f"hybrid {label}, rerank off", "hybrid", {"fusion": fusion, "rerank": False}))
        for depth in depths:
            overrides = {"fusion": fusion, "rerank": True, "hybrid_rerank_depth": depth}
            suffix = f" (depth {depth})" if len(depths) > 1 else ""
            rows.append(Variant(f"hybrid {label}, rerank on{suffix}", "hybrid", overrides))
    if multipath:
        rows.append(Variant("multipath, current default", "multipath", {}))
        rows.extend(Variant(f"multipath, rerank depth {d}", "multipath", {"rerank_depth": d}) for d in depths)
    return rows


def probe_kb(
    slug: str, fusions: Sequence[FusionParams], *, depths: Sequence[int] = (20,), multipath: bool = False, limit: int | None = None
) -> dict:
    """Score every variant and rank-bm25 on one KB's golden questions."""
    # Models and retrieval load only after main() has set Django up.
    from agentic_rag.embeddings import get_embedder
    from evaluation.runner import (
        RankBM25Ranker,
        document_ranking,
        evaluation_params,
        load_questions,
        run_ranker,
    )
    from knowledge.models import KnowledgeBase
    from knowledge.retrieval import retrieve

    kb = KnowledgeBase.objects.get(slug=slug)
    questions = load_questions(kb)
    if limit and len(questions) > limit:
        questions = questions[:: len(questions) // limit][:limit]
    embedder = _MemoisedEmbedder(get_embedder(kb.embedder or None))
    rows = {}
    for variant in variants(fusions, depths, multipath=multipath):
        params = evaluation_params(kb, variant.mode, **variant.overrides)

        def rank(query: str, params=params) -> list[int]:
            return document_ranking(retrieve(query, kb, params, embedder=embedder).candidates)

        rows[variant.name] = run_ranker(rank, questions, name=variant.name).metrics
        print(f"  {slug:14} {variant.name:40} ndcg@10 {rows[variant.name]['ndcg@10']:.4f}", file=sys.stderr)
    rows["rank-bm25"] = run_ranker(RankBM25Ranker(kb), questions, name="rank-bm25").metrics
    default = evaluation_params(kb, "hybrid")
    return {
        "kb": slug, "embedder": kb.embedder, "questions": len(questions),
        "current_default": {
            "fusion": dataclasses.asdict(default.fusion), "rerank": default.rerank,
            "rerank_depth": default.head_to_rerank,
        },
        "rows": rows,
    }


def markdown(report: dict) -> str:
    head = f"{report['kb']} ({report['embedder']}, {report['questions']} questions)"
    lines = [head, "| row | nDCG@10 | Recall@5 | Recall@10 | Hit@5 | MRR@10 |", "| --- | --- | --- | --- | --- | --- |"]
    for name, metrics in report["rows"].items():
        values = " | ".join(f"{metrics[key]:.4f}" for key in ("ndcg@10", "recall@5", "recall@10", "hit@5", "mrr@10"))
        lines.append(f"| {name} | {values} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", action="append", required=True, metavar="SLUG")
    parser.add_argument("--fusions", default="weighted:0.7,weighted:0.5,rrf:0.7", help="mode:vector_weight,...")
    parser.add_argument("--rerank-depths", default="20", help="rerank depths to try, e.g. 10,20")
    parser.add_argument("--multipath", action="store_true", help="also multipath at each rerank depth")
    parser.add_argument("--limit", type=int, help="at most N questions per KB, evenly spaced")
    parser.add_argument("--json", type=Path, metavar="OUT")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentic_rag.settings")
    import django

    django.setup()
    fusions, depths = parse_fusions(args.fusions), [int(d) for d in args.rerank_depths.split(",")]
    reports = [
        probe_kb(slug, fusions, depths=depths, multipath=args.multipath, limit=args.limit) for slug in args.kb
    ]
    print("\n\n".join(markdown(report) for report in reports))
    if args.json:
        args.json.write_text(json.dumps(reports, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
