"""Builders for the web tests: stored exchanges, ingested knowledge bases, session cookies."""

from __future__ import annotations

import time
import uuid

from django.conf import settings
from django.db import OperationalError
from django.test import Client

from chat.models import Conversation, Message, Span, Trace
from knowledge.ingest import submit_document
from knowledge.tasks import enqueue_ingestion

HANDBOOK = b"""# Operations handbook

How the team runs the service, from install to incident review.

## 1 Installation

Install the package, run the migrations and create the first user. The installer writes
the configuration file and checks that the database answers.

## 2 Backups

Back up the database every night and test a restore every month.

## 3 Incident review

Write down what happened, what was affected and what changes, within two working days.
"""

EVIDENCE = [
    {
        "n": 1, "source": "KB", "doc": "handbook.md", "doc_id": 1, "chunk_id": 10,
        "section": "3 Incident review", "score": 0.6154, "url": "/kb/alice-kb/documents/1/#chunk-10",
        "preview": "Write down what happened, within two working days.",
    },
    {
        "n": 2, "source": "TOOL", "doc": "calculator", "chunk_id": None, "section": "",
        "score": 1.0, "url": "", "preview": "2 + 2 = 4",
    },
]  # fmt: skip


def make_exchange(user, *, session_id: str = "s1", title: str = "Incident reviews", kb=None,
                  question: str = "How do we review incidents?",
                  answer: str = "Write it down within two days [1]. Two plus two is 4 [2].",
                  evidence=None, verification=None) -> Message:  # fmt: skip
    """Store a question, its answer and its trace as the pipeline would; return the answer."""
    conversation, _ = Conversation.objects.get_or_create(
        user=user, session_id=session_id, defaults={"title": title, "kb": kb}
    )
    trace = Trace.objects.create(
        trace_id=uuid.uuid4(), user=user, conversation=conversation, question=question,
        route=getattr(kb, "slug", ""), intent="KB", total_ms=42.0, first_token_ms=30.0,
    )  # fmt: skip
    Span.objects.create(trace=trace, name="memory", kind="stage", start_ms=0, ms=2, output="done")
    Span.objects.create(trace=trace, name="retrieve", kind="stage", start_ms=2, ms=30, input="q")
    Span.objects.create(trace=trace, name="bm25", kind="retrieval", start_ms=3, ms=10)
    Span.objects.create(trace=trace, name="generate", kind="llm", start_ms=32, ms=10)
    Message.objects.create(conversation=conversation, role="user", content=question, trace=trace)
    return Message.objects.create(
        conversation=conversation,
        role="assistant",
        content=answer,
        citations=[
            {"n": 1, "doc": "handbook.md", "chunk_id": 10, "quote": "Write it down", "verified": True}
        ],
        debug={"evidence": EVIDENCE if evidence is None else evidence, "verification": verification or []},
        trace=trace,
    )


def ingest(kb, user, name: str = "handbook.md", data: bytes = HANDBOOK) -> None:
    """Ingest a document into kb (tasks run inline in tests)."""
    outcome = submit_document(kb, name, data, enqueue=enqueue_ingestion, user=user)
    assert outcome.status == "queued", outcome
    kb.documents.get(name=name).refresh_from_db()


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def wait_for_answer(timeout: float = 10) -> Message:
    """Return the assistant message a run stores from its worker thread, once it is there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            answer = Message.objects.filter(role="assistant").select_related("trace").first()
        except OperationalError:  # the test database's shared cache locks a table while it is written
            answer = None
        if answer:
            return answer
        time.sleep(0.05)
    raise AssertionError("no answer was stored")
