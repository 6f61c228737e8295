"""Log requests slower than REQUEST_WARN_S, while they still run, with their trace id.

Every request gets a trace id (agentic_rag.tracing) for its log lines; a chat run inside it
sets its own. A single daemon thread, not the event loop, watches the requests in flight, so
a request is reported on time even when it is what holds the loop. A request is logged once
when it passes the threshold and once more when it ends. Only the path is logged: query
strings may carry what does not belong in logs. A streamed response is timed until the view
returns it, not until its last byte is sent.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

from .tracing import NO_TRACE, current_trace_id, trace_context

logger = logging.getLogger(__name__)


@dataclass
class RunningRequest:
    trace_id: str
    method: str
    path: str
    started: float
    deadline: float
    is_reported: bool = False


class RequestWatch:
    """The requests in flight, and a thread that logs each one past its deadline once."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._running: dict[int, RunningRequest] = {}
        self._tokens = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    @contextmanager
    def watching(self, trace_id: str, method: str, path: str, *, warn_s: float) -> Iterator[RunningRequest]:
        """Watch the block as one request; log it at the end too if it took warn_s or longer."""
        now = self.clock()
        request = RunningRequest(trace_id, method, path, now, now + warn_s)
        token = next(self._tokens)
        with self._changed:
            self._running[token] = request
            self._ensure_thread()
            self._changed.notify()
        try:
            yield request
        finally:
            with self._changed:
                del self._running[token]
            elapsed = self.clock() - request.started
            if elapsed >= warn_s:
                _log(request, "slow request took %.1f s: %s %s", elapsed)

    def take_overdue(self, now: float) -> list[RunningRequest]:
        """Return the requests past their deadline not reported yet, marking them reported."""
        with self._changed:
            late = [r for r in self._running.values() if not r.is_reported and r.deadline <= now]
            for request in late:
                request.is_reported = True
        return late

    def next_wait(self, now: float) -> float | None:
        """Seconds until the next unreported deadline; None when no request is waiting for one."""
        with self._changed:
            deadlines = [r.deadline for r in self._running.values() if not r.is_reported]
        return max(0.0, min(deadlines) - now) if deadlines else None

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="request-watchdog", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        while True:
            with self._changed:
                self._changed.wait(timeout=self.next_wait(self.clock()))
            now = self.clock()
            for request in self.take_overdue(now):
                _log(request, "request still running after %.1f s: %s %s", now - request.started)


def _log(request: RunningRequest, message: str, elapsed: float) -> None:
    # Pass the id along: the watchdog thread has no request context of its own.
    logger.warning(message, elapsed, request.method, request.path, extra={"trace_id": request.trace_id})


watch = RequestWatch()


@sync_and_async_middleware
def request_watchdog_middleware(get_response: Callable) -> Callable:
    """Give each request a trace id and report it to the watchdog while it runs."""
    if iscoroutinefunction(get_response):

        async def watched_async(request: HttpRequest) -> HttpResponse:
            with _watched(request):
                return await get_response(request)

        return watched_async

    def watched(request: HttpRequest) -> HttpResponse:
        with _watched(request):
            return get_response(request)

    return watched


@contextmanager
def _watched(request: HttpRequest) -> Iterator[None]:
    trace_id = current_trace_id()
    if trace_id == NO_TRACE:
        trace_id = str(uuid.uuid4())
    with trace_context(trace_id), watch.watching(trace_id, request.method or "", request.path, warn_s=settings.REQUEST_WARN_S):
        yield
