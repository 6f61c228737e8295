"""manage.py multidoc_bench DATA_FILE [DATA_FILE ...] --kb SLUG [--distractors N] [--no-save]

Builds a KB of SQuAD-layout articles (CMRC2018) with bridge questions that need two of them
(evaluation.multidoc), builds its graph, and measures recall@10 of hybrid against
hybrid+graph; the verdict is stored as the KB's graph-leg setting unless --no-save.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from evaluation.datasets import DatasetError, import_dataset
from evaluation.graph_leg import judge_graph_leg
from evaluation.multidoc import bridge_dataset
from evaluation.runner import load_questions
from graphrag.build import build_graph
from graphrag.stats import graph_stats
from knowledge.models import KnowledgeBase
from knowledge.management.commands.ingest import _owner


class Command(BaseCommand):
    help = "Multi-document bridge questions over SQuAD-layout articles: recall@10 of hybrid vs hybrid+graph."

    def add_arguments(self, parser) -> None:
        parser.add_argument("paths", nargs="+", type=Path, metavar="DATA_FILE")
        parser.add_argument("--kb", default="cmrc-bridge", metavar="SLUG")
        parser.add_argument("--distractors", type=int, default=300, help="unlinked articles kept in the corpus")
        parser.add_argument("--no-save", action="store_true", help="do not store the verdict as the KB's setting")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options) -> None:
        try:
            dataset = bridge_dataset(options["paths"], distractors=options["distractors"], name=options["kb"])
        except DatasetError as error:
            raise CommandError(str(error)) from None
        if not dataset.questions:
            raise CommandError("no article of these files names another by its title: no bridge question to ask")
        kb = KnowledgeBase.objects.filter(slug=options["kb"]).first() or KnowledgeBase.objects.create(
            slug=options["kb"], name=options["kb"], owner=_owner(None)
        )
        imported = import_dataset(kb, dataset)
        built = build_graph(kb)
        stats = graph_stats(kb)
        questions = load_questions(kb, golden_set=dataset.name)
        verdict = judge_graph_leg(kb, questions, save=not options["no_save"])
        figures = {
            "kb": kb.slug, "passages": len(dataset.passages), "questions": len(questions),
            "ingested": imported.ingested, "graph_build_s": built.seconds, "graph": stats.as_json(),
            **verdict.as_setting(), "stored": not options["no_save"],
        }
        if options["json"]:
            self.stdout.write(json.dumps(figures, ensure_ascii=False))
            return
        self.stdout.write(
            f"{kb.slug}: {len(dataset.passages)} articles, {len(questions)} bridge questions; graph "
            f"{stats.entities} entities, {stats.relations} relations ({stats.explicit_share:.1%} explicit), built in {built.seconds:.1f} s"
        )
        for metric in ("recall@10", "recall@5", "ndcg@10", "hit@5", "mrr@10"):
            if metric in verdict.hybrid:
                self.stdout.write(f"{metric:10}{verdict.hybrid[metric]:10.4f}{verdict.hybrid_graph[metric]:14.4f}   (hybrid, hybrid+graph)")
        state = "on" if verdict.helps else "off"
        self.stdout.write(f"graph leg {'helps' if verdict.helps else 'does not help'}: auto mode keeps it {state}"
                          + ("" if figures["stored"] else " (not stored: --no-save)"))
