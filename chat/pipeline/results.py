"""The end of a run: verify citations, store the exchange and its trace, send final or error."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from agentic_rag.background import dispatch
from chat import tasks
from chat.events import PipelineEvent
from chat.fact_extraction import might_state_fact
from chat.memory import needs_summary
from chat.models import Shortcut, TraceStatus
from knowledge.analysis import analyze
from knowledge.fusion import expand_query

from .citations import MAY_NOT_ANSWER, UNVERIFIED, Citation, check_citations, display_answer, find_citations
from .compound import answer_parts
from .graph import CHAT_GRAPH
from .options import ChatResult, StageStatus, StageTiming, intent_label
from .run import ChatRun
from .state import EvidenceItem
from .store import Exchange, save_exchange
from .timeouts import node_timeout_s, wait_for

logger = logging.getLogger("chat.pipeline")

VERIFY_TIMED_OUT = "the check ran out of time"
VERIFY_FALLBACK = "citations shown unverified"

# Parallel stages end in any order; results list them in the graph's.
_ORDER = {node.id: index for index, node in enumerate(CHAT_GRAPH.nodes)}


def route_of(run: ChatRun) -> str:
    """The slug of the KB the run searches ("" for none)."""
    return run.kb.slug if run.kb else ""


def route_event(run: ChatRun) -> dict[str, Any]:
    """The "route" event: the KB, and how, how surely and why the router chose it."""
    if run.admitted.route is not None:
        return run.admitted.route.as_event()
    if run.kb is None:
        return {"kb_prefix": "", "confidence": 0.0, "method": "none", "reason": "no knowledge base selected"}
    return {"kb_prefix": run.kb.slug, "confidence": 1.0, "method": "explicit", "reason": "chosen in the request"}


def finish(run: ChatRun) -> None:
    """Check citations, store the exchange and trace, and end the events with final or error."""
    raw = "".join(run.pieces)
    citations = _citations(run, raw)
    total_ms = run.recorder.elapsed_ms()
    for citation in citations:
        if citation.doc:
            run.emit("citation", "generate", **citation.as_dict())
    answer = display_answer(raw)
    shown = [c.as_dict() for c in citations if c.doc]  # a `[n]` past the evidence points at nothing
    verification = [c.as_verification() for c in citations]
    message_id = None
    try:
        message_id = _store(run, answer, shown, verification, total_ms)
    except Exception as error:  # the answer was shown; say it could not be kept
        logger.exception("storing the chat exchange failed")
        run.status, run.error, run.error_code = TraceStatus.FAILED, f"the answer could not be stored: {error}", "store_failed"
    data = _final_data(run, answer, shown, verification, total_ms, message_id)
    if run.status == TraceStatus.FAILED:
        run.emit("error", "generate" if run.pieces else "", total_ms, message=run.error, code=run.error_code, **data)
    else:
        run.emit("final", "", total_ms, **data)
    logger.info("chat %s shortcut=%s total_ms=%.1f first_token_ms=%s", run.status, run.shortcut or "-", total_ms, run.first_token_ms)
    _schedule_memory(run, message_id)


def _schedule_memory(run: ChatRun, message_id: int | None) -> None:
    """After the answer: embed the exchange for recall, summarise when the history grew long, keep
    the facts the message states."""
    if message_id is None or run.status != TraceStatus.DONE:
        return
    try:
        if run.shortcut not in (Shortcut.A, Shortcut.B):  # clarifying questions and greetings are not worth recalling
            dispatch(tasks.remember_exchange, message_id)
        if needs_summary(run.conversation):
            dispatch(tasks.summarise_conversation, run.conversation.pk)
        if might_state_fact(run.message):  # "we use PostgreSQL 15": kept for later questions
            dispatch(tasks.remember_facts, message_id)
    except Exception:  # the answer stands; memory catches up on the next exchange
        logger.exception("scheduling the memory tasks failed")


def _citations(run: ChatRun, raw: str) -> list[Citation]:
    if not (run.options.enable_source_citation and run.evidence and raw):
        return []
    started = run.recorder.elapsed_ms()
    timeout_s = node_timeout_s("verify")
    waited = wait_for(lambda: _check_citations(run, raw),
                      scope="verify", timeout_s=timeout_s, apart=timeout_s is not None, on_timeout=run.abandon)
    citations = waited.value
    if citations is None:  # past its timeout: the citations are shown, none of them as verified
        citations = unverified_citations(raw, run.evidence, VERIFY_TIMED_OUT)
        run.emit("timeout", "verify", waited.ms, node="verify", timeout_ms=round(waited.ms), fallback=VERIFY_FALLBACK)
    failed = sum(c.status == UNVERIFIED for c in citations)
    doubted = sum(c.status == MAY_NOT_ANSWER for c in citations)
    why = [f"{failed} quote(s) not found in their source" if failed else "",
           f"{doubted} quote(s) may not answer the question" if doubted else ""]
    run.recorder.add("verify", "stage", start_ms=started, ms=round(run.recorder.elapsed_ms() - started, 3),
                     output=[c.as_verification() for c in citations], status="failed" if failed else "ok",
                     error="; ".join(filter(None, why)))
    return citations


def _check_citations(run: ChatRun, raw: str) -> list[Citation]:
    """The answer's citations checked; a compound question's part by part, each part's quotes
    against its own question (they answer it, not the whole message)."""
    parts = answer_parts(raw, [part.question for part, _ in run.part_prompts]) if run.part_prompts else []
    if not parts:
        return check_citations(raw, run.evidence, run.message, tokenize=analyze, expand=expand_query)
    return [
        citation
        for question, text in parts
        for citation in check_citations(text, run.evidence, question, tokenize=analyze, expand=expand_query)
    ]


def unverified_citations(answer: str, evidence: Sequence[EvidenceItem], reason: str) -> list[Citation]:
    """The answer's citations resolved to their evidence, each unverified for `reason`."""
    by_n = {item.n: item for item in evidence}
    citations: dict[tuple[int, str], Citation] = {}
    for cited in find_citations(answer):
        item = by_n.get(cited.n)
        where = (item.doc, item.chunk_id, item.source, item.section) if item else ()
        why = reason if item else f"no evidence [{cited.n}]"
        citations.setdefault((cited.n, cited.quote), Citation(cited.n, cited.quote, False, why, cited.sentence, *where))
    return list(citations.values())


