"""What a chat request carries in and what it hands back."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings


def _setting(name: str):
    """A dataclass default read from settings when the options are made (so tests can change it)."""
    return field(default_factory=lambda: getattr(settings, name))


@dataclass(frozen=True)
class ChatOptions:
    """Seed 001's switches. Their defaults come from the CHAT_* settings; the page, the API and
    `ask` set the KB and the agent type, code that calls run_chat (benches, tests) may set any."""

    kb_slug: str | None = None  # None: the router picks one by content (seed 003 §2.5)
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

    def replace(self, **overrides: Any) -> ChatOptions:
        """Return a copy with the given fields changed (unknown names raise TypeError)."""
        return dataclasses.replace(self, **overrides)


@dataclass(frozen=True)
class ChatRequest:
    user: Any
    session_id: str | None
    message: str
    options: ChatOptions = field(default_factory=ChatOptions)


@dataclass(frozen=True)
class StageTiming:
    name: str
    ms: float
    status: str  # "done" | "skipped" | "failed" | "shortcut"
    detail: str = ""


@dataclass(frozen=True)
class ChatResult:
    trace_id: str
    session_id: str
    conversation_id: int
    answer: str
    status: str  # "done" | "failed" | "cancelled"
    shortcut: str | None = None  # "A" | "B" | "C"
    partial: bool = False
    route: str | None = None  # the KB slug searched
    intents: tuple[dict[str, Any], ...] = ()
    intent_method: str = ""
    tools: tuple[str, ...] = ()
    citations: tuple[dict[str, Any], ...] = ()
    verification: tuple[dict[str, Any], ...] = ()
    evidence: tuple[dict[str, Any], ...] = ()
    stages: tuple[StageTiming, ...] = ()
    total_ms: float = 0.0
    first_token_ms: float | None = None
    message_id: int | None = None
    error: str = ""

    @property
    def intent(self) -> str:
        """The top intent's name ("KB", "SYSTEM", "TOOL:weather"), "" when there is none."""
        if not self.intents:
            return ""
        top = self.intents[0]
        return f"TOOL:{top['tool']}" if top.get("tool") else top["name"]

    def stage(self, name: str) -> StageTiming | None:
        return next((s for s in self.stages if s.name == name), None)


class ChatRefused(Exception):
    """The request cannot run: the message says why, `code` says which rule refused it."""

    def __init__(self, message: str, *, code: str = "refused") -> None:
        super().__init__(message)
        self.code = code
