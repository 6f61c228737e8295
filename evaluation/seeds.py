"""The seeds dev set: fresh KBs of the seed documents, uploaded as .md and as .txt, scored on
the two halves of the dev set; and the share of CMRC2018 answers that hold a gold span.

`manage.py seeds_eval` is the command; this module holds what it does, with its collaborators
(the asker, the user, the files) as parameters.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from django.conf import settings

from knowledge.batch import FileResult, FileToIngest, ingest_file
from knowledge.models import KnowledgeBase, Visibility
from knowledge.search import refresh_planner_statistics

from .answers import AnswerEvaluation, ask_through_chat, load_answer_cases, metric_counts, save_answer_run
from .datasets import Dataset, DatasetError, import_dataset, read_golden, read_squad
from .report import Table

FIXTURES = Path(settings.BASE_DIR) / "evaluation" / "fixtures"
# The dev set's two halves, split once, and tuning sets written later for kinds of question the
# first tune half has few of (see their descriptions). "both" is the two halves, "all" every set.
HALVES = {
    "tune": FIXTURES / "seeds-dev-tune.json",
    "tune-2": FIXTURES / "seeds-dev-tune-2.json",
    "tune-3": FIXTURES / "seeds-dev-tune-3.json",
    "tune-4": FIXTURES / "seeds-dev-tune-4.json",
    "tune-5": FIXTURES / "seeds-dev-tune-5.json",
    "report": FIXTURES / "seeds-dev-report.json",
}
HALF_GROUPS = {"both": ("tune", "report"), "all": tuple(HALVES)}
FORMS = ("md", "txt")
SEED_SUFFIXES = (".txt", ".md")
COLUMNS = (
    ("keyword pass", "keyword_pass"), ("en", "keyword_pass_en"), ("zh", "keyword_pass_zh"),
    ("two-doc", "keyword_pass_two_doc"), ("source pass", "source_pass"),
    ("unanswerable said so", "unanswerable_said_so"),
)


def seed_files(directory: Path) -> list[Path]:
    """The seed documents in a folder (.txt and .md), each stem once: the stem names the document."""
    if not directory.is_dir():
        raise DatasetError(f"{directory}: not a directory")
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in SEED_SUFFIXES)
    stems = [p.stem for p in files]
    repeated = sorted({s for s in stems if stems.count(s) > 1})
    if repeated:
        raise DatasetError(f"{directory}: more than one file named {', '.join(repeated)} (a stem names one document)")
    if not files:
        raise DatasetError(f"{directory}: no .txt or .md files")
    return files


def fresh_kb(slug: str, name: str, owner) -> KnowledgeBase:
    """A new, empty KB under slug; a KB already there under that slug is deleted first."""
    KnowledgeBase.objects.filter(slug=slug).delete()
    return KnowledgeBase.objects.create(slug=slug, name=name, owner=owner, visibility=Visibility.PRIVATE)


def ingest_as(kb: KnowledgeBase, files: Sequence[Path], form: str, *, user) -> list[FileResult]:
    """Ingest each file in this process as an upload named `<stem>.<form>` (the same bytes)."""
    results = [
        ingest_file(kb, FileToIngest(str(path), f"{path.stem}.{form}", path), on_progress=lambda progress: None,
                    user=user)
        for path in files
    ]
    refresh_planner_statistics()
    return results


def import_sets(kb: KnowledgeBase, paths: Sequence[Path]) -> list[tuple[str, int, int]]:
    """Import golden files into the KB: (set name, questions stored, questions skipped) each."""
    imported = []
    for path in paths:
        dataset = read_golden(path)
        report = import_dataset(kb, dataset)
        imported.append((dataset.name, report.questions, report.skipped_questions))
    return imported


@dataclass
class HalfResult:
    kb: str
    half: str  # the golden set's name
    evaluation: AnswerEvaluation

    def row(self) -> tuple[str, ...]:
        metrics, counts = self.evaluation.metrics, metric_counts(self.evaluation.outcomes)
        cells = [_cell(metrics.get(key), counts.get(key, 0)) for _, key in COLUMNS]
        return (self.kb, self.half, str(len(self.evaluation.outcomes)), *cells,
                f"{self.evaluation.latency_ms['p50']:.1f}")


Evaluate = Callable[[KnowledgeBase, str], AnswerEvaluation]


def chat_evaluator(user, *, agent_type: str = "auto") -> Evaluate:
    """Ask a golden set's questions through the chat as user and store the run."""

    def evaluate(kb: KnowledgeBase, set_name: str) -> AnswerEvaluation:
        cases = load_answer_cases(kb, golden_set=set_name)
        evaluation = ask_through_chat(kb, user, cases, agent_type=agent_type)
        save_answer_run(kb, evaluation, golden_set=kb.golden_sets.filter(name=set_name).first(), split="all")
        return evaluation

    return evaluate


def summary_table(results: Sequence[HalfResult]) -> Table:
    header = ("KB", "set", "questions", *(title for title, _ in COLUMNS), "p50 ms")
    return Table("Answers per KB and half (rate, questions it is taken over)", header,
                 tuple(r.row() for r in results))


def _cell(value: float | None, count: int) -> str:
    return "-" if value is None else f"{value:.4f} ({count})"


# --- CMRC2018: does the answer hold a gold span? -----------------------------------------------


def gold_span_dataset(path: Path, *, limit: int, offset: int = 0) -> Dataset:
    """A SQuAD-layout file's paragraphs, and `limit` of its questions from the `offset`-th, with
    every gold answer as alternatives of one keyword: keyword pass is then the share of answers
    holding a gold span. The paragraphs are all of them, whichever questions are asked.

    An offset past the reported questions gives a slice to tune the reader on, so that the first
    ones stay a figure nobody tuned against."""
    dataset = read_squad(path)
    spans = _gold_spans(path)
    questions = [
        replace(question, expected_keywords=(spans[question.id],)) if spans.get(question.id) else question
        for question in dataset.questions[offset : offset + limit]
    ]
    suffix = f"{offset}-{offset + limit}" if offset else f"{limit}"
    return replace(dataset, name=f"{dataset.name}-gold-span-{suffix}", questions=questions)


def _gold_spans(path: Path) -> dict[str, list[str]]:
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    spans: dict[str, list[str]] = {}
    for article in data:
        for paragraph in article.get("paragraphs", []):
            for qa in paragraph.get("qas", []):
                answers = [a["text"].strip() for a in qa.get("answers", []) if isinstance(a, dict) and a.get("text")]
                spans[str(qa.get("id"))] = list(dict.fromkeys(a for a in answers if a))
    return spans