def _store(
    run: ChatRun, answer: str, shown: list[dict[str, Any]], verification: list[dict[str, Any]], total_ms: float
) -> int | None:
    exchange = Exchange(
        conversation=run.conversation,
        trace_id=run.trace_id,
        question=run.message,
        query=run.rewrite.query,
        answer=answer,
        has_answer=bool(run.pieces),
        partial=_is_partial(run),
        status=run.status,
        error=run.error,
        route=route_of(run),
        intent=intent_label([intent.as_dict() for intent in run.intent.intents]),
        shortcut=run.shortcut,
        total_ms=total_ms,
        first_token_ms=run.first_token_ms,
        citations=shown,
        verification=verification,
        debug=_debug(run, verification),
        spans=list(run.recorder.spans),
    )
    message = save_exchange(exchange)
    return message.pk if message else None


def _is_partial(run: ChatRun) -> bool:
    """Cut short: the stream stopped before the answer ended, or an agent stopped at a cap."""
    stopped_short = bool(run.incomplete) and not run.shortcut  # "not found" is a whole answer
    return bool(run.pieces) and (run.status != TraceStatus.DONE or stopped_short)


def _debug(run: ChatRun, verification: list[dict[str, Any]]) -> dict[str, Any]:
    prompt = run.prompt
    return {
        "trace_id": run.trace_id,
        "route": route_of(run) or None,
        "intents": [intent.as_dict() for intent in run.intent.intents],
        "intent_method": run.intent.method,
        "rewrite": run.rewrite.as_dict(),
        "shortcut": run.shortcut or None,
        "evidence": [item.as_stored() for item in run.evidence],
        "tools": [r.as_event() for r in run.tool_results],
        "agent_steps": run.agent_steps,
        "clarification": run.clarification,
        "incomplete": run.incomplete,
        "warnings": run.search_warnings,
        "prompt": {"mode": prompt.mode, "task": prompt.task, "temperature": prompt.temperature} if prompt else None,
        "provider": run.provider,
        "verification": verification,
        "stages": [{"name": s.name, "ms": s.ms, "status": s.status} for s in in_graph_order(run.stages)],
    }


