"""Bound how many chat runs of a process compute at once; the others wait their turn.

Every run has a thread, and a process has one GIL: 200 runs computing at once share it 200
ways, so each finishes only when nearly all do, and the event loop that sends each
session's first fragment gets a two-hundredth of the turns. Runs that hold one of a few
slots finish one after another instead, and the rest wait without taking turns. A run
lends its slot while it waits on the network (a language model's reply), so waiting on a
model never holds up another run's computing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class CpuSlots:
    """`size` slots (0: unbounded). Holding is per thread and re-entrant."""

    def __init__(self, size: int) -> None:
        self._free = threading.Semaphore(size) if size > 0 else None
        self._held = threading.local()

    @contextmanager
    def held(self) -> Iterator[None]:
        """Compute inside: wait for a slot unless this thread holds one already."""
        if self._free is None or getattr(self._held, "depth", 0):
            self._held.depth = getattr(self._held, "depth", 0) + 1
            try:
                yield
            finally:
                self._held.depth -= 1
            return
        self._free.acquire()
        self._held.depth = 1
        try:
            yield
        finally:
            self._held.depth = 0
            self._free.release()

    def holds(self) -> bool:
        """Whether this thread holds a slot."""
        return bool(getattr(self._held, "depth", 0))

    @contextmanager
    def serving(self, owner_holds: bool) -> Iterator[None]:
        """Compute for a thread that holds a slot and only waits meanwhile (a chat node it runs on a
        pool thread, to stop waiting at its timeout): the owner's slot serves this thread, so a
        model wait here lends it as the owner's own wait would."""
        if self._free is None or not owner_holds:
            yield
            return
        depth = getattr(self._held, "depth", 0)
        self._held.depth = depth + 1
        try:
            yield
        finally:
            self._held.depth = depth

    @contextmanager
    def lent(self) -> Iterator[None]:
        """Wait on something else inside: this thread's slot, if it holds one, is free meanwhile."""
        depth = getattr(self._held, "depth", 0)
        if self._free is None or not depth:
            yield
            return
        self._held.depth = 0
        self._free.release()
        try:
            yield
        finally:
            self._free.acquire()
            self._held.depth = depth


_by_size: dict[int, CpuSlots] = {}
_by_size_lock = threading.Lock()


def chat_slots() -> CpuSlots:
    """The process's slots for chat runs, CHAT_CPU_SLOTS of them."""
    from django.conf import settings

    size = settings.CHAT_CPU_SLOTS
    with _by_size_lock:
        return _by_size.setdefault(size, CpuSlots(size))
