"""Write a golden set of two-part questions from a SQuAD file, for the multi-step agents.

Usage: python -m evaluation.probes.compound_questions FILE OUT.json [--limit-docs 300] [--pairs 60]

Each question joins two questions whose answers sit in different passages ("Q1？Q2？"), so
a full answer needs both documents: both are graded 2 and both answers are expected keywords.
Import the output into the KB the passages went to (`manage.py import_dataset --format golden
OUT.json --kb SLUG`) and compare agents with `manage.py evaluate --answers --agent TYPE`
(source recall: the share of the needed documents the answer cites).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evaluation.datasets import Dataset


def compound_set(dataset: Dataset, *, pairs: int, name: str) -> dict:
    """Pair each question with one `len // 2` further on, when their passages differ."""
    names = {p.id: p.name for p in dataset.passages}
    usable = [q for q in dataset.questions if q.reference_answer and len(q.relevant) == 1]
    half = len(usable) // 2
    questions = []
    for first, second in zip(usable[:half], usable[half:], strict=False):
        (a,), (b,) = first.relevant, second.relevant
        if a == b or len(questions) == pairs:
            continue
        text = f"{first.text.rstrip('？?')}？{second.text.rstrip('？?')}？"
        questions.append({
            "id": f"pair-{len(questions) + 1:03d}", "category": "two-part", "question": text,
            "relevant": {names[a]: 2, names[b]: 2},
            "expected_keywords": [first.reference_answer, second.reference_answer],
        })
    return {
        "name": name,
        "description": f"Two-part questions joined from {dataset.name}: each half's answer is in a different passage.",
        "questions": questions,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--limit-docs", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--name", default="cmrc-two-part")
    args = parser.parse_args(argv)
    # The dataset reader lives beside the models: Django must be set up before importing it.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentic_rag.settings")
    import django

    django.setup()
    from evaluation.datasets import read_squad

    golden = compound_set(read_squad(args.file, limit_docs=args.limit_docs), pairs=args.pairs, name=args.name)
    args.out.write_text(json.dumps(golden, ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"wrote {len(golden['questions'])} two-part questions to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
