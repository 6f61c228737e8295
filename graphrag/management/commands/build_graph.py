"""manage.py build_graph --kb SLUG [--full] [--dry-run] [--json]"""

from __future__ import annotations

import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from agentic_rag.llm import get_llm
from graphrag.build import build_graph
from graphrag.runner import Busy, run_locked_build, use_llm
from knowledge.models import KnowledgeBase


class Command(BaseCommand):
    help = "Build or update a knowledge base's graph (only changed documents unless --full)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--kb", required=True, metavar="SLUG")
        parser.add_argument("--full", action="store_true", help="rebuild from every document")
        parser.add_argument(
            "--dry-run", action="store_true",
            help="say what a build would read and, with a model configured, the LLM calls and tokens it would spend",
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, **options) -> None:
        kb = KnowledgeBase.objects.filter(slug=options["kb"]).first()
        if kb is None:
            raise CommandError(f"knowledge base '{options['kb']}' does not exist")
        if options["dry_run"]:
            with_llm = use_llm(settings.GRAPH_EXTRACTOR, get_llm())
            report = build_graph(
                kb, full=options["full"], dry_run=True, llm_extraction=with_llm, extractor_name="llm" if with_llm else "rules"
            )
        else:
            report = run_locked_build(kb, full=options["full"])
            if isinstance(report, Busy):
                raise CommandError(f"a graph build of '{kb.slug}' is running; it will read the changes too")
        data = report.as_json()
        keys = ("entities", "relations", "communities", "documents", "llm_calls", "llm_tokens_estimated", "seconds")
        if options["json"]:
            self.stdout.write(json.dumps({**{k: data[k] for k in keys}, **{k: v for k, v in data.items() if k not in keys}}))
            return
        verb = "would read" if report.dry_run else "read"
        self.stdout.write(
            f"{kb.slug}: {verb} {report.documents} document(s), {report.chunks} chunk(s) with the {report.extractor} extractor"
        )
        if report.dry_run and report.extractor == "llm":
            self.stdout.write(f"estimated cost: {report.llm_calls} LLM call(s), about {report.llm_tokens_estimated} tokens")
        self.stdout.write(
            f"graph: {report.entities} entities, {report.relations} relations, {report.communities} communities"
            + ("" if report.dry_run else f" in {report.seconds:.2f} s (peak memory {report.peak_memory_mb} MB)")
        )
        if report.chunks and not report.dry_run:
            self.stdout.write(f"extraction and disambiguation: {report.chunks_per_s:.0f} chunks/s; stages (ms): {report.timings_ms}")
        for line in report.log:
            self.stdout.write(f"note: {line}")
