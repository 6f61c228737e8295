"""The current request's trace id, on every log line, and a recorder of its spans.

The id lives in a context variable, so it follows the request into `asyncio` tasks and
into worker threads started through `contextvars.copy_context().run` (plain threads
start with an empty context and log "-").
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

NO_TRACE = "-"
SpanKind = Literal["stage", "retrieval", "llm", "tool"]
SpanStatus = Literal["ok", "failed", "skipped", "degraded", "cancelled"]

trace_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("trace_id", default=NO_TRACE)


def current_trace_id() -> str:
    return trace_id_var.get()


@contextlib.contextmanager
def trace_context(trace_id: str) -> Iterator[str]:
    """Make trace_id the current one inside the block."""
    token = trace_id_var.set(trace_id)
    try:
        yield trace_id
    finally:
        trace_id_var.reset(token)


class TraceIdFilter(logging.Filter):
    """Put the current trace id on every record as `trace_id`, for `%(trace_id)s`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trace_id"):
            record.trace_id = trace_id_var.get()
        return True


@dataclass
class SpanRecord:
    """One timed piece of a trace; offsets are ms since the recorder started."""

    name: str
    kind: SpanKind = "stage"
    start_ms: float = 0.0
    ms: float = 0.0
    input: str = ""
    output: str = ""
    status: SpanStatus = "ok"
    error: str = ""

    def fail(self, error: BaseException | str, *, status: SpanStatus = "failed") -> None:
        self.status = status
        self.error = error if isinstance(error, str) else f"{type(error).__name__}: {error}"


class SpanRecorder:
    """Collect spans of one trace, from any thread; truncate their input and output."""

    def __init__(self, *, max_chars: int = 2000, clock: Callable[[], float] = time.perf_counter) -> None:
        self.max_chars = max_chars
        self.clock = clock
        self.started = clock()
        self.spans: list[SpanRecord] = []
        self._lock = threading.Lock()

    def elapsed_ms(self) -> float:
        return round((self.clock() - self.started) * 1000, 3)

    @contextlib.contextmanager
    def span(self, name: str, kind: SpanKind = "stage", *, input: Any = "") -> Iterator[SpanRecord]:
        """Time the block as a span; an exception marks it failed and propagates."""
        record = SpanRecord(name, kind, start_ms=self.elapsed_ms(), input=self.clip(input))
        try:
            yield record
        except BaseException as error:
            record.fail(error)
            raise
        finally:
            record.ms = round(self.elapsed_ms() - record.start_ms, 3)
            record.output = self.clip(record.output)
            self._append(record)

    def add(self, name: str, kind: SpanKind = "stage", **values: Any) -> SpanRecord:
        """Record a span timed elsewhere (start_ms and ms given as values)."""
        for key in ("input", "output"):
            values[key] = self.clip(values.get(key, ""))
        record = SpanRecord(name, kind, **values)
        self._append(record)
        return record

    def clip(self, value: Any) -> str:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        if len(text) <= self.max_chars:
            return text
        return text[: self.max_chars - 1] + "…"

    def _append(self, record: SpanRecord) -> None:
        with self._lock:
            self.spans.append(record)
