"""manage.py setup_demo: the demo user and a knowledge base of the project's own docs.

The knowledge base holds the frozen copy in evaluation/corpus/docs, the documents the shipped
golden sets are scored on (evaluation/corpus/README.md): editing docs/ then never moves an
evaluation figure.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from knowledge.batch import collect_files, ingest_files
from knowledge.models import KnowledgeBase, Visibility
from knowledge.progress import publish_progress

DEMO_KB_SLUG = "docs"
DEMO_CORPUS = Path("evaluation") / "corpus" / "docs"


class Command(BaseCommand):
    help = "Create the demo user and ingest the frozen copy of docs/ (evaluation/corpus/docs) into the demo knowledge base (idempotent)."

    def handle(self, *args, **options) -> None:
        user = self._demo_user()
        kb, _ = KnowledgeBase.objects.get_or_create(
            slug=DEMO_KB_SLUG,
            defaults={
                "name": "Project documentation",
                "description": "How Agentic RAG on Django works: architecture, ingestion, "
                "retrieval, chat pipeline, graph, evaluation, API and deployment.",
                "owner": user,
                "visibility": Visibility.PUBLIC,
            },
        )
        docs = Path(settings.BASE_DIR) / DEMO_CORPUS
        items = list(collect_files([str(docs)], recursive=True))
        results = ingest_files(kb, items, on_progress=publish_progress, user=user)
        counts = {status: sum(r.status == status for r in results) for status in ("ingested", "unchanged", "failed")}
        self.stdout.write(
            f"Demo knowledge base '{kb.slug}': {counts['ingested']} ingested, "
            f"{counts['unchanged']} unchanged, {counts['failed']} failed."
        )
        for result in results:
            if result.status == "failed":
                self.stdout.write(self.style.ERROR(f"  failed: {result.path}: {result.error}"))

    def _demo_user(self):
        users = get_user_model().objects
        user = users.filter(username=settings.DEMO_USERNAME).first()
        if user is None:
            user = users.create_user(settings.DEMO_USERNAME, password=settings.DEMO_PASSWORD)
            user.is_staff = user.is_superuser = True
            user.save()
        self.stdout.write(
            self.style.SUCCESS(
                f"Sign in as '{settings.DEMO_USERNAME}' with password '{settings.DEMO_PASSWORD}' "
                "(set DEMO_PASSWORD to change it before the first run)."
            )
        )
        return user
