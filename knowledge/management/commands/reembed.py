"""manage.py reembed --kb SLUG [--embedder NAME]"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from agentic_rag.embeddings import EmbedderError, get_embedder
from knowledge.indexing import reembed_knowledge_base
from knowledge.models import KnowledgeBase


class Command(BaseCommand):
    help = "Embed a knowledge base's chunks with another embedder, then switch the KB to it."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--kb", required=True, metavar="SLUG")
        parser.add_argument("--embedder", metavar="NAME", help="default: EMBEDDER_UPGRADE, else EMBEDDER")

    def handle(self, *args, **options) -> None:
        kb = KnowledgeBase.objects.filter(slug=options["kb"]).first()
        if kb is None:
            raise CommandError(f"knowledge base '{options['kb']}' does not exist")
        name = options["embedder"] or settings.EMBEDDER_UPGRADE or settings.EMBEDDER
        try:
            embedder = get_embedder(name)
        except EmbedderError as error:
            raise CommandError(str(error)) from error

        def report(done: int, total: int) -> None:
            self.stderr.write(f"\r{done}/{total} chunks embedded with {embedder.name}", ending="")

        done = reembed_knowledge_base(kb, embedder, on_batch=report)
        self.stdout.write(f"\n{kb.slug}: {done} chunks embedded; the KB now searches with {embedder.name}")