def _final_data(
    run: ChatRun, answer: str, shown: list[dict[str, Any]], verification: list[dict[str, Any]], total_ms: float,
    message_id: int | None,
) -> dict[str, Any]:
    return {
        "trace_id": run.trace_id,
        "total_ms": total_ms,
        "first_token_ms": run.first_token_ms,
        "response": answer,
        "citations": shown,
        "shortcut": run.shortcut or None,
        "verification": verification,
        "status": run.status,
        "partial": _is_partial(run),
        "incomplete": run.incomplete,
        "message_id": message_id,
        "session_id": run.conversation.session_id,
    }


def in_graph_order(timings: Iterable[StageTiming]) -> list[StageTiming]:
    return sorted(timings, key=lambda stage: _ORDER.get(stage.name, len(_ORDER)))


# What a multi-step agent reports as it works; the result keeps them in order.
AGENT_STEP_EVENTS = frozenset({"thinking", "round", "plan", "task", "report", "step", "part"})


def fold_events(events: Iterable[PipelineEvent]) -> ChatResult:
    """Read one run's events into its ChatResult: the one shape every entry point answers with."""
    fields: dict[str, Any] = {}
    tokens: list[str] = []
    stages: list[StageTiming] = []
    tool_calls: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    for event in events:
        data = event.data
        if event.type == "session":
            fields.update(session_id=data.get("session_id", ""), conversation_id=data.get("conversation_id"),
                          trace_id=data.get("trace_id", ""))
        elif event.type == "route":
            fields.update(routing=dict(data), route=data.get("kb_prefix") or None)
        elif event.type == "intent":
            fields.update(intents=tuple(data.get("intents", ())), intent_method=data.get("method", ""))
        elif event.type == "tool":
            tool_calls.append(dict(data))
        elif event.type in AGENT_STEP_EVENTS:
            steps.append({"type": event.type, **data})
        elif event.type == "retrieval":
            fields["evidence"] = tuple(data.get("evidence", ()))
        elif event.type == "clarify":
            fields["clarification"] = dict(data)
        elif event.type == "stage_end":
            stages.append(StageTiming(event.stage, event.ms, StageStatus(data["status"]), data.get("detail", "")))
        elif event.type == "first_token":
            fields["first_token_ms"] = event.ms
        elif event.type == "token":
            tokens.append(str(data.get("text", "")))
        elif event.type in ("final", "error"):
            fields.update(_ending(event))
    fields.setdefault("answer", "".join(tokens))
    return ChatResult(**fields, stages=tuple(in_graph_order(stages)), tool_calls=tuple(tool_calls),
                      agent_steps=tuple(steps))


def _ending(event: PipelineEvent) -> dict[str, Any]:
    """The fields a `final` event carries; an `error` event carries them too once the run stored
    its exchange, and only its message and code when it could not run at all."""
    data = event.data
    ending: dict[str, Any] = {}
    if "response" in data:
        ending.update(
            answer=data["response"], citations=tuple(data.get("citations", ())),
            verification=tuple(data.get("verification", ())),
            shortcut=Shortcut(data["shortcut"]) if data.get("shortcut") else None,
            trace_id=data.get("trace_id", ""), total_ms=data.get("total_ms") or 0.0,
            partial=bool(data.get("partial")), incomplete=data.get("incomplete", ""),
            message_id=data.get("message_id"),
        )
    if event.type == "final":
        ending["status"] = TraceStatus(data.get("status", TraceStatus.DONE))
    else:
        ending.update(status=TraceStatus.FAILED, error=data.get("message", ""), error_code=data.get("code", "internal"))
    return ending
