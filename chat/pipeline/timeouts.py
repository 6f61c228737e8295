"""Per-node timeouts of a chat run: where they are set, and waiting on work no longer than them.

Every node that can wait (a model call, a search, a tool, an agent, the answer's stream, the
citation check, memory) has a timeout in settings.CHAT_NODE_TIMEOUTS_S. Work with a timeout
runs on a pool thread, and its caller stops waiting when the time is up: a Python thread
cannot be stopped, so the late thread runs on, but its scope is marked abandoned and the run
drops whatever it emits or delivers afterwards.

Work that reads the database runs on the caller's thread while the caller holds an open
transaction (a test's, or a request under ATOMIC_REQUESTS): a pool thread has its own
connection and could not see what that transaction wrote. There the timeout is checked when
the work returns, and only noted.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.conf import settings
from django.db import connection

from agentic_rag.cpu_slots import chat_slots
from agentic_rag.db_threads import DatabaseThreadPool

T = TypeVar("T")

# Pools of their own, apart from the stages' (chat.pipeline.nodes.POOL): a node waiting here
# submits its steps (the KB search) to the next pool, and its tools and workers to the stages',
# so no work waits behind the very task that waits for it.
NODE_POOL = DatabaseThreadPool(max_workers=16, thread_name_prefix="chat-node")
STEP_POOL = DatabaseThreadPool(max_workers=16, thread_name_prefix="chat-step")

# The scopes (node ids, "retrieve/search") the current thread works for, innermost last.
_SCOPES: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("chat_node_scopes", default=())


class NodeTimeout(TimeoutError):
    """A node or step did not finish within its timeout."""

    def __init__(self, name: str, timeout_s: float) -> None:
        super().__init__(f"{name} timed out after {timeout_s:g} s")
        self.name = name
        self.timeout_s = timeout_s


def node_timeout_s(name: str) -> float | None:
    """The node's timeout in seconds; None when it has none (unnamed, or 0).

    CHAT_STAGE_BUDGETS_MS, the older setting, still wins for the stages it names.
    """
    legacy_ms = settings.CHAT_STAGE_BUDGETS_MS.get(name)
    if legacy_ms is not None:
        return legacy_ms / 1000
    value = settings.CHAT_NODE_TIMEOUTS_S.get(name)
    return float(value) if value else None


def may_leave_thread() -> bool:
    """Whether database work may move to a pool thread: not inside the caller's transaction."""
    return not connection.in_atomic_block


def current_scopes() -> tuple[str, ...]:
    return _SCOPES.get()


def in_scope(scope: str, work: Callable[[], T]) -> Callable[[], T]:
    """`work`, run with `scope` added to the scopes its thread works for."""

    def scoped() -> T:
        token = _SCOPES.set((*_SCOPES.get(), scope))
        try:
            return work()
        finally:
            _SCOPES.reset(token)

    return scoped


def submit(work: Callable[[], T], scope: str, pool: DatabaseThreadPool = NODE_POOL, *, serving: bool = True) -> Future:
    """Start `work` on the pool in a copy of this context, under `scope`.

    `serving`: the caller waits for it, so the caller's CPU slot (agentic_rag.cpu_slots), when
    it holds one, serves the work's thread; the pool thread computes as the run's own would.
    """
    slots, owner_holds = chat_slots(), serving and chat_slots().holds()

    def served() -> T:
        with slots.serving(owner_holds):
            return work()

    return pool.submit(contextvars.copy_context().run, in_scope(scope, served))


@dataclass(frozen=True)
class Waited(Generic[T]):
    value: T | None
    timed_out: bool
    ms: float


def wait_for(
    work: Callable[[], T], *, scope: str, timeout_s: float | None, apart: bool,
    on_timeout: Callable[[str], None] = lambda scope: None, pool: DatabaseThreadPool = STEP_POOL,
) -> Waited[T]:
    """Run `work` and wait for it at most `timeout_s`; `on_timeout(scope)` marks it abandoned.

    `apart` False (or no timeout) runs it on this thread: a timeout is then only reported,
    with the value kept. An exception from `work` is raised here either way.
    """
    started = time.perf_counter()
    if timeout_s is None or not apart:
        value = in_scope(scope, work)()
        ms = (time.perf_counter() - started) * 1000
        return Waited(value, timeout_s is not None and ms > timeout_s * 1000, ms)
    future = submit(work, scope, pool)
    try:
        value = future.result(timeout=timeout_s)
    except FutureTimeout:
        future.cancel()
        on_timeout(scope)
        return Waited(None, True, (time.perf_counter() - started) * 1000)
    return Waited(value, False, (time.perf_counter() - started) * 1000)
