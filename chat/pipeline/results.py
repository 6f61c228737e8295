"""The end of a run: verify citations, store the exchange and its trace, send final or error."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from agentic_rag.background import dispatch
from chat import tasks
from chat.memory import needs_summary
from knowledge.analysis import analyze
from knowledge.fusion import expand_query

from .citations import Citation, check_citations, display_answer
from .graph import CHAT_GRAPH
from .options import ChatResult
from .run import ChatRun
from .store import Exchange, save_exchange

logger = logging.getLogger("chat.pipeline")

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


def finish(run: ChatRun) -> ChatResult:
    """Check citations, store the exchange and trace, and end the events with final or error."""
    raw = "".join(run.pieces)
    citations = _citations(run, raw)
    total_ms = run.recorder.elapsed_ms()
    for citation in citations:
        if citation.doc:
            run.emit("citation", "generate", **citation.as_dict())
    result = _result(run, display_answer(raw), citations, total_ms)
    try:
        result = replace(result, message_id=_store(run, result))
    except Exception as error:  # the answer was shown; say it could not be kept
        logger.exception("storing the chat exchange failed")
        run.status, run.error, run.error_code = "failed", f"the answer could not be stored: {error}", "store_failed"
        result = replace(result, status="failed", error=run.error)
    if run.status == "failed":
        run.emit("error", "generate" if run.pieces else "", total_ms, message=run.error, code=run.error_code)
    else:
        run.emit("final", "", total_ms, **_final_data(run, result))
    logger.info("chat %s shortcut=%s total_ms=%.1f first_token_ms=%s", run.status, run.shortcut or "-", total_ms, run.first_token_ms)
    _schedule_memory(run, result)
    return result


def _schedule_memory(run: ChatRun, result: ChatResult) -> None:
    """After the answer: embed the exchange for recall, summarise when the history grew long."""
    if result.message_id is None or run.status != "done":
        return
    try:
        if run.shortcut not in ("A", "B"):  # clarifying questions and greetings are not worth recalling
            dispatch(tasks.remember_exchange, result.message_id)
        if needs_summary(run.conversation):
            dispatch(tasks.summarise_conversation, run.conversation.pk)
    except Exception:  # the answer stands; memory catches up on the next exchange
        logger.exception("scheduling the memory tasks failed")


def _citations(run: ChatRun, raw: str) -> list[Citation]:
    if not (run.options.enable_source_citation and run.evidence and raw):
        return []
    started = run.recorder.elapsed_ms()
    citations = check_citations(raw, run.evidence, run.message, tokenize=analyze, expand=expand_query)
    failed = sum(not c.verified for c in citations)
    run.recorder.add("verify", "stage", start_ms=started, ms=round(run.recorder.elapsed_ms() - started, 3),
                     output=[c.as_verification() for c in citations], status="failed" if failed else "ok",
                     error=f"{failed} quote(s) not found in their source" if failed else "")
    return citations


def _result(run: ChatRun, answer: str, citations: list[Citation], total_ms: float) -> ChatResult:
    return ChatResult(
        trace_id=run.trace_id,
        session_id=run.conversation.session_id,
        conversation_id=run.conversation.pk,
        answer=answer,
        status=run.status,
        shortcut=run.shortcut or None,
        partial=run.status != "done" and bool(run.pieces),
        route=route_of(run) or None,
        intents=tuple(intent.as_dict() for intent in run.intent.intents),
        intent_method=run.intent.method,
        tools=tuple(result.name for result in run.tool_results),
        citations=tuple(c.as_dict() for c in citations if c.doc),
        verification=tuple(c.as_verification() for c in citations),
        evidence=tuple(item.as_event() for item in run.evidence),
        stages=tuple(sorted(run.stages, key=lambda stage: _ORDER.get(stage.name, len(_ORDER)))),
        total_ms=total_ms,
        first_token_ms=run.first_token_ms,
        error=run.error,
    )


def _store(run: ChatRun, result: ChatResult) -> int | None:
    exchange = Exchange(
        conversation=run.conversation,
        trace_id=run.trace_id,
        question=run.message,
        query=run.rewrite.query,
        answer=result.answer,
        has_answer=bool(run.pieces),
        partial=result.partial,
        status=run.status,
        error=run.error,
        route=result.route or "",
        intent=result.intent,
        shortcut=run.shortcut,
        total_ms=result.total_ms,
        first_token_ms=run.first_token_ms,
        citations=list(result.citations),
        verification=list(result.verification),
        debug=_debug(run, result),
        spans=list(run.recorder.spans),
    )
    message = save_exchange(exchange)
    return message.pk if message else None


def _debug(run: ChatRun, result: ChatResult) -> dict[str, Any]:
    prompt = run.prompt
    return {
        "trace_id": run.trace_id,
        "route": result.route,
        "intents": list(result.intents),
        "intent_method": result.intent_method,
        "rewrite": run.rewrite.as_dict(),
        "shortcut": result.shortcut,
        "evidence": [item.as_stored() for item in run.evidence],
        "tools": [r.as_event() for r in run.tool_results],
        "agent_steps": run.agent_steps,
        "prompt": {"mode": prompt.mode, "task": prompt.task, "temperature": prompt.temperature} if prompt else None,
        "provider": run.provider,
        "verification": list(result.verification),
        "stages": [{"name": s.name, "ms": s.ms, "status": s.status} for s in result.stages],
    }


def _final_data(run: ChatRun, result: ChatResult) -> dict[str, Any]:
    return {
        "trace_id": run.trace_id,
        "total_ms": result.total_ms,
        "first_token_ms": result.first_token_ms,
        "response": result.answer,
        "citations": list(result.citations),
        "shortcut": result.shortcut,
        "verification": list(result.verification),
        "status": result.status,
        "partial": result.partial,
        "message_id": result.message_id,
        "session_id": result.session_id,
    }
