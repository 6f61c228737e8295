"""manage.py ingest PATH... --kb SLUG [--create] [--recursive] [--json]"""

from __future__ import annotations

import json
import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from knowledge.batch import FileResult, FileToIngest, collect_files, ingest_files
from knowledge.models import KnowledgeBase
from knowledge.progress import Progress, publish_progress


class Command(BaseCommand):
    help = "Ingest files and folders into a knowledge base, with the same code as web uploads."

    def add_arguments(self, parser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH")
        parser.add_argument("--kb", required=True, metavar="SLUG", help="the knowledge base (kb_prefix)")
        parser.add_argument("--create", action="store_true", help="create the knowledge base if missing")
        parser.add_argument("--owner", metavar="USERNAME", help="owner of a created knowledge base")
        parser.add_argument("--recursive", action="store_true", help="descend into sub-folders")
        parser.add_argument("--json", action="store_true", help="print one JSON object, nothing else")

    def handle(self, *args, **options) -> None:
        kb = self._get_kb(options["kb"], create=options["create"], owner=options["owner"])
        items = list(collect_files(options["paths"], recursive=options["recursive"]))
        show_bar = not options["json"] and self.stdout.isatty()
        bar = _ProgressBar(self.stdout, len(items)) if show_bar else None
        results = ingest_files(
            kb,
            items,
            on_progress=bar.progress if bar else publish_progress,
            on_file=bar.file if bar else lambda position, item: None,
        )
        if bar:
            bar.done()
        if options["json"]:
            self.stdout.write(json.dumps(summarise(results), ensure_ascii=False))
        else:
            self._print_summary(results)
        if any(result.status == "failed" for result in results):
            sys.exit(1)

    def _get_kb(self, slug: str, *, create: bool, owner: str | None) -> KnowledgeBase:
        kb = KnowledgeBase.objects.filter(slug=slug).first()
        if kb is not None:
            return kb
        if not create:
            raise CommandError(f"knowledge base '{slug}' does not exist (add --create to create it)")
        return KnowledgeBase.objects.create(slug=slug, name=slug, owner=_owner(owner))

    def _print_summary(self, results: list[FileResult]) -> None:
        counts = summarise(results)
        self.stdout.write(
            f"ingested {len(counts['ingested'])}, unchanged {len(counts['unchanged'])}, "
            f"failed {len(counts['failed'])}"
        )
        for failure in counts["failed"]:
            self.stdout.write(self.style.ERROR(f"  failed: {failure['path']}: {failure['error']}"))


def summarise(results: list[FileResult]) -> dict:
    return {
        "ingested": [r.path for r in results if r.status == "ingested"],
        "unchanged": [r.path for r in results if r.status == "unchanged"],
        "failed": [{"path": r.path, "error": r.error} for r in results if r.status == "failed"],
    }


def _owner(username: str | None):
    users = get_user_model().objects
    if username:
        user = users.filter(username=username).first()
        if user is None:
            raise CommandError(f"user '{username}' does not exist")
        return user
    user = users.filter(is_superuser=True).order_by("pk").first() or users.order_by("pk").first()
    if user is None:
        raise CommandError("no user to own the knowledge base: create one or pass --owner")
    return user


class _ProgressBar:
    """A one-line terminal progress bar: files done, the current file and its stage."""

    width = 30

    def __init__(self, out, total: int) -> None:
        self.out, self.total, self.position, self.name = out, total, 0, ""

    def file(self, position: int, item: FileToIngest) -> None:
        self.position, self.name = position, item.name
        self._draw("reading", 0)

    def progress(self, progress: Progress) -> None:
        publish_progress(progress)
        self._draw(progress.stage, progress.percent)

    def _draw(self, stage: str, percent: int) -> None:
        overall = (self.position + percent / 100) / max(self.total, 1)
        filled = int(self.width * overall)
        bar = "#" * filled + "-" * (self.width - filled)
        line = f"\r[{bar}] {self.position + 1}/{self.total} {self.name[:40]} {stage} {percent}%"
        self.out.write(line.ljust(100), ending="")
        self.out.flush()

    def done(self) -> None:
        self.out.write("\r" + " " * 100 + "\r", ending="")
