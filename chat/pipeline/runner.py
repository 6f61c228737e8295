"""Run one chat request through the declared graph: events out, spans and the trace stored.

Each node is a handler that calls its stage and returns what it found; the runner applies
it to the `ChatRun`. A node that fails, or runs over its timeout (settings.CHAT_NODE_TIMEOUTS_S,
chat.pipeline.timeouts), degrades as its declaration says and the run goes on: a slow model
or a broken stage costs quality, not the answer. A timeout is told in a `timeout` event and
the node's stage_end ({node, timeout_ms, fallback}). A failure of prompt assembly or
generation ends the run with an `error` event, keeping what was streamed as a partial message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from django.conf import settings
from django.core.cache import cache as django_cache

from agentic_rag.cpu_slots import chat_slots
from agentic_rag.llm import LLMError, LLMStreamInterrupted, RequestBudget, get_llm
from agentic_rag.tracing import trace_context
from chat.models import TraceStatus

from . import stages
from .collaborators import Cache
from .graph import CHAT_GRAPH, Graph, Node
from .nodes import DEGRADES, HANDLERS, POOL, TIMEOUT_DEGRADES
from .options import ChatRequest, ChatResult, StageStatus, StageTiming
from .retrieval_cache import cached_retrieve
from .results import finish, fold_events, route_event, route_of
from .run import ChatRun, Collaborators, Emit, Outcome
from .store import Admitted, admit
from .timeouts import NODE_POOL, may_leave_thread, node_timeout_s, submit
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
        retriever=cached_retrieve if retriever is None else retriever,
        tools=get_tool_channel() if tools is None else tools,
        cache=django_cache if cache is None else cache,
    )


def run_admitted(
    admitted: Admitted, *, emit: Emit, collaborators: Collaborators, cancelled: Callable[[], bool]
) -> ChatResult:
    """Run an admitted request through the graph and store what it leaves behind."""
    run = ChatRun(admitted, _within_budget(collaborators), emit, cancelled)
    with chat_slots().held(), trace_context(run.trace_id):
        logger.info("chat request user=%s kb=%s chars=%d", run.conversation.user_id, route_of(run), len(run.message))
        session = {"session_id": run.conversation.session_id, "conversation_id": run.conversation.pk}
        run.emit("session", **session, trace_id=run.trace_id)
        route = route_event(run)
        run.emit("route", **route)
        # The trace keeps the decision (method, confidence, reason) as a span of its own.
        run.recorder.add("route", "stage", start_ms=run.recorder.elapsed_ms(), output=route)
        execute(run, CHAT_GRAPH)
        if run.reply and run.status == TraceStatus.DONE:
            for piece in stages.split_reply(run.reply):
                run.deliver(piece)
        finish(run)
    return fold_events(run.events)


def _within_budget(collaborators: Collaborators) -> Collaborators:
    """The collaborators with the model bound to a budget of this request's own, when it is a router."""
    within = getattr(collaborators.llm, "within", None)
    if within is None:
        return collaborators
    budget = RequestBudget(settings.LLM_FAILOVER_S, settings.LLM_STALL_TIMEOUT_S)
    return replace(collaborators, llm=within(budget))


def execute(run: ChatRun, graph: Graph) -> None:
    """Run the graph's steps in order; after a shortcut, failure or cancel, skip the rest."""
    for step in graph.steps():
        if not run.is_stopped and run.is_cancelled():
            run.status = TraceStatus.CANCELLED
        if run.is_stopped:
            for node in step:
                _skip(run, node, _skip_reason(run))
            continue
        try:
            outcomes = _run_step(run, graph, step)
        except Exception as error:
            _fail(run, error)
            continue
        run.shortcut = next((o.shortcut for o in outcomes if o.shortcut), "")


class OverBudget(TimeoutError):
    """A node did not finish within its hard budget or timeout."""


@dataclass(frozen=True)
class _Attempt:
    outcome: Outcome | None
    error: Exception | None
    start_ms: float
    ms: float
    note: str = ""  # a node that could not be cut off (it ran inline) and ran over its timeout


