"""manage.py bench ingest PATH --kb SLUG | bench corpus --squad FILE --out DIR"""

from __future__ import annotations

import json
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from evaluation.benchmarks import bench_ingest, write_squad_corpus
from knowledge.batch import collect_files
from knowledge.models import KnowledgeBase


class Command(BaseCommand):
    help = "Measure speed: ingestion throughput, or write a benchmark corpus from a SQuAD file."

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="target", required=True)
        ingest = sub.add_parser("ingest", help="ingest PATH into a fresh KB and report throughput")
        ingest.add_argument("path", metavar="PATH")
        ingest.add_argument("--kb", required=True, metavar="SLUG")
        ingest.add_argument("--reset", action="store_true", help="delete the KB's documents first")
        ingest.add_argument("--json", action="store_true")
        corpus = sub.add_parser("corpus", help="write SQuAD paragraphs out as Markdown files")
        corpus.add_argument("--squad", required=True, type=Path, metavar="FILE")
        corpus.add_argument("--out", required=True, type=Path, metavar="DIR")
        corpus.add_argument("--per-file", type=int, default=20, metavar="N")

    def handle(self, *args, **options) -> None:
        if options["target"] == "corpus":
            count = write_squad_corpus(options["squad"], options["out"], paragraphs_per_file=options["per_file"])
            self.stdout.write(f"wrote {count} files to {options['out']}")
            return
        kb = self._fresh_kb(options["kb"], reset=options["reset"])
        items = list(collect_files([options["path"]], recursive=True))
        if not items:
            raise CommandError(f"no files under {options['path']}")
        report = bench_ingest(kb, items).as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(report))
            return
        for key, value in report.items():
            self.stdout.write(f"{key:40} {value}")

    def _fresh_kb(self, slug: str, *, reset: bool) -> KnowledgeBase:
        kb = KnowledgeBase.objects.filter(slug=slug).first()
        if kb is None:
            owner, _ = get_user_model().objects.get_or_create(username="bench")
            return KnowledgeBase.objects.create(slug=slug, name=f"Benchmark {slug}", owner=owner)
        if kb.documents.exists() and not reset:
            raise CommandError(f"knowledge base '{slug}' has documents: pass --reset to delete them first")
        kb.documents.all().delete()
        return kb
