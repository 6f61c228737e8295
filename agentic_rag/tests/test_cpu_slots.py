"""Chat runs compute a few at a time; a run waiting on a model lends its slot."""

from __future__ import annotations

import threading
import time

from agentic_rag.cpu_slots import CpuSlots


def _hold(slots: CpuSlots, entered: threading.Event, release: threading.Event) -> threading.Thread:
    def run() -> None:
        with slots.held():
            entered.set()
            release.wait(5)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_run_waits_while_every_slot_is_held_and_goes_when_one_frees():
    slots = CpuSlots(1)
    first_in, first_done = threading.Event(), threading.Event()
    _hold(slots, first_in, first_done)
    assert first_in.wait(5)
    second_in = threading.Event()
    second = _hold(slots, second_in, threading.Event())

    assert not second_in.wait(0.2)  # the second run waits its turn
    first_done.set()
    assert second_in.wait(5)
    second.join(0)


def test_a_run_waiting_on_a_model_lets_another_compute_and_then_takes_its_turn_again():
    slots = CpuSlots(1)
    other_in, other_done, back = threading.Event(), threading.Event(), threading.Event()

    def run() -> None:
        with slots.held():
            with slots.lent():  # the model is thinking
                _hold(slots, other_in, other_done)
                other_in.wait(5)
            back.set()  # the reply came; computing again needs the slot back

    threading.Thread(target=run, daemon=True).start()
    assert other_in.wait(5)  # the other run computed while this one waited
    assert not back.wait(0.2)  # and holds the slot until it is done
    other_done.set()
    assert back.wait(5)


def test_holding_is_reentrant_and_lending_outside_a_run_changes_nothing():
    slots = CpuSlots(1)
    with slots.lent():  # a pool thread calling a model holds no slot
        pass
    with slots.held(), slots.held():  # a run inside a run never waits for itself
        pass
    done = threading.Event()
    _hold(slots, done, threading.Event())
    assert done.wait(5)  # everything was given back


def test_no_bound_lets_every_run_in():
    slots = CpuSlots(0)
    entered = [threading.Event() for _ in range(20)]
    release = threading.Event()
    for event in entered:
        _hold(slots, event, release)
    started = time.monotonic()
    assert all(event.wait(5) for event in entered) and time.monotonic() - started < 5
    release.set()


def test_a_thread_serving_a_run_waits_on_a_model_in_the_runs_slot():
    slots = CpuSlots(1)
    other_in, other_done, back = threading.Event(), threading.Event(), threading.Event()

    def node(owner_holds: bool) -> None:  # a chat node the run waits for, on a pool thread
        with slots.serving(owner_holds):
            with slots.lent():  # the model is thinking: the run's slot is free meanwhile
                _hold(slots, other_in, other_done)
                other_in.wait(5)
            back.set()

    with slots.held():
        serving = threading.Thread(target=node, args=(slots.holds(),), daemon=True)
        serving.start()
        assert other_in.wait(5)  # another run computed while the node waited on its model
        assert not back.wait(0.2)  # the node computes again only once the slot is back
        other_done.set()
        assert back.wait(5)
        serving.join(5)
    assert not slots.holds()
    done = threading.Event()
    _hold(slots, done, threading.Event())
    assert done.wait(5)  # the one slot was given back, once
