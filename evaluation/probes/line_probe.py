"""Which encoder finds the one line that answers a question, in either language, and how fast.

    python -m evaluation.probes.line_probe --docs DIR --questions FILE.json [--embedders use-m3,e5-small]

DIR holds .txt/.md documents; every non-blank line of them is a candidate. FILE.json is a list of
{"q": question, "a": text the answering line holds}. For each embedder (and the lexical features
the reader uses without one) it prints how many questions find an answering line in the top 1
and top 5 by cosine, split by question language, and how many lines a second it encodes. The
reader's encoder is chosen on these figures (agentic_rag.embeddings.READER_ENCODER).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from time import perf_counter

import numpy as np

from agentic_rag.embeddings import EmbedderOptions, build_embedder

_HAN = re.compile(r"[\u4e00-\u9fff]")


def read_lines(directory: Path) -> list[str]:
    """The non-blank lines of the directory's documents, stripped, longer than 3 characters."""
    files = sorted([*directory.glob("*.txt"), *directory.glob("*.md")])
    return [line.strip() for path in files for line in path.read_text(encoding="utf-8").splitlines() if len(line.strip()) > 3]


def answer_ranks(scores: np.ndarray, lines: Sequence[str], answers: Sequence[str]) -> list[int]:
    """For each question, the 1-based rank of its best answering line (0: no line holds it)."""
    ranks = []
    for row, answer in zip(scores, answers, strict=True):
        order = np.argsort(-row, kind="stable")
        ranks.append(next((rank for rank, i in enumerate(order, 1) if answer in lines[i]), 0))
    return ranks


def lexical_scores(questions: Sequence[str], lines: Sequence[str]) -> np.ndarray:
    from agentic_rag.llm.extractive import feature_cosine

    return np.array([[feature_cosine(q, line) for line in lines] for q in questions])


def encoder_scores(name: str, questions: Sequence[str], lines: Sequence[str], options: EmbedderOptions) -> tuple[np.ndarray, float]:
    """Cosines of questions × lines and the lines encoded a second (model load excluded)."""
    embedder = build_embedder(name, options=options)
    embedder.embed_query("warm up")
    started = perf_counter()
    vectors = embedder.embed_passages(list(lines))
    per_second = len(lines) / (perf_counter() - started)
    queries = np.vstack([embedder.embed_query(q) for q in questions])
    return queries @ vectors.T, per_second


def summary(name: str, ranks: Sequence[int], languages: Sequence[str], per_second: float | None) -> str:
    cells = [name]
    for language in ("en", "zh"):
        chosen = [r for r, lang in zip(ranks, languages, strict=True) if lang == language]
        top1 = sum(1 for r in chosen if r == 1)
        top5 = sum(1 for r in chosen if 0 < r <= 5)
        cells.append(f"{language}: top1 {top1}/{len(chosen)} top5 {top5}/{len(chosen)}")
    cells.append(f"{per_second:,.0f} lines/s" if per_second else "—")
    return " | ".join(cells)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=Path, required=True)
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--embedders", default="use-m3,e5-small")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    lines = read_lines(args.docs)
    items = json.loads(args.questions.read_text(encoding="utf-8"))
    questions, answers = [item["q"] for item in items], [item["a"] for item in items]
    languages = ["zh" if _HAN.search(q) else "en" for q in questions]
    print(f"{len(lines)} lines, {len(questions)} questions")
    started = perf_counter()
    ranks = answer_ranks(lexical_scores(questions, lines), lines, answers)
    print(summary("lexical features (no encoder)", ranks, languages, len(lines) * len(questions) / (perf_counter() - started)))
    options = EmbedderOptions(threads=args.threads)
    for name in filter(None, args.embedders.split(",")):
        scores, per_second = encoder_scores(name, questions, lines, options)
        print(summary(name, answer_ranks(scores, lines, answers), languages, per_second))
        blended = 0.5 * scores + 0.5 * lexical_scores(questions, lines)
        print(summary(f"{name} + lexical (mean)", answer_ranks(blended, lines, answers), languages, None))


if __name__ == "__main__":
    main()
