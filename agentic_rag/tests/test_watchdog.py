"""Slow requests are logged while they run, with their trace id and path; fast ones are not."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from agentic_rag.tracing import NO_TRACE, current_trace_id
from agentic_rag.watchdog import RequestWatch, request_watchdog_middleware

WATCHDOG = "agentic_rag.watchdog"


def watchdog_records(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == WATCHDOG]


def wait_for(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_it_logs_a_request_while_it_is_still_running(settings, caplog):
    settings.REQUEST_WARN_S = 0.05
    seen = {}

    def slow_view(request) -> HttpResponse:
        seen["trace_id"] = current_trace_id()
        # The view holds on until the watchdog has spoken, so the line came while it ran.
        seen["logged_while_running"] = wait_for(lambda: watchdog_records(caplog))
        return HttpResponse("done")

    with caplog.at_level(logging.WARNING, logger=WATCHDOG):
        request_watchdog_middleware(slow_view)(RequestFactory().get("/kb/slow/?token=secret"))

    assert seen["logged_while_running"]
    running, finished = watchdog_records(caplog)
    assert running.getMessage().startswith("request still running after") and "GET /kb/slow/" in running.getMessage()
    assert finished.getMessage().startswith("slow request took") and "GET /kb/slow/" in finished.getMessage()
    assert running.trace_id == finished.trace_id == seen["trace_id"] != NO_TRACE
    assert "secret" not in running.getMessage()


async def test_an_async_request_is_watched_the_same_way(settings, caplog):
    settings.REQUEST_WARN_S = 0.05
    seen = {}

    async def slow_view(request) -> HttpResponse:
        seen["trace_id"] = current_trace_id()
        for _ in range(500):
            if watchdog_records(caplog):
                break
            await asyncio.sleep(0.01)
        seen["logged_while_running"] = bool(watchdog_records(caplog))
        return HttpResponse("done")

    with caplog.at_level(logging.WARNING, logger=WATCHDOG):
        await request_watchdog_middleware(slow_view)(RequestFactory().post("/api/chat"))

    assert seen["logged_while_running"]
    assert [r.trace_id for r in watchdog_records(caplog)] == [seen["trace_id"]] * 2
    assert "POST /api/chat" in watchdog_records(caplog)[0].getMessage()


def test_a_fast_request_logs_nothing_but_still_has_a_trace_id(settings, caplog):
    settings.REQUEST_WARN_S = 5
    seen = {}

    def fast_view(request) -> HttpResponse:
        seen["trace_id"] = current_trace_id()
        return HttpResponse("done")

    with caplog.at_level(logging.WARNING, logger=WATCHDOG):
        request_watchdog_middleware(fast_view)(RequestFactory().get("/"))

    assert watchdog_records(caplog) == []
    assert seen["trace_id"] != NO_TRACE and current_trace_id() == NO_TRACE


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_request_is_reported_once_when_its_deadline_passes():
    clock = FakeClock()
    watch = RequestWatch(clock=clock)

    with watch.watching("t-1", "GET", "/a/", warn_s=5):
        assert watch.take_overdue(104.9) == [] and watch.next_wait(104.9) == pytest.approx(0.1)
        late = watch.take_overdue(105.0)
        assert [(r.trace_id, r.path) for r in late] == [("t-1", "/a/")]
        assert watch.take_overdue(200.0) == [] and watch.next_wait(200.0) is None

    assert watch.take_overdue(300.0) == []  # finished requests leave the watch
