"""Document chat speed and re-indexing: `manage.py bench document-chat --kb SLUG [--runs N]`.

Latency: the workflow run in-process over the KB's editable documents, one question and
one "condense" per section (offline unless a model is configured), end to end and to the
first streamed chunk of text (a refusal streams none: its end counts). Re-indexing: the KB's editable documents are copied into a scratch
KB, each gets one section condensed and accepted, and the edited versions' ingestion is
compared with the first: chunks embedded again versus vectors reused, and ingestion time.
The scratch KB is deleted afterwards; the measured KB is not changed (its proposals and
turns are deleted too).
"""

from __future__ import annotations

import time
import uuid
from itertools import islice
from typing import Any

from chat.document_chat.proposals import accept_proposal
from chat.document_chat.workflow import DocChatRequest, SelectedSection, run_document_chat
from chat.models import DocumentChatTurn, DocumentProposal, Trace
from chat.pipeline.state import language_of
from knowledge.editing import document_sections, is_editable
from knowledge.ingest import run_ingestion, submit_document
from knowledge.models import Document, IngestionJob, KnowledgeBase

from .metrics import percentile

QUESTION = {"en": "What does this section say about {title}?", "zh": "这一节关于{title}说了什么？"}
CONDENSE = {"en": "Condense this section", "zh": "精简这一节"}


def _long_sections(document: Document, limit: int):
    # Condensing needs three sentences; a one-line section would only measure the refusal.
    sections = [s for s in document_sections(document) if s.title and len(s.source) >= 200]
    return list(islice(sections, limit))


def _timed_run(user, document: Document, section, message: str, conversation_id: str) -> tuple[float, float, dict]:
    started = time.perf_counter()
    first: list[float] = []

    def emit(event: str, payload: dict) -> None:
        if event == "chunk" and not first:
            first.append((time.perf_counter() - started) * 1000)

    data = run_document_chat(DocChatRequest(user, message, SelectedSection.of(document, section), document, conversation_id), emit)
    total = (time.perf_counter() - started) * 1000
    return total, first[0] if first else total, data


def bench_document_chat(kb: KnowledgeBase, user, *, runs: int = 40) -> dict[str, Any]:
    documents = [d for d in kb.documents.filter(live_version__gt=0) if is_editable(d)]
    pairs = [(d, s) for d in documents for s in _long_sections(d, 3)][:runs]
    if not pairs:
        return {"error": f"no editable document with sections of 200+ characters in {kb.slug}"}
    conversation = f"bench-{uuid.uuid4().hex[:8]}"
    answer_ms, modify_ms, first_ms, proposals, refused = [], [], [], 0, 0
    try:
        for document, section in pairs:
            language = language_of(section.title)
            total, first, _ = _timed_run(user, document, section, QUESTION[language].format(title=section.title), conversation)
            answer_ms.append(total)
            first_ms.append(first)
            total, first, data = _timed_run(user, document, section, CONDENSE[language], conversation)
            modify_ms.append(total)
            first_ms.append(first)
            proposals += data.get("response_type") == "proposal"
            refused += data.get("response_type") != "proposal"
    finally:
        turns = DocumentChatTurn.objects.filter(conversation_id=conversation)
        Trace.objects.filter(pk__in=turns.values("trace_id")).delete()
        turns.delete()
    report = {
        "kb": kb.slug,
        "sections": len(pairs),
        "answer_p50_ms": round(percentile(answer_ms, 50), 1),
        "answer_p95_ms": round(percentile(answer_ms, 95), 1),
        "modify_p50_ms": round(percentile(modify_ms, 50), 1),
        "modify_p95_ms": round(percentile(modify_ms, 95), 1),
        "first_chunk_p50_ms": round(percentile(first_ms, 50), 2),
        "condense_proposals": proposals,
        "condense_refused": refused,
    }
    report.update(bench_reindex(documents[:10], user))
    return report


def bench_reindex(documents: list[Document], user) -> dict[str, Any]:
    """Accept one condensed section per document in a scratch KB; compare its ingestion with the first."""
    scratch = KnowledgeBase.objects.create(slug=f"bench-docchat-{uuid.uuid4().hex[:8]}", name="Document chat benchmark", owner=user)
    try:
        first_ms, edit_ms, embedded, reused, accepted = 0.0, 0.0, 0, 0, 0
        for original in documents:
            copy = _ingest(scratch, original.name, bytes(original.file.data))
            first_ms += _last_job_ms(copy)
            sections = _long_sections(copy, 1)
            if not sections:
                continue
            _, _, data = _timed_run(user, copy, sections[0], CONDENSE["en"], "bench-reindex")
            if not data.get("proposal"):
                continue
            # Ingested here rather than enqueued, so its job is timed like the first.
            accept_proposal(DocumentProposal.objects.get(pk=data["proposal"]["id"]), user, enqueue=lambda pk: None)
            run_ingestion(copy.pk)
            job = IngestionJob.objects.filter(document=copy).order_by("-started_at").first()
            edit_ms += sum(job.timings_ms.values())
            embedded += job.embedded_chunks
            reused += job.reused_chunks
            accepted += 1
        return {
            "reindex_documents": accepted,
            "reindex_embedded_chunks": embedded,
            "reindex_reused_chunks": reused,
            "reindex_first_ingest_ms": round(first_ms, 1),
            "reindex_edited_ingest_ms": round(edit_ms, 1),
        }
    finally:
        Trace.objects.filter(pk__in=DocumentChatTurn.objects.filter(conversation_id="bench-reindex", document__kb=scratch).values("trace_id")).delete()
        scratch.delete()


def _ingest(kb: KnowledgeBase, name: str, data: bytes) -> Document:
    outcome = submit_document(kb, name, data, enqueue=lambda pk: None)
    run_ingestion(outcome.document.pk)
    return Document.objects.get(pk=outcome.document.pk)


def _last_job_ms(document: Document) -> float:
    job = IngestionJob.objects.filter(document=document).order_by("-started_at").first()
    return sum(job.timings_ms.values()) if job else 0.0