def _run_step(run: ChatRun, graph: Graph, step: tuple[Node, ...]) -> list[Outcome]:
    """Run a step's nodes, side by side when there are several; accept each in graph order.

    A node with a hard budget or a timeout runs on a pool even alone, so the run can stop
    waiting for it; a node whose switch is off does not run at all.
    """
    running = [node for node in step if not _is_switched_off(run, node)]
    for node in running:
        run.emit("stage_start", node.id, label=node.label, number=node.stage)
    started = time.perf_counter()
    if len(running) == 1 and not _runs_apart(running[0]):
        attempts = {running[0].id: _attempt_inline(run, running[0])}
    else:
        # The model stages (rewrite ∥ intent) on the stages' pool, as they always ran; the
        # others on the nodes' own, where they may submit to the stages' pool themselves.
        # Side by side, each waiting on a model, they would each lend the run's one CPU slot.
        model_stages = all(node.hard_budget for node in running)
        pool = POOL if model_stages else NODE_POOL
        futures = [submit(partial(_attempt, run, node), node.id, pool, serving=not model_stages) for node in running]
        attempts = {node.id: _wait(run, node, future, started) for node, future in zip(running, futures, strict=True)}
    return [_accept(run, graph, node, attempts.get(node.id) or _switched_off(run, node)) for node in step]


def _runs_apart(node: Node) -> bool:
    """Whether the node runs on a pool thread the run can stop waiting for (chat.pipeline.timeouts)."""
    return stage_budget_ms(node) is not None and (node.hard_budget or may_leave_thread())


def _attempt_inline(run: ChatRun, node: Node) -> _Attempt:
    """The node on this thread; past its timeout it is only noted (it could not be cut off)."""
    attempt = _attempt(run, node)
    budget_ms = stage_budget_ms(node)
    if budget_ms is None or attempt.ms <= budget_ms:
        return attempt
    logger.warning("stage %s ran %.0f ms, over its %d ms timeout, on the caller's thread", node.id, attempt.ms, budget_ms)
    return replace(attempt, note=f"ran over its {budget_ms} ms timeout (inline: it could not be cut off)")


def _switched_off(run: ChatRun, node: Node) -> _Attempt:
    outcome = Outcome(StageStatus.SKIPPED, f"switched off ({node.switch})")
    return _Attempt(outcome, None, run.recorder.elapsed_ms(), 0.0)


def _attempt(run: ChatRun, node: Node) -> _Attempt:
    start_ms = run.recorder.elapsed_ms()
    try:
        outcome, error = HANDLERS[node.id](run), None
    except Exception as failure:
        outcome, error = None, failure
    return _Attempt(outcome, error, start_ms, run.recorder.elapsed_ms() - start_ms)


def _wait(run: ChatRun, node: Node, future: Future, started: float) -> _Attempt:
    budget_ms = stage_budget_ms(node)
    if budget_ms is None:
        return future.result()
    left_s = max(0.0, budget_ms / 1000 - (time.perf_counter() - started))
    try:
        return future.result(timeout=left_s)
    except FutureTimeout:
        # The thread cannot be stopped; what it finds later is dropped, as its Outcome is never
        # applied, and so is what it emits or streams (ChatRun.abandon).
        future.cancel()
        run.abandon(node.id)
        budget = getattr(run.collaborators.llm, "budget", None)
        if budget is not None and node.hard_budget:
            # Only stages that wait on a model have a hard budget: that model is late, which
            # counts as its first failure in this request.
            budget.note_failure(f"{node.id}: no model reply within its {budget_ms} ms budget")
        start_ms = run.recorder.elapsed_ms() - budget_ms
        return _Attempt(None, OverBudget(f"over its {budget_ms} ms budget"), start_ms, float(budget_ms))


