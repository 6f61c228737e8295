"""manage.py web_bench [--kb SLUG]: web evidence cited and verified against a fake SearXNG."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from agentic_rag.models import WebSearchSettings
from evaluation.web_bench import QUESTIONS, run_web_bench


class Command(BaseCommand):
    help = "DeepSearch with web search on, off and not allowed, against fake pages on 127.0.0.1."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--kb", default="web-bench", metavar="SLUG", help="the KB made for the run (kept)")

    def handle(self, *args, **options) -> None:
        if WebSearchSettings.objects.exists():
            raise CommandError("web search settings are saved on the models page and would replace the fake "
                               "server's: run this on a database without them")
        self.stdout.write(f"{len(QUESTIONS)} questions whose facts only the fake pages hold, DeepSearch, extractive reader")
        for figures in run_web_bench(options["kb"]):
            self.stdout.write(figures.line())
