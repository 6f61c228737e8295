"""Celery tasks of the graph: thin wrappers over graphrag.runner, on their own `graph` queue."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from agentic_rag.background import dispatch, postpone
from agentic_rag.shutdown import StopRequested
from knowledge.models import KnowledgeBase

from .models import GraphBuild
from .runner import Busy, run_locked_build, scheduled_key


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None)
def build_knowledge_graph(self, kb_id: int, full: bool = False) -> dict:
    """Bring a KB's graph up to date; one build per KB at a time."""
    kb = KnowledgeBase.objects.filter(pk=kb_id).first()
    if kb is None:
        return {"skipped": "the knowledge base no longer exists"}
    try:
        result = run_locked_build(kb, full=full)
    except StopRequested:
        postpone(self, (kb_id, full))
        return {"stopped": "the process is stopping; the build resumes when it next runs"}
    if isinstance(result, Busy):
        if not self.request.is_eager:
            # A worker elsewhere holds the lock, or held it when it died: try again once the
            # lock has lapsed, so a redelivered build is never dropped.
            raise self.retry(countdown=settings.GRAPH_BUILD_LOCK_S)
        return {"queued": "a build of this knowledge base is running; it will go round again"}
    return result.as_json()


def schedule_graph_build(kb_id: int) -> None:
    """Start a build after ingestion, once per burst of uploads (debounced per KB)."""
    if not settings.GRAPH_BUILD_AFTER_INGESTION:
        return
    if not cache.add(scheduled_key(kb_id), 1, timeout=settings.GRAPH_BUILD_DEBOUNCE_S + 600):
        return  # a build is already waiting to start; it will read this document too
    if settings.BACKGROUND_TASKS == "celery":
        build_knowledge_graph.apply_async((kb_id,), countdown=settings.GRAPH_BUILD_DEBOUNCE_S)
    else:
        dispatch(build_knowledge_graph, kb_id)


def resume_interrupted_graph_builds() -> list[int]:
    """Build again the graph of every KB whose build a stopped server left unfinished.

    In-process builds die with their server (or stop with it, queued again); the server
    calls this once when it starts. The build reads only the documents not yet stored.
    """
    unfinished = [GraphBuild.RUNNING, GraphBuild.QUEUED]
    kb_ids = list(GraphBuild.objects.filter(status__in=unfinished).values_list("kb_id", flat=True).distinct())
    for kb_id in kb_ids:
        dispatch(build_knowledge_graph, kb_id)
    return kb_ids
