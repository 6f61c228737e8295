"""manage.py fusion_bench --kb SLUG [--kb SLUG ...] [--fusions SPEC] [--limit N] [--json OUT]"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from evaluation.probes.fusion_probe import markdown, parse_fusions, probe_kb
from knowledge.models import KnowledgeBase


class Command(BaseCommand):
    help = (
        "nDCG@10, Recall@5/10, Hit@5 and MRR@10 of rank-bm25, the BM25 leg, the vector leg (rerank off "
        "and on) and the KB's default hybrid on its golden questions, in one run; --fusions adds rows."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--kb", action="append", required=True, metavar="SLUG")
        parser.add_argument("--fusions", default="", help="extra hybrid rows, e.g. weighted:0.7,rrf:0.5 (vector weight)")
        parser.add_argument("--limit", type=int, metavar="N", help="at most N questions per KB, evenly spaced")
        parser.add_argument("--json", type=Path, metavar="OUT")

    def handle(self, *args, **options) -> None:
        missing = [slug for slug in options["kb"] if not KnowledgeBase.objects.filter(slug=slug).exists()]
        if missing:
            raise CommandError(f"no knowledge base '{missing[0]}'")
        try:
            fusions = parse_fusions(options["fusions"])
        except ValueError as error:
            raise CommandError(f"--fusions: {error}") from None
        reports = [probe_kb(slug, fusions, limit=options["limit"]) for slug in options["kb"]]
        self.stdout.write("\n\n".join(markdown(report) for report in reports))
        if options["json"]:
            options["json"].write_text(json.dumps(reports, indent=2) + "\n", encoding="utf-8")
