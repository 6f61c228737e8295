"""Side threads run work beside their caller, never queue it, and give back idle connections."""

from __future__ import annotations

import threading

import pytest

from agentic_rag import side_connections
from agentic_rag.side_connections import SideConnections


def test_it_runs_work_on_another_thread_and_hands_back_its_result():
    side = SideConnections(1)
    future = side.try_submit(threading.get_ident)
    assert future is not None
    assert future.result(timeout=5) != threading.get_ident()


def test_it_hands_back_the_works_error():
    def fail():
        raise ValueError("the leg failed")

    future = SideConnections(1).try_submit(fail)
    with pytest.raises(ValueError, match="the leg failed"):
        future.result(timeout=5)


def test_it_declines_work_while_every_thread_is_busy_and_takes_it_again_after():
    side = SideConnections(1)
    release = threading.Event()
    busy = side.try_submit(lambda: release.wait(5))
    assert side.try_submit(lambda: "queued") is None  # the caller runs it: nothing waits in a queue
    release.set()
    busy.result(timeout=5)
    again = side.try_submit(threading.get_ident)
    assert again is not None
    first_thread = again.result(timeout=5)
    assert side.try_submit(threading.get_ident).result(timeout=5) == first_thread  # the same thread, kept


def test_no_thread_is_started_when_it_may_have_none():
    assert SideConnections(0).try_submit(lambda: "work") is None


def test_an_idle_thread_closes_its_connections(monkeypatch):
    closed_on = []
    closed = threading.Event()

    class Connections:
        def close_all(self):
            closed_on.append(threading.get_ident())
            closed.set()

    monkeypatch.setattr(side_connections, "connections", Connections())
    worker = SideConnections(1, idle_s=0.05).try_submit(threading.get_ident).result(timeout=5)
    assert closed.wait(5)
    assert closed_on[0] == worker
