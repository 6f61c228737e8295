"""Hostile-but-plausible documents, end to end: each ingests to ready, or to failed with a
reason; the graph builds over them; and each document's page, chunks, document-chat editor
and a chat question over them all answer. One test, so the KB is ingested once."""

from __future__ import annotations

import json
import time

import pytest
from django.urls import reverse

from chat.tests.web_factories import ingest
from graphrag.tasks import build_knowledge_graph
from knowledge.models import Document, DocumentStatus

from .hostile_text import HOSTILE_DOCUMENTS

# Wall-clock seconds a page may take here: far above a healthy page, far below a hung one.
PAGE_LIMIT_S = 10
QUESTIONS = ["What does --mode take?", "检索增强生成是什么？", "|", "```", "第一章", "[" * 500]


def timed(call, *args, **kwargs):
    started = time.monotonic()
    result = call(*args, **kwargs)
    return result, time.monotonic() - started


# The chat answers on worker threads, which see only committed rows.
@pytest.mark.django_db(transaction=True)
def test_hostile_documents_ingest_build_a_graph_and_every_page_answers(
    kb, alice, alice_client, settings, django_capture_on_commit_callbacks
):
    settings.GRAPH_BUILD_AFTER_INGESTION = False  # built once below, over all of them
    for name, text in HOSTILE_DOCUMENTS.items():
        for extension in (".md", ".txt"):
            # Ingestion is enqueued on commit; a tail per extension, or the second copy is
            # refused as a duplicate of the first.
            with django_capture_on_commit_callbacks(execute=True):
                ingest(kb, alice, f"{name}{extension}", f"{text}\n{extension}".encode())

    documents = list(Document.objects.filter(kb=kb))
    assert len(documents) == 2 * len(HOSTILE_DOCUMENTS)
    for document in documents:
        assert document.status in (DocumentStatus.READY, DocumentStatus.FAILED), document.name
        if document.status == DocumentStatus.FAILED:
            assert document.error.strip(), document.name
        else:
            assert document.chunks.exists(), document.name

    stats, seconds = timed(build_knowledge_graph.apply, args=(kb.pk, True))
    assert stats.successful() and seconds < 120, seconds

    for document in documents:
        for url in (document.get_absolute_url(), document.get_absolute_url() + "?view=chunks",
                    reverse("document-editor", args=[document.pk])):
            response, seconds = timed(alice_client.get, url)
            # The editor sends an unreadable document back to its page with a message.
            assert response.status_code in (200, 302), (document.name, url, response.status_code)
            assert seconds < PAGE_LIMIT_S, (document.name, url, seconds)

    for question in QUESTIONS:
        body = json.dumps({"message": question, "kb": kb.slug})
        response = alice_client.post(reverse("api-chat"), body, content_type="application/json")
        assert response.status_code == 200, (question, response.content[:300])
        assert response.json()["answer"].strip(), question
