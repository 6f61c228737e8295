from __future__ import annotations

import contextvars
import io
import logging
import threading

import pytest
from django.conf import settings

from agentic_rag.tracing import NO_TRACE, SpanRecorder, TraceIdFilter, current_trace_id, trace_context


def settings_handler() -> tuple[logging.Handler, io.StringIO]:
    """A handler with the format and filter of settings.LOGGING's console handler."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(settings.LOGGING["formatters"]["plain"]["format"]))
    handler.addFilter(TraceIdFilter())
    return handler, stream


def test_it_keeps_the_trace_id_in_a_context_variable():
    assert current_trace_id() == NO_TRACE
    with trace_context("abc"):
        assert current_trace_id() == "abc"
        with trace_context("inner"):
            assert current_trace_id() == "inner"
        assert current_trace_id() == "abc"
    assert current_trace_id() == NO_TRACE


def test_it_follows_into_threads_started_with_a_copied_context():
    seen = {}
    with trace_context("t-1"):
        context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(lambda: seen.update(id=current_trace_id()),))
    thread.start()
    thread.join()

    assert seen == {"id": "t-1"}


def test_it_puts_the_trace_id_on_log_lines_with_the_settings_format():
    handler, stream = settings_handler()
    logger = logging.getLogger("test.tracing")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.info("outside")
        with trace_context("trace-42"):
            logger.info("inside")
    finally:
        logger.removeHandler(handler)

    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("[-] outside") and lines[1].endswith("[trace-42] inside")
    assert settings.LOGGING["handlers"]["console"]["filters"] == ["trace_id"]


def test_it_records_spans_with_offsets_and_truncates_their_text():
    ticks = iter([0.0, 0.010, 0.030, 0.031, 0.031])
    recorder = SpanRecorder(max_chars=5, clock=lambda: next(ticks))

    with recorder.span("retrieve", "retrieval", input="a long query") as span:
        span.output = "12345678"

    (recorded,) = recorder.spans
    assert (recorded.name, recorded.kind, recorded.start_ms, recorded.ms) == ("retrieve", "retrieval", 10.0, 20.0)
    assert recorded.input == "a lo…" and recorded.output == "1234…" and recorded.status == "ok"


def test_it_marks_a_span_failed_when_its_block_raises():
    recorder = SpanRecorder()

    with pytest.raises(RuntimeError), recorder.span("generate", "llm"):
        raise RuntimeError("the model went away")

    assert recorder.spans[0].status == "failed" and recorder.spans[0].error == "RuntimeError: the model went away"
