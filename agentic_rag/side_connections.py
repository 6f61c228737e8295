"""Run one database call beside the caller's next ones, on a thread with its own connection.

A hybrid search on PostgreSQL waits about 8 ms for its HNSW scan while the keyword leg has
work of its own; run side by side, the query costs about its slower leg, not their sum.
Each side thread keeps its connection between calls (opening one costs 3-12 ms here, more
than the call), closes it after `idle_s` without work, and replaces one the server dropped
before its next call (db_threads.drop_broken_connections, as the chat's pools do).

Django's connections belong to the thread that opened them, so the work must not use the
caller's transaction: callers inside an atomic block run the work themselves, because its
uncommitted rows are invisible to another connection.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from django.db import connections

from agentic_rag.db_threads import drop_broken_connections

T = TypeVar("T")


class _SideThread:
    def __init__(self, idle_s: float) -> None:
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle_s = idle_s
        threading.Thread(target=self._serve, name="side-connection", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=self._idle_s)
            except queue.Empty:
                connections.close_all()  # this thread's only: an idle process holds no extra connection
                continue
            drop_broken_connections()
            job()


class SideConnections:
    """At most `size` side threads; a call finding all of them busy runs in its caller instead."""

    def __init__(self, size: int, *, idle_s: float = 30.0) -> None:
        self._size = size
        self._idle_s = idle_s
        self._started = 0
        self._free: list[_SideThread] = []
        self._lock = threading.Lock()

    def try_submit(self, work: Callable[[], T]) -> Future[T] | None:
        """Start `work` on a free side thread, or return None when there is none to be had."""
        side = self._take()
        if side is None:
            return None
        future: Future[T] = Future()

        def job() -> None:
            try:
                result = work()
            except BaseException as error:  # the caller re-raises it from future.result()
                self._give_back(side)
                future.set_exception(error)
            else:
                self._give_back(side)  # before the result: whoever reads it may submit again at once
                future.set_result(result)

        side.jobs.put(job)
        return future

    def _give_back(self, side: _SideThread) -> None:
        with self._lock:
            self._free.append(side)

    def _take(self) -> _SideThread | None:
        with self._lock:
            if self._free:
                return self._free.pop()
            if self._started < self._size:
                self._started += 1
                return _SideThread(self._idle_s)
            return None
