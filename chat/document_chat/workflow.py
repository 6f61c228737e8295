"""The document chat workflow: sixteen nodes, their routing, and the events they stream.

    validate_input ─general→ general_answer ─────────────────────────────┐
          └→ load_context → load_skill_registry → recognize_intent → route_intent
               route_intent ─clarify→ clarify / ─unsupported→ unsupported ─┤
                    └→ build_retrieval_query → vector_recall → rerank_context
                         → quality_gate ─answer→ run_answer_skill ─────────┤
                                        └modify→ run_modify_skill ─────────┤
          any node that finds an earlier error → error_handler ───────────→ complete

A node is a function of the request and the state so far that returns the fields it sets;
the runner applies them, streams a `reasoning` event after each node, and chooses the next
node by the routing rules of `next_node`. Streamed events, in order: connected,
processing, reasoning (per node), intent, retrieval_result, skill_started, chunk (model
text as it arrives), answer_completed or proposal_completed, error (only on failure),
completed (always last).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from agentic_rag.llm import CompletionOptions, LLMError, Message, get_llm
from agentic_rag.tracing import SpanRecorder, trace_context
from chat.models import DocumentChatTurn, DocumentProposal, Span, Trace, TraceStatus
from chat.pipeline.stages import chunk_urls, number_evidence
from chat.pipeline.state import EvidenceItem, language_of
from chat.pipeline.store import span_row
from knowledge.candidates import Candidate
from knowledge.editing import EditableSection
from knowledge.gate import GateParams, apply_quality_gate
from knowledge.models import Document, KnowledgeBase
from knowledge.retrieval import RetrievalResult, params_for_kb, retrieve

from .diff import change_counts, word_diff
from .intent import ANSWER_SKILL, MODIFY_SKILL, SKILLS, IntentResult, recognize_intent
from .query import build_keywords, build_query
from .skills import SkillInput, run_answer_skill, run_modify_skill

logger = logging.getLogger("chat.document_chat")

EVENT_TYPES = (
    "connected", "processing", "reasoning", "intent", "retrieval_result", "skill_started", "chunk",
    "answer_completed", "proposal_completed", "completed", "error",
)
NODES = (
    "validate_input", "load_context", "load_skill_registry", "recognize_intent", "route_intent",
    "build_retrieval_query", "vector_recall", "rerank_context", "quality_gate", "clarify", "unsupported",
    "run_answer_skill", "run_modify_skill", "general_answer", "error_handler", "complete",
)
RECALL_TOP_K = 30
RERANK_TOP_K = 8
HISTORY_TURNS = 6
LOG_QUERY_CHARS, LOG_CANDIDATES, LOG_SECTION_CHARS = 150, 3, 100

Emit = Callable[[str, dict], None]


class DocChatError(Exception):
    """A request the workflow cannot serve; str(e) tells the user why, `code` the client."""

    def __init__(self, message: str, code: str = "bad_input") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class SelectedSection:
    index: str = ""
    title: str = ""
    content: str = ""
    code: str = ""  # "<document id>:<position>" for a section of a stored document
    chapter_level_1: str = ""
    chapter_level_2: str = ""
    position: int | None = None  # order among the document's sections, when it is one

    @classmethod
    def of(cls, document: Document, section: EditableSection, content: str | None = None) -> SelectedSection:
        """A stored section of document, with `content` (the editor's text) or its own."""
        return cls(
            index=section.index, title=section.title, content=content or section.source or section.text,
            code=f"{document.pk}:{section.position}", chapter_level_1=section.chapter_level_1,
            chapter_level_2=section.chapter_level_2, position=section.position,
        )

    @property
    def heading(self) -> str:
        return " ".join(part for part in (self.index, self.title) if part)

    @property
    def is_scoped(self) -> bool:
        """Whether the RAG path applies: the section names a code or a chapter."""
        return bool(self.code or self.chapter_level_1 or self.chapter_level_2)


@dataclass(frozen=True)
class DocChatRequest:
    user: Any
    message: str
    section: SelectedSection
    document: Document | None = None
    conversation_id: str = ""
    history: tuple[str, ...] = ()  # the user's earlier messages, oldest first
    project_info: dict = field(default_factory=dict)


def readable_document(user, pk: int) -> Document | None:
    """The document, if it is in a knowledge base the user may read (else None, as if missing)."""
    readable = KnowledgeBase.objects.readable_by(user)
    return Document.objects.select_related("kb").filter(pk=pk, kb__in=readable).first()


def stored_history(user, conversation_id: str) -> tuple[str, ...]:
    """The user's last messages in a document conversation, oldest first."""
    turns = DocumentChatTurn.objects.filter(user=user, conversation_id=conversation_id).order_by("-created_at", "-id")
    return tuple(reversed(turns.values_list("message", flat=True)[:HISTORY_TURNS]))


@dataclass
class DocChatState:
    """What the nodes have found so far; each node returns the fields it sets."""

    history: tuple[str, ...] = ()
    project_info: dict = field(default_factory=dict)
    skills: tuple[str, ...] = ()
    intent: IntentResult | None = None
    query: str = ""
    keywords: list[str] = field(default_factory=list)
    recalled: RetrievalResult | None = None
    reranked: list[Candidate] = field(default_factory=list)
    references: list[EvidenceItem] = field(default_factory=list)
    retrieval_status: str = "skipped"
    retrieval_metrics: dict = field(default_factory=dict)
    response_type: str = ""  # answer | proposal | clarify | unsupported | general | error
    answer: str = ""
    answer_references: list[dict] = field(default_factory=list)
    proposal: dict | None = None
    warnings: list[str] = field(default_factory=list)
    offline: bool = False
    error: str = ""
    error_code: str = ""


@dataclass(frozen=True)
class Collaborators:
    llm: Any
    retrieve: Callable[..., RetrievalResult] = retrieve


@dataclass
class _Run:
    request: DocChatRequest
    collaborators: Collaborators
    emit: Emit
    spans: SpanRecorder
    trace_id: str
    state: DocChatState = field(default_factory=DocChatState)
    first_chunk_ms: float | None = None

    def on_chunk(self, text: str) -> None:
        if self.first_chunk_ms is None:
            self.first_chunk_ms = self.spans.elapsed_ms()
        self.emit("chunk", {"text": text})


# --- nodes ----------------------------------------------------------------------------


def validate_input(run: _Run) -> dict:
    request = run.request
    if not request.message.strip():
        return _error("Type a question or an instruction.", "empty_message")
    if len(request.message) > settings.CHAT_MAX_MESSAGE_CHARS:
        return _error(f"The message is longer than {settings.CHAT_MAX_MESSAGE_CHARS} characters.", "too_long")
    if len(request.section.content) > settings.MAX_SECTION_EDIT_CHARS:
        return _error(f"The section is longer than {settings.MAX_SECTION_EDIT_CHARS} characters; select a smaller one.", "too_long")
    if request.section.is_scoped and request.document is None:
        return _error("The section names no document.", "unknown_section")
    return {}


def load_context(run: _Run) -> dict:
    request = run.request
    info = {"document": request.document.name, "knowledge_base": request.document.kb.name} if request.document else {}
    project = {**info, **{str(k): str(v)[:200] for k, v in list(request.project_info.items())[:10]}}
    return {"history": request.history[-HISTORY_TURNS:], "project_info": project}


def load_skill_registry(run: _Run) -> dict:
    return {"skills": tuple(SKILLS)}


def recognize_intent_node(run: _Run) -> dict:
    request = run.request
    intent = recognize_intent(run.collaborators.llm, request.message, request.section.content, run.state.project_info)
    run.emit("intent", intent.as_dict())
    return {"intent": intent}


def route_intent(run: _Run) -> dict:
    return {}


def build_retrieval_query(run: _Run) -> dict:
    request, state = run.request, run.state
    instruction = state.intent.operation if state.intent else ""
    keywords = build_keywords(request.message, "", request.section.heading, request.section.content, state.history)
    query = build_query(request.message, "", request.section.heading, keywords)
    _log("rag_query_built", query=query[:LOG_QUERY_CHARS], keywords=keywords, operation=instruction)
    return {"query": query, "keywords": keywords}


def vector_recall(run: _Run) -> dict:
    request, state = run.request, run.state
    section = request.section
    chapter = (section.chapter_level_1, section.chapter_level_2) if section.chapter_level_1 or section.chapter_level_2 else None
    kb = request.document.kb
    # Recall, fusion, dedup and the five-factor rerank run in retrieve(), the one search
    # entry; the next two nodes read its head and gate it.
    params = params_for_kb(kb, mode="multipath", chapter=chapter, top_k=RERANK_TOP_K, leg_top_k=RECALL_TOP_K, gate=None)
    result = run.collaborators.retrieve(state.query, kb, params)
    _log("rag_recall_completed", fused=len(result.fused), top=[_brief(c) for c in result.fused[:LOG_CANDIDATES]])
    return {"recalled": result, "warnings": state.warnings + list(result.warnings)}


def rerank_context(run: _Run) -> dict:
    request, result = run.request, run.state.recalled
    # The section itself is in the prompt already; as a reference it would take a slot.
    own = {(request.document.pk, request.section.index, request.section.title)}
    head = [c for c in result.candidates if (c.doc_id, c.section_index, c.section_title) not in own][:RERANK_TOP_K]
    _log("rag_rerank_completed", kept=len(head), top=[_brief(c) for c in head[:LOG_CANDIDATES]])
    return {"reranked": head}


def quality_gate(run: _Run) -> dict:
    state = run.state
    gate = apply_quality_gate(state.reranked, GateParams())
    references = list(number_evidence(gate.references, (), limit=GateParams().submit_top_k, url_for=chunk_urls(run.request.document.kb.slug)))
    status = "approved" if references else ("rejected" if state.reranked else "empty")
    metrics = {
        "recalled": len(state.recalled.fused) if state.recalled else 0,
        "reranked": len(state.reranked),
        "approved": len(references),
        "reference_chars": gate.total_chars,
        "timings_ms": state.recalled.timings_ms if state.recalled else {},
    }
    _log("rag_quality_gate_completed", status=status, approved=len(references))
    run.emit("retrieval_result", {
        "retrieval_status": status, "references": [ref.as_event() for ref in references], "metrics": metrics,
        "query": state.query,
    })
    return {"references": references, "retrieval_status": status, "retrieval_metrics": metrics}


CLARIFY = {
    "en": "I'm not sure what you want: ask a question about this section, or say how to change it (condense, expand, polish, rewrite).",
    "zh": "我不太确定您的需求：可以就本节提问，或说明如何修改（精简、扩写、润色、改写）。",
}
UNSUPPORTED = {
    "en": "Document chat can answer questions about the selected section or propose a rewrite of it; it cannot do this.",
    "zh": "文档对话可以回答关于所选章节的问题或提出修改建议，无法完成这个请求。",
}
GENERAL_OFFLINE = {
    "en": "This message names no section, and no language model is configured to answer it from general knowledge. Select a section to ask about it.",
    "zh": "这条消息没有指定章节，且未配置语言模型，无法凭通用知识回答。请选择一个章节再提问。",
}


def clarify(run: _Run) -> dict:
    return {"response_type": "clarify", "answer": CLARIFY[_language(run)]}


def unsupported(run: _Run) -> dict:
    return {"response_type": "unsupported", "answer": UNSUPPORTED[_language(run)]}


def general_answer(run: _Run) -> dict:
    llm = run.collaborators.llm
    if not getattr(llm, "has_model", False):
        return {"response_type": "general", "answer": GENERAL_OFFLINE[_language(run)], "offline": True}
    system = "Answer briefly, in the language of the message, from general knowledge; say that the answer does not come from the user's documents."
    try:
        completion = llm.complete([Message("system", system), Message("user", run.request.message)], CompletionOptions(max_tokens=512, timeout_s=30))
    except LLMError as error:
        return _error(f"The model did not answer: {error}", "llm_failed")
    if completion.provider == "extractive":
        return {"response_type": "general", "answer": GENERAL_OFFLINE[_language(run)], "offline": True}
    return {"response_type": "general", "answer": completion.text.strip()}


def run_answer_skill_node(run: _Run) -> dict:
    run.emit("skill_started", {"skill_name": ANSWER_SKILL, "response_type": "answer"})
    output = run_answer_skill(run.collaborators.llm, _skill_input(run), run.on_chunk)
    _log("final_content_generated", skill=ANSWER_SKILL, chars=len(output.answer), offline=output.offline)
    references = output.references
    if "[0]" in output.answer:  # the prompt's document 0 is the selected section itself
        section = {"n": 0, "doc": run.request.document.name, "section": run.request.section.heading, "preview": ""}
        references = [section, *references]
    return {
        "response_type": "answer", "answer": output.answer, "answer_references": references,
        "warnings": run.state.warnings + output.warnings, "offline": output.offline,
    }


def run_modify_skill_node(run: _Run) -> dict:
    run.emit("skill_started", {"skill_name": MODIFY_SKILL, "response_type": "proposal"})
    skill_input = _skill_input(run)
    output = run_modify_skill(run.collaborators.llm, skill_input, run.on_chunk)
    _log("final_content_generated", skill=MODIFY_SKILL, chars=len(output.proposed_content), offline=output.offline)
    warnings = run.state.warnings + output.warnings
    if output.refused:
        return {"response_type": "answer", "answer": output.change_summary, "warnings": warnings, "offline": output.offline}
    parts = word_diff(skill_input.section_content, output.proposed_content)
    proposal = {
        "proposed_content": output.proposed_content,
        "change_summary": output.change_summary,
        "operation": output.operation,
        "diff": [{"op": part.op, "text": part.text} for part in parts],
        "changes": change_counts(parts),
        "base_sha256": run.request.document.sha256,
        "original_content": skill_input.section_content,
    }
    return {"response_type": "proposal", "proposal": proposal, "warnings": warnings, "offline": output.offline,
            "answer_references": [ref.as_event() for ref in skill_input.references]}


def error_handler(run: _Run) -> dict:
    state = run.state
    _log("request_failed", error=state.error, code=state.error_code)
    return {"response_type": "error"}


def complete(run: _Run) -> dict:
    return {}


# --- routing --------------------------------------------------------------------------

NodeFn = Callable[[_Run], dict]
NODE_FUNCTIONS: dict[str, NodeFn] = {
    "validate_input": validate_input,
    "load_context": load_context,
    "load_skill_registry": load_skill_registry,
    "recognize_intent": recognize_intent_node,
    "route_intent": route_intent,
    "build_retrieval_query": build_retrieval_query,
    "vector_recall": vector_recall,
    "rerank_context": rerank_context,
    "quality_gate": quality_gate,
    "clarify": clarify,
    "unsupported": unsupported,
    "run_answer_skill": run_answer_skill_node,
    "run_modify_skill": run_modify_skill_node,
    "general_answer": general_answer,
    "error_handler": error_handler,
    "complete": complete,
}
_STRAIGHT = {
    "load_context": "load_skill_registry",
    "load_skill_registry": "recognize_intent",
    "recognize_intent": "route_intent",
    "build_retrieval_query": "vector_recall",
    "vector_recall": "rerank_context",
    "rerank_context": "quality_gate",
}


def next_node(node: str, state: DocChatState, section: SelectedSection) -> str | None:
    """The node to run after `node`; None after `complete`."""
    if node == "complete":
        return None
    if state.error and node != "error_handler":
        return "error_handler"
    if node == "validate_input":
        return "load_context" if section.is_scoped else "general_answer"
    if node == "route_intent":
        return route_after_intent(state.intent)
    if node == "quality_gate":
        return "run_modify_skill" if state.intent and state.intent.skill_name == MODIFY_SKILL else "run_answer_skill"
    return _STRAIGHT.get(node, "complete")


def route_after_intent(intent: IntentResult | None) -> str:
    if intent is None or intent.needs_clarification or intent.intent == "clarify":
        return "clarify"
    if intent.skill_name in (ANSWER_SKILL, MODIFY_SKILL):
        return "build_retrieval_query"
    return "unsupported"


# --- the runner -----------------------------------------------------------------------


def run_document_chat(request: DocChatRequest, emit: Emit, *, collaborators: Collaborators | None = None) -> dict:
    """Run the workflow, streaming its events to emit; return the completed data (also stored)."""
    collaborators = collaborators or Collaborators(llm=get_llm())
    trace_uuid = uuid.uuid4()
    run = _Run(request, collaborators, emit, SpanRecorder(), str(trace_uuid))
    with trace_context(run.trace_id):
        emit("connected", {"task_id": f"doc_chat_{trace_uuid.hex[:12]}", "trace_id": run.trace_id,
                           "timestamp": datetime.now(UTC).isoformat()})
        emit("processing", {"stage_name": "workflow", "status": "started"})
        _log("request_received", message=request.message[:LOG_QUERY_CHARS], section=request.section.heading,
             content=request.section.content[:LOG_SECTION_CHARS], document=request.document.pk if request.document else None)
        node: str | None = "validate_input"
        while node is not None:
            _run_node(run, node)
            node = next_node(node, run.state, request.section)
        data = _completed_data(run)
        _store(run, data)
        status = "failed" if run.state.error else "done"
        _log("response_completed", status=status, response_type=run.state.response_type, ms=run.spans.elapsed_ms())
        if run.state.error:
            emit("error", {"error": run.state.error, "code": run.state.error_code})
        elif data.get("proposal"):
            emit("proposal_completed", data)
        else:
            emit("answer_completed", data)
        emit("completed", {"duration_ms": run.spans.elapsed_ms(), "status": status, "trace_id": run.trace_id})
    return data


def _run_node(run: _Run, node: str) -> None:
    with run.spans.span(node) as span:
        try:
            updates = NODE_FUNCTIONS[node](run)
        except DocChatError as error:
            updates = _error(str(error), error.code)
        except Exception as error:  # a node's defect must still end the stream with an error
            logger.exception("document chat node %s failed", node)
            updates = _error(f"The {node.replace('_', ' ')} step failed ({type(error).__name__}).", "internal")
        for name, value in updates.items():
            setattr(run.state, name, value)
        span.output = {k: v for k, v in updates.items() if k in ("query", "retrieval_status", "response_type", "error")}
        if "error" in updates:
            span.fail(updates["error"])
    run.emit("reasoning", {"stage_name": node, "status": "failed" if "error" in updates else "done",
                           "message": _reasoning_message(node, run.state)})


def _reasoning_message(node: str, state: DocChatState) -> str:
    if node == "recognize_intent" and state.intent:
        return f"{state.intent.intent} ({state.intent.confidence:.2f}, {state.intent.method})"
    if node == "build_retrieval_query":
        return state.query
    if node == "vector_recall" and state.recalled:
        return f"{len(state.recalled.fused)} candidates recalled"
    if node == "rerank_context":
        return f"{len(state.reranked)} kept after rerank"
    if node == "quality_gate":
        return f"{len(state.references)} reference(s) passed the gate"
    return state.error if node == "error_handler" else ""


def _completed_data(run: _Run) -> dict:
    state, request = run.state, run.request
    data = {
        "trace_id": run.trace_id,
        "conversation_id": request.conversation_id,
        "response_type": state.response_type,
        "intent": state.intent.as_dict() if state.intent else None,
        "answer": state.answer,
        "references": state.answer_references,
        "warnings": state.warnings,
        "offline": state.offline,
        "retrieval": {"status": state.retrieval_status, "query": state.query, "metrics": state.retrieval_metrics},
        "proposal": state.proposal,
        "section": {"index": request.section.index, "title": request.section.title, "position": request.section.position},
        "status": "failed" if state.error else "done",
    }
    if state.error:
        data["error"] = {"message": state.error, "code": state.error_code}
    return data


def _store(run: _Run, data: dict) -> None:
    """The trace, the turn and any proposal, in one transaction."""
    request, state = run.request, run.state
    if not getattr(request.user, "is_authenticated", False):
        return
    with transaction.atomic():
        trace = Trace.objects.create(
            trace_id=uuid.UUID(run.trace_id), user=request.user, question=request.message[:4000],
            route=f"document-chat:{request.document.kb.slug}" if request.document else "document-chat",
            intent=state.intent.intent if state.intent else "",
            status=TraceStatus.FAILED if state.error else TraceStatus.DONE, error=state.error,
            total_ms=run.spans.elapsed_ms(), first_token_ms=run.first_chunk_ms,
        )
        Span.objects.bulk_create([span_row(trace, span) for span in run.spans.spans])
        turn = DocumentChatTurn.objects.create(
            conversation_id=request.conversation_id, user=request.user, document=request.document,
            section_index=request.section.index[:32], section_title=request.section.title[:500],
            message=request.message, intent=state.intent.intent if state.intent else "",
            response_type=state.response_type, trace=trace,
            details={"references": state.answer_references, "warnings": state.warnings, "offline": state.offline,
                     "retrieval_status": state.retrieval_status},
            reply=(state.proposal or {}).get("change_summary", "") or state.answer or state.error,
        )
        if state.proposal and request.document is not None and request.section.position is not None:
            proposal = DocumentProposal.objects.create(
                turn=turn, document=request.document, user=request.user, section_position=request.section.position,
                base_sha256=state.proposal["base_sha256"], original_content=state.proposal["original_content"],
                proposed_content=state.proposal["proposed_content"], change_summary=state.proposal["change_summary"],
                operation=state.proposal["operation"], warnings=state.warnings, offline=state.offline,
            )
            data["proposal"] = {**state.proposal, "id": proposal.pk}
        data["turn_id"] = turn.pk


def _skill_input(run: _Run) -> SkillInput:
    request, state = run.request, run.state
    operation = state.intent.operation if state.intent else ""
    previous = last_proposal(request) if operation == "regenerate" else None
    attempts = proposals_for(request).count() if request.document else 0
    if operation == "regenerate" and previous is None:
        operation = "rewrite"  # nothing to regenerate: a first rewrite
    return SkillInput(
        message=request.message,
        operation=operation,
        section_heading=request.section.heading,
        section_content=request.section.content,
        references=tuple(state.references),
        history=state.history,
        project_info=state.project_info,
        previous_proposal=previous.proposed_content if previous else "",
        previous_operation=previous.operation if previous else "",
        attempt=attempts,
    )


def proposals_for(request: DocChatRequest):
    return DocumentProposal.objects.filter(
        user=request.user, document=request.document, section_position=request.section.position,
        turn__conversation_id=request.conversation_id,
    )


def last_proposal(request: DocChatRequest) -> DocumentProposal | None:
    if request.document is None or request.section.position is None:
        return None
    return proposals_for(request).order_by("-created_at", "-id").first()


def _error(message: str, code: str) -> dict:
    return {"error": message, "error_code": code}


def _language(run: _Run) -> str:
    return language_of(run.request.message)


def _brief(candidate: Candidate) -> dict:
    return {"doc": candidate.doc_name, "section": candidate.section, "score": round(float(candidate.score), 4)}


def _log(event: str, **fields: Any) -> None:
    logger.info("%s %s", event, fields, extra={"event": event, "fields": fields})
