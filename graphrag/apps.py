from __future__ import annotations

from django.apps import AppConfig


class GraphragConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "graphrag"

    def ready(self) -> None:
        from django.db import transaction
        from django.db.models.signals import post_delete

        from knowledge.models import Document
        from knowledge.retrieval import register_leg, register_links
        from knowledge.signals import document_ingested

        from .search import chunk_hits, linked_documents
        from .tasks import schedule_graph_build

        register_leg("graph", chunk_hits)
        register_links("graph", linked_documents)

        def on_ingested(sender, document, **kwargs) -> None:
            schedule_graph_build(document.kb_id)

        def on_deleted(sender, instance, **kwargs) -> None:
            # The cascade removed its mentions and relations; the build recounts and
            # recomputes the communities they touched.
            kb_id = instance.kb_id
            transaction.on_commit(lambda: schedule_graph_build(kb_id))

        document_ingested.connect(on_ingested, dispatch_uid="graphrag-document-ingested")
        post_delete.connect(on_deleted, sender=Document, dispatch_uid="graphrag-document-deleted")
