"""The one event every pipeline stage emits; websocket, SSE and JSON adapt it.

Event types and their `data`:

- "session": {session_id, conversation_id, trace_id}
- "route": {kb_prefix, confidence, method, reason}
- "stage_start": {label, number (S1-S8 as 1-8)}
- "stage_end": {status: "done"|"skipped"|"failed"|"shortcut", shortcut?: "A"|"B"|"C", detail}
- "intent": {intents: [{name, confidence, tool}], method}
- "retrieval": {count, evidence: [{n, source: "KB"|"TOOL", doc, chunk_id, section, score, preview, url}], reason}
- "tool": {name, parameters, result}
- "first_token": {} with `ms` since the request started
- "token": {text}
- "citation": {n, doc, chunk_id, quote, verified}
- "thinking", "round", "plan", "task", "report", "step": what a multi-step agent reports; a worker
  searching one part of a compound question adds {part} to each
- "part": {n, question, agent_type, evidence: [n], docs, found, reason}: one part of a compound
  question (chat.pipeline.compound) and the evidence its answer quotes, or why it has none
- "clarify": {kind: "scope"|"kb"|"pronoun"|"vague", reason, question, agent_type, choices: [{label, message, kb}]},
  the Clarifier asking instead of guessing (chat.clarifier); the run ends with shortcut A
- "timeout": {node, timeout_ms, fallback}: a node or step (search, verify) ran past its timeout
  (settings.CHAT_NODE_TIMEOUTS_S) and the run went on with the fallback named
- "final": {trace_id, total_ms, response, citations, shortcut, verification, status, partial,
  message_id, session_id}
- "error": {message, code}, and the fields of "final" when the run stored what it had
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

EventType = Literal[
    "session",
    "stage_start",
    "stage_end",
    "route",
    "intent",
    "retrieval",
    "tool",
    "first_token",
    "token",
    "citation",
    "thinking",
    "round",
    "plan",
    "task",
    "report",
    "step",
    "part",
    "timeout",
    "clarify",
    "final",
    "error",
]


@dataclass(frozen=True)
class PipelineEvent:
    type: EventType
    stage: str = ""  # node name, e.g. "memory", "rewrite", "intent", "guide", "system", "retrieve", "prompt", "generate"
    ms: float = 0.0  # elapsed in the stage (stage_end) or since the request started (first_token/final)
    data: dict[str, Any] = field(default_factory=dict)  # JSON-serialisable

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
