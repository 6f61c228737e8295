"""The pipeline's database work: admit a request, load its history, store the exchange and trace."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentic_rag.tracing import SpanRecord
from chat.models import Conversation, Message, Role, Span, Trace
from chat.routing_kb import RouteDecision, route
from chat.workers import AGENT_TYPES
from knowledge.models import KnowledgeBase
from knowledge.retrieval import MODES

from .options import ChatRefused, ChatRequest
from .state import Turn

_SESSION_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
TITLE_CHARS = 60


@dataclass(frozen=True)
class Admitted:
    """A request that passed the checks, with its KB and conversation."""

    request: ChatRequest
    message: str
    kb: KnowledgeBase | None
    conversation: Conversation
    route: RouteDecision | None = None


def admit(request: ChatRequest) -> Admitted:
    """Check the request and open its conversation; raise ChatRefused when it cannot run."""
    user = request.user
    if user is None or not user.is_authenticated:
        raise ChatRefused("Sign in to chat.", code="unauthenticated")
    message = (request.message or "").strip()
    _check_message(message)
    _check_options(request)
    session_id = request.session_id or uuid.uuid4().hex
    if not _SESSION_ID.match(session_id):
        raise ChatRefused("The session id may only contain letters, digits and _ . : - (at most 64).", code="invalid_session")
    chosen = resolve_kb(user, request.options.kb_slug)
    decision = route(user, message, requested_kb=chosen.slug if chosen else None, agent_type=request.options.agent_type)
    kb = chosen
    if kb is None and not decision.is_general:
        kb = resolve_kb(user, decision.kb_prefix)
    # The conversation keeps the user's choice, "auto" (None) included, not the routed KB.
    return Admitted(request, message, kb, open_conversation(user, session_id, chosen, message), decision)


def _check_message(message: str) -> None:
    if not message:
        raise ChatRefused("The message is empty.", code="empty")
    limit = settings.CHAT_MAX_MESSAGE_CHARS
    if len(message) > limit:
        raise ChatRefused(f"The message is longer than {limit} characters.", code="too_long")


def _check_options(request: ChatRequest) -> None:
    options = request.options
    if options.search_mode and options.search_mode not in MODES:
        raise ChatRefused(f"search_mode must be one of {', '.join(MODES)}.", code="invalid_option")
    if options.agent_type not in AGENT_TYPES:
        raise ChatRefused(f"agent_type must be one of {', '.join(AGENT_TYPES)}.", code="invalid_option")
    if not (1 <= options.top_k <= 50 and 1 <= options.rerank_top_k <= 50):
        raise ChatRefused("top_k and rerank_top_k must be between 1 and 50.", code="invalid_option")


def resolve_kb(user: Any, slug: str | None) -> KnowledgeBase | None:
    """The KB the user may read; unknown and unreadable KBs are refused alike."""
    if not slug:
        return None
    kb = KnowledgeBase.objects.readable_by(user).filter(slug=slug).first()
    if kb is None:
        # The same words whether it does not exist or is someone else's: nothing leaks.
        raise ChatRefused(f"There is no knowledge base '{slug}' you can read.", code="unknown_kb")
    return kb


def open_conversation(user: Any, session_id: str, kb: KnowledgeBase | None, message: str) -> Conversation:
    conversation, created = Conversation.objects.get_or_create(
        user=user, session_id=session_id, defaults={"kb": kb, "title": message[:TITLE_CHARS]}
    )
    changed = []
    if not created and conversation.kb_id != (kb.pk if kb else None):
        conversation.kb = kb
        changed.append("kb")
    if not conversation.title:  # a conversation opened empty ("new chat") is named by its first question
        conversation.title = message[:TITLE_CHARS]
        changed.append("title")
    if changed:
        conversation.save(update_fields=[*changed, "updated_at"])
    return conversation


def load_turns(conversation: Conversation, limit: int, after_id: int = 0) -> list[Turn]:
    """The conversation's last `limit` exchanges after message `after_id`, oldest first."""
    if limit <= 0:
        return []
    rows = conversation.messages.filter(id__gt=after_id).order_by("-created_at", "-id").values_list("role", "content", "debug__query")
    return [Turn(role, content, query or "") for role, content, query in reversed(rows[: 2 * limit])]


@dataclass
class Exchange:
    """Everything one request leaves behind."""

    conversation: Conversation
    trace_id: str
    question: str
    query: str = ""  # the question as rewritten, kept for the next turns' rewrites
    answer: str = ""
    has_answer: bool = False  # store an assistant message (also for a partial answer)
    partial: bool = False
    status: str = "done"
    error: str = ""
    route: str = ""
    intent: str = ""
    shortcut: str = ""
    total_ms: float = 0.0
    first_token_ms: float | None = None
    citations: list[dict[str, Any]] = field(default_factory=list)
    verification: list[dict[str, Any]] = field(default_factory=list)
    debug: dict[str, Any] = field(default_factory=dict)
    spans: list[SpanRecord] = field(default_factory=list)


@transaction.atomic
def save_exchange(exchange: Exchange) -> Message | None:
    """Store the trace, its spans, the question and the answer; return the answer's message."""
    conversation = exchange.conversation
    trace = _create_trace(exchange)
    Span.objects.bulk_create([span_row(trace, span) for span in exchange.spans])
    rewritten = exchange.query and exchange.query != exchange.question
    Message.objects.create(
        conversation=conversation, role=Role.USER, content=exchange.question, trace=trace,
        debug={"query": exchange.query} if rewritten else {},
    )
    answer = None
    if exchange.has_answer:
        answer = Message.objects.create(
            conversation=conversation, role=Role.ASSISTANT, content=exchange.answer, trace=trace,
            citations=exchange.citations, debug=exchange.debug, partial=exchange.partial,
        )
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now())
    return answer


def _create_trace(exchange: Exchange) -> Trace:
    return Trace.objects.create(
        trace_id=exchange.trace_id,
        user_id=exchange.conversation.user_id,
        conversation=exchange.conversation,
        question=exchange.question,
        route=exchange.route,
        intent=exchange.intent,
        shortcut=exchange.shortcut,
        status=exchange.status,
        error=exchange.error,
        total_ms=exchange.total_ms,
        first_token_ms=exchange.first_token_ms,
        verification=exchange.verification,
    )


def span_row(trace: Trace, span: SpanRecord) -> Span:
    return Span(
        trace=trace,
        name=span.name,
        kind=span.kind,
        start_ms=span.start_ms,
        ms=span.ms,
        input=span.input,
        output=span.output,
        status=span.status,
        error=span.error[:2000],
    )
