"""Write a SQuAD file as a BEIR folder of short passages, each question relevant to its answer's.

Usage: python -m evaluation.probes.squad_windows FILE OUT_DIR [--chars 200] [--paragraphs N] [--no-titles]

Imported whole, CMRC2018's ~500-character paragraphs are easy to find (nDCG@10 near 0.99
for every leg). Cut into windows of whole sentences, the paragraphs of one article compete
with each other and the task is closer to a news-QA set of short passages: a question is
relevant to the window holding its answer's first character (and to the next one when the
answer runs into it). Windows carry their article's title unless --no-titles: without it
only the words of a window tell it from the others. Import the folder with
`manage.py import_dataset --format beir`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_SENTENCE_END = re.compile(r"(?<=[。！？!?；])")


@dataclass(frozen=True)
class Window:
    id: str
    title: str
    start: int  # offset of the first character in the paragraph
    text: str


def split_windows(paragraph: str, pid: str, title: str, *, chars: int) -> list[Window]:
    """Cut a paragraph into windows of whole sentences, each at most `chars` long when it can be."""
    windows: list[Window] = []
    start, text = 0, ""
    offset = 0
    for sentence in (s for s in _SENTENCE_END.split(paragraph) if s):
        if text and len(text) + len(sentence) > chars:
            windows.append(Window(f"{pid}-{len(windows) + 1}", title, start, text))
            start, text = offset, ""
        text += sentence
        offset += len(sentence)
    if text.strip():
        windows.append(Window(f"{pid}-{len(windows) + 1}", title, start, text))
    return windows


def relevant_windows(windows: Sequence[Window], answer_start: int, answer: str) -> list[str]:
    """The ids of the windows the answer span touches."""
    end = answer_start + max(len(answer), 1)
    return [w.id for w in windows if w.start < end and answer_start < w.start + len(w.text)]


def write_beir(
    squad_file: Path, out_dir: Path, *, chars: int, paragraphs: int | None, titles: bool = True
) -> tuple[int, int]:
    """Write corpus.jsonl, queries.jsonl and qrels/test.tsv; return (passages, questions)."""
    data = json.loads(squad_file.read_text(encoding="utf-8"))["data"]
    corpus, queries, qrels = [], [], []
    taken = 0
    for n, article in enumerate(data):
        title = str(article.get("title") or article.get("id") or f"article-{n}")
        for p, paragraph in enumerate(article["paragraphs"], start=1):
            if paragraphs is not None and taken >= paragraphs:
                break
            taken += 1
            windows = split_windows(paragraph["context"], f"{article.get('id', n)}-{p}", title, chars=chars)
            corpus.extend({"_id": w.id, "title": w.title if titles else "", "text": w.text} for w in windows)
            for qa in paragraph["qas"]:
                answer = qa["answers"][0] if qa.get("answers") else None
                if answer is None:
                    continue
                hits = relevant_windows(windows, int(answer["answer_start"]), answer["text"])
                if hits:
                    queries.append({"_id": str(qa["id"]), "text": qa["question"].strip()})
                    qrels.extend((str(qa["id"]), hit) for hit in hits)
    out_dir.joinpath("qrels").mkdir(parents=True, exist_ok=True)
    _write_jsonl(out_dir / "corpus.jsonl", corpus)
    _write_jsonl(out_dir / "queries.jsonl", queries)
    rows = ["query-id\tcorpus-id\tscore", *(f"{qid}\t{pid}\t1" for qid, pid in qrels)]
    (out_dir / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return len(corpus), len(queries)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("squad", type=Path, metavar="FILE")
    parser.add_argument("out", type=Path, metavar="OUT_DIR")
    parser.add_argument("--chars", type=int, default=200, help="window length in characters (default 200)")
    parser.add_argument("--paragraphs", type=int, help="only the first N paragraphs")
    parser.add_argument("--no-titles", action="store_true", help="leave the article titles out of the windows")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    passages, questions = write_beir(
        args.squad, args.out, chars=args.chars, paragraphs=args.paragraphs, titles=not args.no_titles
    )
    print(f"wrote {passages} passages and {questions} questions to {args.out}")


if __name__ == "__main__":
    main()
