"""manage.py evaluate --kb SLUG [--mode MODE] [--baseline rank-bm25] [--json OUT] [--split all|train|test]
[--fail-under METRIC=VALUE ...] [--report [FILE]] | --tune | --answers [--user NAME]"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from chat.cli import command_user
from chat.workers import AGENT_TYPES
from evaluation.answers import (
    ANSWER_METRICS,
    ask_through_chat,
    load_answer_cases,
    metric_counts,
    save_answer_run,
)
from evaluation.graph_leg import judge_graph_leg
from evaluation.metrics import METRIC_KEYS
from evaluation.report import Table, answer_table, default_report_path, invoked_as, option_flags, write_report
from evaluation.runner import Evaluation, EvaluationError, evaluate, load_questions, save_run
from evaluation.tuning import tune
from knowledge.fusion import FusionParams
from knowledge.models import KnowledgeBase
from knowledge.retrieval import MODES


class Command(BaseCommand):
    help = "Measure retrieval on a KB's golden questions (nDCG@10, Recall, Hit, MRR, speed), or tune fusion."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--kb", required=True, metavar="SLUG")
        parser.add_argument("--mode", choices=MODES, default="hybrid")
        parser.add_argument("--baseline", choices=["rank-bm25"], help="also run this reference in-process")
        parser.add_argument("--json", metavar="OUT", help="write the result as JSON to OUT ('-' for stdout)")
        parser.add_argument("--split", choices=["all", "train", "test"], default="all")
        parser.add_argument("--golden-set", metavar="NAME", help="only this golden set (default: all of the KB's)")
        parser.add_argument("--fail-under", nargs="+", action="extend", default=[], metavar="METRIC=VALUE",
                            help=f"exit 1 when a metric is below VALUE ({', '.join(METRIC_KEYS)})")
        parser.add_argument("--no-rerank", action="store_true", help="skip the rerank stage")
        parser.add_argument("--no-expansion", action="store_true", help="skip cross-language query expansion")
        parser.add_argument("--tune", action="store_true",
                            help="grid-search fusion on the train split and store the winner as the KB's settings")
        parser.add_argument("--judge-graph-leg", action="store_true",
                            help="retrieve in hybrid and hybrid+graph mode; store whether the graph leg raised recall@10 "
                                 "(auto mode drops the leg for this KB when it did not)")
        parser.add_argument("--answers", action="store_true",
                            help="ask every golden question through the chat pipeline and score the answers "
                                 f"({', '.join(ANSWER_METRICS)}, latency)")
        parser.add_argument("--user", metavar="USERNAME",
                            help="with --answers: who asks (default: the KB's owner, else the demo user)")
        parser.add_argument("--agent", default="auto", choices=AGENT_TYPES,
                            help="with --answers: the worker type that retrieves (default: auto)")
        parser.add_argument("--report", nargs="?", const="", metavar="FILE",
                            help="also write the figures as a Markdown report (date, commit, command, tables) to "
                                 "FILE, default var/reports/evaluate-<time>.md")

    def handle(self, *args, **options) -> None:
        thresholds = _parse_thresholds(options["fail_under"], ANSWER_METRICS if options["answers"] else METRIC_KEYS)
        kb = KnowledgeBase.objects.filter(slug=options["kb"]).first()
        if kb is None:
            raise CommandError(f"knowledge base '{options['kb']}' does not exist")
        split = "all" if options["tune"] else options["split"]
        if options["answers"]:
            self._answers(kb, options, split, thresholds)
            return
        try:
            questions = load_questions(kb, split=split, golden_set=options["golden_set"])
            if options["tune"]:
                self._tune(kb, questions, options["json"])
                return
            if options["judge_graph_leg"]:
                self._judge_graph_leg(kb, questions, options["json"])
                return
            # Without a flag the KB's stored settings hold, rerank included (tuning may turn it off).
            overrides = {}
            if options["no_rerank"]:
                overrides["rerank"] = False
            if options["no_expansion"]:
                overrides["expand_cross_language"] = False
            evaluation = evaluate(kb, questions, mode=options["mode"], baseline=options["baseline"], **overrides)
        except EvaluationError as exc:
            raise CommandError(str(exc)) from None
        golden_set = kb.golden_sets.filter(name=options["golden_set"]).first() if options["golden_set"] else None
        run = save_run(kb, evaluation, split=split, golden_set=golden_set)
        self._write_json(evaluation.as_json(), options["json"])
        if options["json"] != "-":
            self._print_table(kb, evaluation, split, run.pk)
        if options["report"] is not None:
            self._write_report(options, f"Retrieval on {kb.slug}", [_retrieval_table(kb, evaluation, split)])
        failures = [
            f"{metric} {evaluation.report.metrics[metric]:.4f} < {minimum:g}"
            for metric, minimum in thresholds.items()
            if evaluation.report.metrics[metric] < minimum
        ]
        for failure in failures:
            self.stderr.write(self.style.ERROR(f"below threshold: {failure}"))
        if failures:
            sys.exit(1)

    def _judge_graph_leg(self, kb: KnowledgeBase, questions, out: str | None) -> None:
        verdict = judge_graph_leg(kb, questions)
        self._write_json(verdict.as_setting(), out)
        if out == "-":
            return
        self.stdout.write(
            f"{kb.slug}: {verdict.questions} questions, recall@10 hybrid {verdict.hybrid['recall@10']:.4f}, "
            f"hybrid+graph {verdict.hybrid_graph['recall@10']:.4f}"
        )
        verb = "keeps" if verdict.helps else "no longer adds"
        self.stdout.write(self.style.SUCCESS(f"stored: auto mode {verb} the graph leg for {kb.slug}"))

    def _answers(self, kb: KnowledgeBase, options: dict, split: str, thresholds: dict[str, float]) -> None:
        user = command_user(options["user"], kb.slug)
        cases = load_answer_cases(kb, golden_set=options["golden_set"], split=split)
        if not cases:
            raise CommandError(f"knowledge base '{kb.slug}' has no golden questions to score answers on")
        evaluation = ask_through_chat(kb, user, cases, agent_type=options["agent"])
        golden_set = kb.golden_sets.filter(name=options["golden_set"]).first() if options["golden_set"] else None
        run = save_answer_run(kb, evaluation, golden_set=golden_set, split=split)
        self._write_json(evaluation.as_json(), options["json"])
        if options["json"] != "-":
            self._print_answers(kb, evaluation, run.pk)
        if options["report"] is not None:
            which = options["golden_set"] or "all golden sets"
            title = f"Answers on {kb.slug} ({which}, split {split}, agent {options['agent']})"
            self._write_report(options, title, [answer_table(title, evaluation)])
        failures = [
            f"{metric} {evaluation.metrics.get(metric) or 0:.4f} < {minimum:g}"
            for metric, minimum in thresholds.items()
            if (evaluation.metrics.get(metric) or 0) < minimum
        ]
        for failure in failures:
            self.stderr.write(self.style.ERROR(f"below threshold: {failure}"))
        if failures:
            sys.exit(1)

    def _print_answers(self, kb: KnowledgeBase, evaluation, run_id: int) -> None:
        self.stdout.write(
            f"{kb.slug}: {len(evaluation.outcomes)} questions through the chat pipeline, "
            f"generator {evaluation.config['generator']}"
        )
        counts = metric_counts(evaluation.outcomes)
        for metric, value in evaluation.metrics.items():
            self.stdout.write(f"{metric:22}{'-' if value is None else f'{value:.4f}':>10}  (n={counts[metric]})")
        self.stdout.write(f"{'p50 ms':22}{evaluation.latency_ms['p50']:10.1f}")
        self.stdout.write(f"{'p95 ms':22}{evaluation.latency_ms['p95']:10.1f}")
        for failure in evaluation.failures():
            self.stdout.write(f"  FAIL {failure['qid']}: {failure['question']} — {failure['why']} ({failure['trace_url']})")
        self.stdout.write(f"stored as evaluation run {run_id}")

    def _write_report(self, options: dict, title: str, tables: list[Table]) -> None:
        given = options["report"]
        command = invoked_as("evaluate", options, option_flags(self, "evaluate"))
        path = write_report(Path(given) if given else default_report_path("evaluate"), title, tables, command=command)
        self.stdout.write(f"report written to {path}")

    def _write_json(self, data: dict, out: str | None) -> None:
        if out == "-":
            self.stdout.write(json.dumps(data, indent=2))
        elif out:
            Path(out).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    def _print_table(self, kb: KnowledgeBase, evaluation: Evaluation, split: str, run_id: int) -> None:
        report, baseline = evaluation.report, evaluation.baseline
        columns = [report] + ([baseline] if baseline else [])
        self.stdout.write(
            f"{kb.slug}: {evaluation.questions} questions (split {split}), embedder {kb.embedder or '-'}, "
            f"rerank {'on' if evaluation.params.rerank else 'off'}"
        )
        self.stdout.write(f"{'':12}" + "".join(f"{column.name:>18}" for column in columns))
        for metric in METRIC_KEYS:
            self.stdout.write(f"{metric:12}" + "".join(f"{column.metrics[metric]:18.4f}" for column in columns))
        self.stdout.write(f"{'queries/s':12}" + "".join(f"{column.qps:18.1f}" for column in columns))
        for key in ("p50", "p95"):
            self.stdout.write(f"{key + ' ms':12}" + "".join(f"{column.latency_ms[key]:18.2f}" for column in columns))
        stages = ", ".join(f"{stage} {ms:.2f}" for stage, ms in report.stage_p50_ms.items())
        self.stdout.write(f"stage p50 ms: {stages}")
        if baseline is not None:
            self.stdout.write(f"{baseline.name} index built in {baseline.build_s:.2f} s")
        if report.errors:
            self.stdout.write(self.style.WARNING(f"{report.errors} questions could not be searched"))
        self.stdout.write(f"stored as evaluation run {run_id}")

    def _tune(self, kb: KnowledgeBase, questions, out: str | None) -> None:
        report = tune(kb, questions)
        data = dataclasses.asdict(report)
        self._write_json(data, out)
        if out == "-":
            return
        self.stdout.write(
            f"{kb.slug}: tuned on {report.train_questions} train questions over {report.grid_points} "
            f"settings in {report.seconds:.1f} s; {report.test_questions} test questions held out"
        )
        header = f"{'':10}{'fusion':44}{'train ndcg@10':>15}{'test ndcg@10':>14}{'test, retrieve':>16}"
        self.stdout.write(header)
        for label, fusion, train, test, full in (
            ("defaults", report.default, report.default_train, report.default_test, report.default_test_retrieve),
            ("best", report.best, report.best_train, report.best_test, report.best_test_retrieve),
        ):
            self.stdout.write(
                f"{label:10}{_describe(fusion):44}{train['ndcg@10']:15.4f}{test['ndcg@10']:14.4f}"
                f"{full['ndcg@10']:16.4f}"
            )
        on, off = report.rerank_train["on"]["ndcg@10"], report.rerank_train["off"]["ndcg@10"]
        self.stdout.write(
            f"rerank on the train split: on {on:.4f}, off {off:.4f}; "
            f"stored rerank {'on' if report.rerank else 'off'}"
        )
        best = max(report.path_weights_train.items(), key=lambda item: item[1]["ndcg@10"])
        default = next(iter(report.path_weights_train.items()))
        stored = "/".join(f"{value:g}" for value in report.path_weights)
        self.stdout.write(
            f"multipath child-locator/tag-path weights/bonus scale on train questions: default {default[0]} "
            f"{default[1]['ndcg@10']:.4f}, best {best[0]} {best[1]['ndcg@10']:.4f}; stored {stored} "
            f"(test: default {report.multipath_test['default']['ndcg@10']:.4f}, "
            f"tuned {report.multipath_test['tuned']['ndcg@10']:.4f})"
        )
        if report.gate is not None:
            gate, test = report.gate, report.gate.test
            self.stdout.write(
                f"gate five-factor threshold on {gate.scored_train} reranked train references: stored "
                f"{gate.threshold:g} (test: relevant kept {test.relevant_kept:.3f}, noise rejected "
                f"{test.noise_rejected:.3f}, questions kept {test.questions_kept:.3f})"
            )
        self.stdout.write(self.style.SUCCESS(f"stored the best as {kb.slug}'s retrieval settings"))


def _retrieval_table(kb: KnowledgeBase, evaluation: Evaluation, split: str) -> Table:
    columns = [evaluation.report] + ([evaluation.baseline] if evaluation.baseline else [])
    rows = [(metric, *(f"{c.metrics[metric]:.4f}" for c in columns)) for metric in METRIC_KEYS]
    rows += [(f"{key} ms", *(f"{c.latency_ms[key]:.2f}" for c in columns)) for key in ("p50", "p95")]
    title = f"{kb.slug}: {evaluation.questions} questions (split {split}), embedder {kb.embedder or '-'}"
    return Table(title, ("metric", *(c.name for c in columns)), tuple(rows))


def _describe(fusion: FusionParams) -> str:
    return (
        f"{fusion.mode} vector {fusion.vector_weight:g}/bm25 {fusion.bm25_weight:g}, "
        f"min {fusion.vector_threshold:g}/{fusion.bm25_threshold:g}"
    )


def _parse_thresholds(items: list[str], known: tuple[str, ...]) -> dict[str, float]:
    thresholds = {}
    for item in items:
        metric, _, value = item.partition("=")
        if metric not in known:
            raise CommandError(f"--fail-under: unknown metric '{metric}' (known: {', '.join(known)})")
        try:
            thresholds[metric] = float(value)
        except ValueError:
            raise CommandError(f"--fail-under: '{item}' is not METRIC=NUMBER") from None
    return thresholds
