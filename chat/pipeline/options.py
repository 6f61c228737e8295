"""What a chat request carries in and what it hands back."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from django.conf import settings

from chat.models import Shortcut, TraceStatus


def _setting(name: str):
    """A dataclass default read from settings when the options are made (so tests can change it)."""
    return field(default_factory=lambda: getattr(settings, name))


@dataclass(frozen=True)
class ChatOptions:
    """The chat's switches. Their defaults come from the CHAT_* settings; the page, the API and
    `ask` set the KB and the agent type, code that calls run_chat (benches, tests) may set any."""

    kb_slug: str | None = None  # None: the router picks one by content
    agent_type: str = "auto"  # a chat.workers.WORKER_TYPES name, or "auto"
    enable_query_rewrite: bool = _setting("CHAT_ENABLE_QUERY_REWRITE")
    enable_rerank: bool | None = _setting("CHAT_ENABLE_RERANK")  # None: the KB's stored setting
    top_k: int = _setting("CHAT_TOP_K")
    rerank_top_k: int = _setting("CHAT_RERANK_TOP_K")
    # Intents scoring below this are not candidates (the top-2 gap rule ignores them).
    min_confidence_score: float = _setting("CHAT_MIN_CONFIDENCE_SCORE")
    # Shortcut C when no passage holds this share of the question's terms (0: off).
    min_evidence_coverage: float = _setting("CHAT_MIN_EVIDENCE_COVERAGE")
    search_mode: str = _setting("CHAT_SEARCH_MODE")  # "": the KB's stored mode
    enable_source_citation: bool = _setting("CHAT_ENABLE_SOURCE_CITATION")
    history_turns: int = _setting("CHAT_HISTORY_TURNS")
    rewrite_history_turns: int = _setting("CHAT_REWRITE_HISTORY_TURNS")
    ambiguity_min_confidence: float = _setting("CHAT_AMBIGUITY_MIN_CONFIDENCE")
    ambiguity_min_gap: float = _setting("CHAT_AMBIGUITY_MIN_GAP")
    max_answer_tokens: int = _setting("CHAT_MAX_ANSWER_TOKENS")
    temperature: float | None = None  # None: by task (QA 0.1, code 0.2, summary 0.3, creative 0.7)
    # S1 episodic recall: the user's past exchanges from their other conversations.
    recall_memory: bool = True
    # A reply to the Clarifier's question (a choice the user picked): it is not asked again.
    clarified: bool = False

    def replace(self, **overrides: Any) -> ChatOptions:
        """Return a copy with the given fields changed (unknown names raise TypeError)."""
        return dataclasses.replace(self, **overrides)


@dataclass(frozen=True)
class ChatRequest:
    user: Any
    session_id: str | None
    message: str
    options: ChatOptions = field(default_factory=ChatOptions)


class StageStatus(StrEnum):
    """How one stage ended (the `stage_end` event's status)."""

    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"  # it failed and degraded, or went over a hard budget
    SHORTCUT = "shortcut"  # it answered, and the stages after it did not run


@dataclass(frozen=True)
class StageTiming:
    name: str
    ms: float
    status: StageStatus
    detail: str = ""


@dataclass(frozen=True)
class ChatResult:
    """Everything one chat run produced, read from its events.

    Every entry point (websocket, SSE, the JSON API, `ask`, the form without JavaScript,
    the benchmarks) sees the same events; `fold_events` turns them into this one shape.
    """

    trace_id: str = ""
    session_id: str = ""
    conversation_id: int | None = None
    answer: str = ""
    status: TraceStatus = TraceStatus.DONE
    shortcut: Shortcut | None = None
    partial: bool = False
    incomplete: str = ""  # why an agent stopped short of what the question needs
    route: str | None = None  # the slug of the KB searched
    routing: dict[str, Any] = field(default_factory=dict)  # how, how surely and why it was chosen
    intents: tuple[dict[str, Any], ...] = ()
    intent_method: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()  # {name, parameters, result} of each tool that ran
    agent_steps: tuple[dict[str, Any], ...] = ()  # what a multi-step agent reported, in order
    clarification: dict[str, Any] | None = None  # the Clarifier's question and choices, when it asked
    citations: tuple[dict[str, Any], ...] = ()
    verification: tuple[dict[str, Any], ...] = ()
    evidence: tuple[dict[str, Any], ...] = ()
    stages: tuple[StageTiming, ...] = ()
    total_ms: float = 0.0
    first_token_ms: float | None = None
    message_id: int | None = None
    error: str = ""
    error_code: str = ""

    @property
    def intent(self) -> str:
        """The top intent's name ("KB", "SYSTEM", "TOOL:weather"), "" when there is none."""
        return intent_label(self.intents)

    @property
    def tools(self) -> tuple[str, ...]:
        """The names of the tools that ran, in order."""
        return tuple(call["name"] for call in self.tool_calls)

    def stage(self, name: str) -> StageTiming | None:
        return next((s for s in self.stages if s.name == name), None)

    def as_json(self) -> dict[str, Any]:
        """The JSON API's body and `ask --json`'s output."""
        return {
            "session_id": self.session_id or None,
            "conversation_id": self.conversation_id,
            "message_id": self.message_id,
            "trace_id": self.trace_id or None,
            "status": self.status,
            "partial": self.partial,
            "incomplete": self.incomplete,
            "answer": self.answer,
            "citations": list(self.citations),
            "verification": list(self.verification),
            "evidence": list(self.evidence),
            "intent": {"intents": list(self.intents), "method": self.intent_method} if self.intents else None,
            "route": self.routing or None,
            "tools": list(self.tool_calls),
            "agent_steps": list(self.agent_steps),
            "clarification": self.clarification,
            "shortcut": self.shortcut,
            "total_ms": self.total_ms,
            "first_token_ms": self.first_token_ms,
            "stages": [{"name": s.name, "ms": s.ms, "status": s.status, "detail": s.detail} for s in self.stages],
            "error": {"message": self.error, "code": self.error_code} if self.error_code else None,
        }


def intent_label(intents: Sequence[dict[str, Any]]) -> str:
    """The top intent as one word: "KB", "SYSTEM", "TOOL:weather"; "" when there is none."""
    if not intents:
        return ""
    top = intents[0]
    return f"TOOL:{top['tool']}" if top.get("tool") else top["name"]


class ChatRefused(Exception):
    """The request cannot run: the message says why, `code` says which rule refused it."""

    def __init__(self, message: str, *, code: str = "refused") -> None:
        super().__init__(message)
        self.code = code
