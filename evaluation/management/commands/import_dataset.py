"""manage.py import_dataset --format beir DIR | --format squad FILE | --format golden FILE --kb SLUG
[--owner USERNAME] [--limit-docs N]"""

from __future__ import annotations

import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import validate_slug

from evaluation.datasets import DatasetError, ImportReport, import_dataset, read_beir, read_golden, read_squad
from knowledge.models import KnowledgeBase

READERS = {"beir": read_beir, "squad": read_squad, "golden": read_golden}


class Command(BaseCommand):
    help = (
        "Import a BEIR folder or a SQuAD file into a knowledge base and a golden set, or (--format "
        "golden) a JSON file of questions about the documents a knowledge base already holds."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", type=Path, metavar="DIR|FILE")
        parser.add_argument("--format", required=True, choices=sorted(READERS))
        parser.add_argument("--kb", required=True, metavar="SLUG", help="created when missing")
        parser.add_argument("--owner", metavar="USERNAME", help="owner of a created knowledge base")
        parser.add_argument("--limit-docs", type=int, metavar="N", help="import the first N passages only")

    def handle(self, *args, **options) -> None:
        if options["limit_docs"] is not None and options["limit_docs"] < 1:
            raise CommandError("--limit-docs must be at least 1")
        try:
            dataset = READERS[options["format"]](options["path"], limit_docs=options["limit_docs"])
        except DatasetError as exc:
            raise CommandError(str(exc)) from None
        if dataset.format == "golden" and not KnowledgeBase.objects.filter(slug=options["kb"]).exists():
            raise CommandError(f"knowledge base '{options['kb']}' does not exist: golden questions ask about its documents")
        kb = _get_or_create_kb(options["kb"], options["owner"])
        self.stdout.write(
            f"importing {len(dataset.passages)} passages and {len(dataset.questions)} questions "
            f"from {dataset.source} into {kb.slug}"
        )
        report = import_dataset(kb, dataset, user=kb.owner, on_batch=self._progress)
        self._summary(report, dataset.dropped_qrels)
        if report.failed:
            sys.exit(1)

    def _progress(self, done: int, report: ImportReport) -> None:
        self.stdout.write(
            f"  {done}/{report.passages} passages: ingested {report.ingested}, "
            f"unchanged {report.unchanged}, failed {len(report.failed)}"
        )

    def _summary(self, report: ImportReport, dropped_qrels: int) -> None:
        documents = report.ingested + report.unchanged
        verdict = "unchanged" if report.is_unchanged else "imported"
        self.stdout.write(self.style.SUCCESS(
            f"{verdict}: {documents} documents ({report.ingested} ingested, {report.unchanged} unchanged, "
            f"{report.child_chunks} new child chunks), {report.questions} questions, {report.qrels} qrels "
            f"in {report.seconds:.1f} s"
        ))
        if report.stage_ms:
            stages = ", ".join(f"{name} {ms / 1000:.1f} s" for name, ms in report.stage_ms.items())
            self.stdout.write(f"  pipeline time by stage: {stages}")
        skipped = {
            "empty passages": report.empty,
            "questions without an imported relevant document": report.skipped_questions,
            "qrels naming unknown passages": dropped_qrels,
        }
        for label, count in skipped.items():
            if count:
                self.stdout.write(f"  skipped {count} {label}")
        for passage_id, error in report.failed[:20]:
            self.stdout.write(self.style.ERROR(f"  failed: {passage_id}: {error}"))
        if len(report.failed) > 20:
            self.stdout.write(self.style.ERROR(f"  … and {len(report.failed) - 20} more failures"))


def _get_or_create_kb(slug: str, owner: str | None) -> KnowledgeBase:
    kb = KnowledgeBase.objects.filter(slug=slug).first()
    if kb is not None:
        return kb
    try:
        validate_slug(slug)
    except ValidationError:
        raise CommandError(f"'{slug}' is not a valid KB slug (letters, digits, '-' and '_')") from None
    return KnowledgeBase.objects.create(slug=slug, name=slug, owner=_owner(owner))


def _owner(username: str | None):
    users = get_user_model().objects
    if username:
        user = users.filter(username=username).first()
        if user is None:
            raise CommandError(f"user '{username}' does not exist")
        return user
    superuser = users.filter(is_superuser=True).order_by("pk").first()
    if superuser is not None:
        return superuser
    user, created = users.get_or_create(username="evaluation")
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user
