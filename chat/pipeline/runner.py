"""Run one chat request through the declared graph: events out, spans and the trace stored.

Each node is a handler that calls its stage and notes what it found on the `ChatRun`. A
node that fails degrades as its declaration says (seed 001 §10) and the run goes on; a
failure of prompt assembly or generation ends the run with an `error` event, keeping
what was streamed as a partial message.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable
from typing import Any

from django.core.cache import cache as django_cache

from agentic_rag.llm import LLMError, LLMStreamInterrupted, get_llm
from agentic_rag.tracing import trace_context
from knowledge.retrieval import retrieve

from . import stages
from .collaborators import Cache
from .graph import CHAT_GRAPH, Graph, Node
from .nodes import DEGRADES, HANDLERS, POOL
from .options import ChatRequest, ChatResult, StageTiming
from .results import finish, route_event, route_of
from .run import ChatRun, Collaborators, Emit, Outcome
from .store import Admitted, admit
from .tools import ToolChannel, get_tool_channel

logger = logging.getLogger("chat.pipeline")


def run_chat(
    request: ChatRequest,
    *,
    emit: Emit,
    llm: Any = None,
    cancelled: Callable[[], bool] = lambda: False,
    retriever: stages.Retriever | None = None,
    tools: ToolChannel | None = None,
    cache: Cache | None = None,
) -> ChatResult:
    """Answer one message, emitting events as it goes; raise ChatRefused for bad input."""
    admitted = admit(request)
    collaborators = default_collaborators(llm=llm, retriever=retriever, tools=tools, cache=cache)
    return run_admitted(admitted, emit=emit, collaborators=collaborators, cancelled=cancelled)


def default_collaborators(
    *, llm: Any = None, retriever: stages.Retriever | None = None, tools: ToolChannel | None = None,
    cache: Cache | None = None,
) -> Collaborators:
    """The given collaborators, the process's own for those not given."""
    return Collaborators(
        llm=get_llm() if llm is None else llm,
        retriever=retrieve if retriever is None else retriever,
        tools=get_tool_channel() if tools is None else tools,
        cache=django_cache if cache is None else cache,
    )


def run_admitted(
    admitted: Admitted, *, emit: Emit, collaborators: Collaborators, cancelled: Callable[[], bool]
) -> ChatResult:
    """Run an admitted request through the graph and store what it leaves behind."""
    run = ChatRun(admitted, collaborators, emit, cancelled)
    with trace_context(run.trace_id):
        logger.info("chat request user=%s kb=%s chars=%d", run.conversation.user_id, route_of(run), len(run.message))
        session = {"session_id": run.conversation.session_id, "conversation_id": run.conversation.pk}
        run.emit("session", **session, trace_id=run.trace_id)
        route = route_event(run)
        run.emit("route", **route)
        # The trace keeps the decision (method, confidence, reason) as a span of its own.
        run.recorder.add("route", "stage", start_ms=run.recorder.elapsed_ms(), output=route)
        execute(run, CHAT_GRAPH)
        if run.reply and run.status == "done":
            for piece in stages.split_reply(run.reply):
                run.deliver(piece)
        return finish(run)


def execute(run: ChatRun, graph: Graph) -> None:
    """Run the graph's steps in order; after a shortcut, failure or cancel, skip the rest."""
    for step in graph.steps():
        if not run.is_stopped and run.is_cancelled():
            run.status = "cancelled"
        if run.is_stopped:
            for node in step:
                _skip(run, node, _skip_reason(run))
            continue
        try:
            outcomes = _run_parallel(run, step) if len(step) > 1 else [_run_node(run, step[0])]
        except Exception as error:
            _fail(run, error)
            continue
        run.shortcut = next((o.shortcut for o in outcomes if o.shortcut), "")


def _run_parallel(run: ChatRun, step: tuple[Node, ...]) -> list[Outcome]:
    futures = [POOL.submit(contextvars.copy_context().run, _run_node, run, node) for node in step]
    return [future.result() for future in futures]


def _run_node(run: ChatRun, node: Node) -> Outcome:
    """Run one node: events, a span, and its degrade path when it fails."""
    run.emit("stage_start", node.id, label=node.label, number=node.stage)
    started = time.perf_counter()
    with run.recorder.span(node.id, "stage") as span:
        try:
            outcome = HANDLERS[node.id](run)
        except Exception as error:
            if node.id not in DEGRADES:
                raise
            logger.warning("stage %s failed, degrading to %s: %s", node.id, node.on_error, error, exc_info=True)
            span.fail(error, status="degraded")
            outcome = DEGRADES[node.id](run, error)
        span.output = f"{outcome.status}: {outcome.detail}"
        if span.status != "degraded":
            span.status = {"done": "ok", "shortcut": "ok", "skipped": "skipped"}.get(outcome.status, "failed")
    _stage_end(run, node, outcome, (time.perf_counter() - started) * 1000)
    return outcome


def _stage_end(run: ChatRun, node: Node, outcome: Outcome, ms: float) -> None:
    data: dict[str, Any] = {"status": outcome.status, "detail": outcome.detail}
    if outcome.shortcut:
        data["shortcut"] = outcome.shortcut
    run.stages.append(StageTiming(node.id, round(ms, 3), outcome.status, outcome.detail))
    run.emit("stage_end", node.id, ms, **data)


def _skip(run: ChatRun, node: Node, reason: str) -> None:
    run.recorder.add(node.id, "stage", start_ms=run.recorder.elapsed_ms(), status="skipped", output=reason)
    _stage_end(run, node, Outcome("skipped", reason), 0.0)


def _skip_reason(run: ChatRun) -> str:
    if run.shortcut:
        return f"shortcut {run.shortcut}"
    return "cancelled" if run.status == "cancelled" else "after a failure"


def _fail(run: ChatRun, error: Exception) -> None:
    run.status = "failed"
    run.error = str(error) or type(error).__name__
    if isinstance(error, LLMStreamInterrupted):
        run.error_code = "llm_interrupted"
    else:
        run.error_code = "llm_error" if isinstance(error, LLMError) else "internal"
    logger.error("chat failed (%s): %s", run.error_code, run.error, exc_info=not isinstance(error, LLMError))
