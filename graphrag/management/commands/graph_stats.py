"""manage.py graph_stats SLUG [SLUG ...] [--json]: entity types and the share of explicit relations."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from graphrag.stats import graph_stats
from knowledge.models import KnowledgeBase


class Command(BaseCommand):
    help = "Report a KB graph's entity type distribution and how many of its relations are explicit (not co-occurrence)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("slugs", nargs="+", metavar="SLUG")
        parser.add_argument("--json", action="store_true", help="print one JSON object per KB")

    def handle(self, *args, **options) -> None:
        for slug in options["slugs"]:
            kb = KnowledgeBase.objects.filter(slug=slug).first()
            if kb is None:
                raise CommandError(f"knowledge base '{slug}' does not exist")
            stats = graph_stats(kb)
            if options["json"]:
                self.stdout.write(json.dumps(stats.as_json(), ensure_ascii=False))
                continue
            self.stdout.write(
                f"{slug}: {stats.entities} entities, {stats.relations} relations, "
                f"{stats.explicit_relations} explicit ({stats.explicit_share:.1%}); concept {stats.concept_share:.1%}"
            )
            self.stdout.write("entity types: " + ", ".join(f"{kind} {n}" for kind, n in stats.types.items()))
            self.stdout.write("relations: " + ", ".join(f"{name} {n}" for name, n in list(stats.relation_types.items())[:20]))
