"""manage.py seeds_eval --seeds DIR [--as md|txt|both] [--half tune|tune-2|report|both|all] [--set FILE ...]
[--embedder NAME] [--user NAME] [--agent TYPE] [--report [FILE]]
| seeds_eval --cmrc FILE [--limit 300] [--offset N] [--report [FILE]]"""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agentic_rag.embeddings import EmbedderError, get_embedder
from chat.cli import command_user
from chat.workers import AGENT_TYPES
from evaluation.answers import by_category, metric_counts
from evaluation.datasets import DatasetError, import_dataset
from evaluation.report import Table, answer_table, default_report_path, invoked_as, option_flags, write_report
from evaluation.seeds import (
    FORMS,
    HALF_GROUPS,
    HALVES,
    HalfResult,
    chat_evaluator,
    fresh_kb,
    gold_span_dataset,
    import_sets,
    ingest_as,
    seed_files,
    summary_table,
)
from knowledge.indexing import reembed_knowledge_base

CMRC_KB = "cmrc-gold-span"


class Command(BaseCommand):
    help = (
        "Ingest the seed documents into fresh KBs (seeds-md, seeds-txt) as an upload would, import the seeds "
        "dev set's halves and score the answers: keyword pass overall, per language and on two-document "
        "questions, source pass, unanswerable said so, p50. Or, with --cmrc, the share of answers to a "
        "SQuAD-layout file's first questions that hold a gold span."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--seeds", type=Path, metavar="DIR", help="the folder of seed documents (.txt, .md)")
        parser.add_argument("--as", dest="form", choices=[*FORMS, "both"], default="both",
                            help="upload the seeds as .md, as .txt, or both (one KB each)")
        parser.add_argument("--half", choices=[*HALVES, *HALF_GROUPS], default="both",
                            help="which set: a half, a later tuning set (tune-2 to tune-5), both halves (default) or all")
        parser.add_argument("--set", dest="sets", type=Path, action="append", metavar="FILE",
                            help="score this golden file instead of the dev set's halves (repeatable)")
        parser.add_argument("--embedder", metavar="NAME",
                            help="re-embed the KBs with this embedder before asking (default: as ingested)")
        parser.add_argument("--user", metavar="USERNAME", help="who owns the KBs and asks (default: the demo user)")
        parser.add_argument("--agent", default="auto", choices=AGENT_TYPES)
        parser.add_argument("--cmrc", type=Path, metavar="FILE",
                            help="instead: a SQuAD-layout file (CMRC2018 dev); its paragraphs go to a fresh KB "
                                 f"'{CMRC_KB}' and its first --limit questions are asked")
        parser.add_argument("--limit", type=int, default=300, help="with --cmrc: how many questions (default 300)")
        parser.add_argument("--offset", type=int, default=0,
                            help="with --cmrc: skip this many questions first (a slice to tune on, apart from "
                                 "the first --limit that are reported)")
        parser.add_argument("--report", nargs="?", const="", metavar="FILE",
                            help="also write a Markdown report (date, commit, command, tables) to FILE, "
                                 "default var/reports/seeds-eval-<time>.md")

    def handle(self, *args, **options) -> None:
        if options["cmrc"]:
            self._cmrc(options)
            return
        if not options["seeds"]:
            raise CommandError("pass --seeds DIR (or --cmrc FILE)")
        user = _user(options["user"])
        try:
            files = seed_files(options["seeds"])
        except DatasetError as exc:
            raise CommandError(str(exc)) from None
        sets = options["sets"] or [HALVES[h] for h in HALF_GROUPS.get(options["half"], (options["half"],))]
        forms = FORMS if options["form"] == "both" else (options["form"],)
        embedder = self._embedder(options["embedder"])
        evaluate = chat_evaluator(user, agent_type=options["agent"])
        results: list[HalfResult] = []
        for form in forms:
            kb = fresh_kb(f"seeds-{form}", f"Seed documents (.{form})", user)
            ingested = ingest_as(kb, files, form, user=user)
            failed = [r for r in ingested if r.status == "failed"]
            for result in failed:
                self.stderr.write(self.style.ERROR(f"  failed: {result.path}: {result.error}"))
            if embedder is not None:
                reembed_knowledge_base(kb, embedder)
            kb.refresh_from_db()  # ingestion stored the embedder that built its vectors
            self.stdout.write(f"{kb.slug}: {len(ingested) - len(failed)} of {len(files)} files ingested, "
                              f"embedder {kb.embedder or '-'}")
            try:
                imported = import_sets(kb, sets)
            except DatasetError as exc:
                raise CommandError(str(exc)) from None
            for name, stored, skipped in imported:
                skipped_note = f", {skipped} skipped (no relevant document in the KB)" if skipped else ""
                self.stdout.write(f"  {name}: {stored} questions{skipped_note}")
                evaluation = evaluate(kb, name)
                results.append(HalfResult(kb.slug, name, evaluation))
                self._print_half(results[-1])
        table = summary_table(results)
        self._print_summary(table)
        if options["report"] is not None:
            notes = [f"Seed documents: {len(files)} files in `{options['seeds'].name}/`; agent {options['agent']}."]
            path = write_report(Path(options["report"]) if options["report"] else default_report_path("seeds-eval"),
                                "Seeds dev set", [table], notes=notes,
                                command=invoked_as("seeds_eval", options, option_flags(self, "seeds_eval")))
            self.stdout.write(f"report written to {path}")

    def _embedder(self, name: str | None):
        if not name:
            return None
        try:
            return get_embedder(name)
        except EmbedderError as error:
            raise CommandError(str(error)) from error

    def _print_half(self, result: HalfResult) -> None:
        evaluation = result.evaluation
        counts = metric_counts(evaluation.outcomes)
        for metric in ("keyword_pass", "keyword_pass_en", "keyword_pass_zh", "keyword_pass_two_doc",
                       "source_pass", "unanswerable_said_so"):
            value = evaluation.metrics.get(metric)
            figure = "-" if value is None else f"{value:.4f}"
            self.stdout.write(f"    {metric:22}{figure:>8}  (n={counts[metric]})")
        self.stdout.write(f"    {'p50 ms':22}{evaluation.latency_ms['p50']:8.1f}")
        # Per category, which the report half may show too: rates, not questions to fix.
        for category, (passed, in_evidence, n) in by_category(evaluation.outcomes).items():
            figures = " / ".join("-" if rate is None else f"{rate:.2f}" for rate in (passed, in_evidence))
            self.stdout.write(f"    {'  ' + category:22}{figures:>12}  (n={n}; keyword pass / in evidence)")
        if "report" in result.half:
            # The report half is only scored: its failures are not shown, so nothing is fixed against them.
            self.stdout.write(f"    {len(evaluation.failures())} questions failed (not listed: report half)")
            return
        for failure in evaluation.failures():
            self.stdout.write(f"    FAIL {failure['qid']}: {failure['question']} — {failure['why']}")

    def _print_summary(self, table: Table) -> None:
        widths = [max(len(str(row[i])) for row in (table.header, *table.rows)) for i in range(len(table.header))]
        for row in (table.header, *table.rows):
            self.stdout.write("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))

    def _cmrc(self, options: dict) -> None:
        user = _user(options["user"])
        try:
            dataset = gold_span_dataset(options["cmrc"], limit=options["limit"], offset=options["offset"])
        except (DatasetError, OSError, ValueError, KeyError) as exc:
            raise CommandError(f"{options['cmrc']}: {exc}") from None
        kb = fresh_kb(CMRC_KB, "CMRC2018 gold spans", user)
        report = import_dataset(kb, dataset)
        self.stdout.write(f"{kb.slug}: {report.ingested} paragraphs ingested, {report.questions} questions")
        evaluation = chat_evaluator(user, agent_type=options["agent"])(kb, dataset.name)
        held = evaluation.metrics.get("keyword_pass")
        self.stdout.write(
            f"answer holds a gold span: {'-' if held is None else f'{held:.4f}'} "
            f"({metric_counts(evaluation.outcomes)['keyword_pass']} questions); "
            f"source pass {evaluation.metrics.get('source_pass') or 0:.4f}; p50 {evaluation.latency_ms['p50']:.1f} ms"
        )
        if options["verbosity"] >= 2:
            for failure in evaluation.failures():
                self.stdout.write(f"    FAIL {failure['qid']}: {failure['question']} — {failure['why']}")
        if options["report"] is not None:
            asked = f"questions {options['offset'] + 1}–{options['offset'] + options['limit']}" if options["offset"] else (
                f"first {options['limit']} questions")
            title = f"CMRC gold spans: {asked} of {options['cmrc'].name}"
            path = write_report(Path(options["report"]) if options["report"] else default_report_path("cmrc-gold-span"),
                                title, [answer_table("keyword_pass = the answer holds a gold span", evaluation)],
                                command=invoked_as("seeds_eval", options, option_flags(self, "seeds_eval")))
            self.stdout.write(f"report written to {path}")


def _user(username: str | None):
    """The named user, else the demo user, else a local user made for these runs."""
    try:
        return command_user(username, None)
    except CommandError:
        if username:
            raise
        users = get_user_model().objects
        return users.filter(username="seeds-eval").first() or users.create_user("seeds-eval")
