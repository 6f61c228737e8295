"""The background sweeper runs on a timer in every server and worker process, until it stops."""

from __future__ import annotations

import threading

import pytest

from agentic_rag import shutdown
from agentic_rag.background import start_sweeper


@pytest.fixture
def stop_afterwards():
    yield
    shutdown.reset()


def test_it_sweeps_on_a_timer_survives_a_failed_sweep_and_ends_with_the_process(stop_afterwards):
    calls = []
    third = threading.Event()

    def sweep() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise ConnectionError("the database is away")  # the next round runs anyway
        if len(calls) == 3:
            third.set()

    sweeper = start_sweeper(sweep, 0.01)
    assert third.wait(5)
    shutdown.request_stop("test")
    sweeper.join(5)

    assert not sweeper.is_alive() and sweeper.daemon  # never holds the exit