def stage_budget_ms(node: Node) -> int | None:
    """The node's timeout in ms (settings.CHAT_NODE_TIMEOUTS_S, or its hard budget); None when it has none."""
    seconds = node_timeout_s(node.id)
    if seconds is None:
        return node.budget_ms if node.hard_budget else None
    return round(seconds * 1000)


def _is_switched_off(run: ChatRun, node: Node) -> bool:
    return bool(node.switch) and not getattr(run.options, node.switch)


def _accept(run: ChatRun, graph: Graph, node: Node, attempt: _Attempt) -> Outcome:
    """Degrade a failed node, apply what it found, send its events, span and stage_end."""
    outcome, error, status = attempt.outcome, attempt.error, ""
    timed_out = isinstance(error, OverBudget)
    if error is not None:
        degrade = (TIMEOUT_DEGRADES.get(node.id) if timed_out else None) or DEGRADES.get(node.id)
        if degrade is None:
            run.recorder.add(node.id, "stage", start_ms=attempt.start_ms, ms=round(attempt.ms, 3), status="failed",
                             error=f"{type(error).__name__}: {error}")
            raise error
        fallback = node.timeout_fallback if timed_out else node.on_error
        logger.warning("stage %s failed, degrading to %s: %s", node.id, fallback, error, exc_info=not timed_out)
        outcome, status = degrade(run, error), "degraded"
        if timed_out:
            run.emit("timeout", node.id, attempt.ms, node=node.id, timeout_ms=round(attempt.ms), fallback=fallback)
    assert outcome is not None
    if outcome.shortcut and not graph.has_branch(node.id, outcome.shortcut):
        raise ValueError(f"stage {node.id} took shortcut {outcome.shortcut!r}, which the graph does not declare")
    for name, value in outcome.found.items():
        if not hasattr(run, name):
            raise AttributeError(f"stage {node.id} found {name!r}, which a run does not hold")
        setattr(run, name, value)
    for type_, data in outcome.events:
        run.emit(type_, node.id, **data)
    span_status = status or {"done": "ok", "shortcut": "ok", "skipped": "skipped"}.get(outcome.status, "failed")
    run.recorder.add(node.id, "stage", start_ms=attempt.start_ms, ms=round(attempt.ms, 3),
                     output=f"{outcome.status}: {outcome.detail}", status=span_status,
                     error="; ".join(filter(None, [str(error) if error else "", attempt.note])))
    timeout = {"timed_out": True, "fallback": node.timeout_fallback} if timed_out else {}
    _stage_end(run, node, outcome, attempt.ms, **timeout)
    return outcome


def _stage_end(run: ChatRun, node: Node, outcome: Outcome, ms: float, **more: Any) -> None:
    data: dict[str, Any] = {"status": outcome.status, "detail": outcome.detail, **more}
    if outcome.shortcut:
        data["shortcut"] = outcome.shortcut
    run.stages.append(StageTiming(node.id, round(ms, 3), outcome.status, outcome.detail))
    run.emit("stage_end", node.id, ms, **data)


def _skip(run: ChatRun, node: Node, reason: str) -> None:
    run.recorder.add(node.id, "stage", start_ms=run.recorder.elapsed_ms(), status="skipped", output=reason)
    _stage_end(run, node, Outcome(StageStatus.SKIPPED, reason), 0.0)


def _skip_reason(run: ChatRun) -> str:
    if run.shortcut:
        return f"shortcut {run.shortcut}"
    return "cancelled" if run.status == TraceStatus.CANCELLED else "after a failure"


def _fail(run: ChatRun, error: Exception) -> None:
    run.status = TraceStatus.FAILED
    run.error = str(error) or type(error).__name__
    if isinstance(error, LLMStreamInterrupted):
        run.error_code = "llm_interrupted"
    elif isinstance(error, OverBudget):
        run.error_code = "timeout"
    else:
        run.error_code = "llm_error" if isinstance(error, LLMError) else "internal"
    logger.error("chat failed (%s): %s", run.error_code, run.error, exc_info=not isinstance(error, LLMError))
