"""One chat request on its way through the graph: its collaborators, state and events."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agentic_rag.shutdown import is_stop_requested
from agentic_rag.tracing import SpanRecorder
from chat.events import PipelineEvent
from chat.models import Shortcut, TraceStatus

from . import stages
from .collaborators import Cache
from .intent import DEFAULT_INTENT, IntentResult
from .options import StageStatus, StageTiming
from .prompt import Prompt
from .rewrite import Rewrite, unchanged
from .state import EvidenceItem, Turn
from .store import Admitted
from .timeouts import current_scopes
from .tools import ToolChannel, ToolResult

logger = logging.getLogger("chat.pipeline")

Emit = Callable[[PipelineEvent], None]


@dataclass(frozen=True)
class Collaborators:
    llm: Any
    retriever: stages.Retriever
    tools: ToolChannel
    cache: Cache


@dataclass(frozen=True)
class Outcome:
    """What a stage found. The runner applies `found` (ChatRun attributes) and sends `events`
    once it accepts the stage, so a stage cut off at its budget changes nothing."""

    status: StageStatus = StageStatus.DONE
    detail: str = ""
    shortcut: Shortcut | str = ""
    found: Mapping[str, Any] = field(default_factory=dict)
    events: tuple[tuple[str, dict[str, Any]], ...] = ()  # (type, data), sent as the stage's own


class ChatRun:
    """One request on its way through the graph: inputs, what the stages found, events out."""

    def __init__(self, admitted: Admitted, collaborators: Collaborators, emit: Emit, cancelled: Callable[[], bool]):
        self.admitted = admitted
        self.options = admitted.request.options
        self.message = admitted.message
        self.kb = admitted.kb
        self.conversation = admitted.conversation
        self.collaborators = collaborators
        self.trace_id = str(uuid.uuid4())
        self.recorder = SpanRecorder(max_chars=settings.CHAT_SPAN_MAX_CHARS)
        self.history: tuple[Turn, ...] = ()
        self.memory = ""  # the summary of older turns and recalled past exchanges
        self.facts: tuple[Any, ...] = ()  # the user's stated facts this question recalls (chat.facts)
        # Until the rewrite stage says otherwise (switched off, or never reached), the query is the message.
        self.rewrite: Rewrite = unchanged(self.message, "off")
        self.intent: IntentResult = DEFAULT_INTENT
        self.evidence: tuple[EvidenceItem, ...] = ()
        self.tool_results: list[ToolResult] = []
        self.agent_steps: list[dict[str, Any]] = []  # what a multi-step worker reported, in order
        self.incomplete = ""  # why an agent stopped short: the answer is stored as partial
        self.search_warnings: list[str] = []
        self.prompt: Prompt | None = None
        # A compound question's parts (chat.pipeline.compound): each answered from its own evidence.
        self.parts: tuple[stages.PartEvidence, ...] = ()
        self.part_prompts: tuple[tuple[stages.PartEvidence, Prompt | None], ...] = ()
        self.provider = ""
        self.reply = ""  # a shortcut's answer
        self.clarification: dict[str, Any] | None = None  # the Clarifier's "clarify" event, when it asked
        self.shortcut: Shortcut | str = ""
        self.pieces: list[str] = []
        self.first_token_ms: float | None = None
        self.stages: list[StageTiming] = []
        self.status = TraceStatus.DONE
        self.error = ""
        self.error_code = ""
        self.events: list[PipelineEvent] = []  # everything sent, for the run's ChatResult
        self._emit = emit
        self._cancelled = cancelled
        self._lock = threading.Lock()
        self._is_client_gone = False
        self._abandoned: set[str] = set()  # nodes and steps the run stopped waiting for (timeouts)

    def emit(self, type: str, stage: str = "", ms: float = 0.0, /, **data: Any) -> None:
        """Send an event (one at a time, whichever thread calls); a failing receiver cancels the run.

        The run keeps every event, sent or not, so its result is whole even when the client left.
        """
        event = PipelineEvent(type, stage, round(ms, 3), data)
        with self._lock:
            if self._is_abandoned_here():
                return  # a node cut off at its timeout, still running: the run has moved on
            self.events.append(event)
            if self._is_client_gone:
                return
            try:
                self._emit(event)
            except Exception:
                logger.warning("the event receiver failed; treating the client as gone", exc_info=True)
                self._is_client_gone = True

    def is_cancelled(self) -> bool:
        # A stopping process cancels every run: its nodes run on pool threads, which the
        # interpreter waits for at exit, so a stream left going would hold the exit.
        return self._is_client_gone or self._cancelled() or is_stop_requested()

    def abandon(self, scope: str) -> None:
        """Stop taking anything from the work of `scope` (a node or step past its timeout)."""
        with self._lock:
            self._abandoned.add(scope)

    def is_abandoned(self) -> bool:
        """Whether the calling thread works for a node or step the run stopped waiting for."""
        with self._lock:
            return self._is_abandoned_here()

    def _is_abandoned_here(self) -> bool:
        return bool(self._abandoned) and any(scope in self._abandoned for scope in current_scopes())

    @property
    def is_stopped(self) -> bool:
        return bool(self.shortcut) or self.status != TraceStatus.DONE

    def deliver(self, piece: str) -> None:
        """Stream one piece of the answer to the client."""
        if self.is_abandoned():
            return
        if self.first_token_ms is None:
            self.first_token_ms = self.recorder.elapsed_ms()
            self.emit("first_token", "generate", self.first_token_ms)
        self.pieces.append(piece)
        self.emit("token", "generate", text=piece)
