"""This deployment's own request metrics: a middleware records, `snapshot()` reads.

Counts go to the cache per second (shared by every process when the cache is Redis);
latencies are kept in-process in a bounded window, which is enough for percentiles of
the process that answers. CPU and memory come from `resource` and /proc, the queue depth
from the Celery broker when one is configured.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from asyncio import iscoroutinefunction
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

WINDOW_S = 60
LATENCY_SAMPLES = 2000
_KEY = "metrics:requests:{}"


class RequestRecorder:
    """Request counts per second in the cache, latencies in a ring buffer."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._latencies: deque[tuple[float, float]] = deque(maxlen=LATENCY_SAMPLES)
        self._lock = threading.Lock()
        self.started = clock()

    def record(self, ms: float) -> None:
        now = self.clock()
        key = _KEY.format(int(now))
        cache.add(key, 0, WINDOW_S * 2)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.add(key, 1, WINDOW_S * 2)
        with self._lock:
            self._latencies.append((now, ms))

    def request_count(self, window_s: int = WINDOW_S) -> int:
        now = int(self.clock())
        counts = cache.get_many([_KEY.format(second) for second in range(now - window_s + 1, now + 1)])
        return sum(int(value) for value in counts.values())

    def latencies(self, window_s: int = WINDOW_S) -> list[float]:
        since = self.clock() - window_s
        with self._lock:
            return sorted(ms for at, ms in self._latencies if at >= since)


def percentile(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(int(round(pct / 100 * (len(sorted_values) - 1))), len(sorted_values) - 1)
    return sorted_values[index]


recorder = RequestRecorder()


@sync_and_async_middleware
def metrics_middleware(get_response: Callable) -> Callable:
    """Time every request into `recorder`, in the sync or the async stack alike."""
    if iscoroutinefunction(get_response):

        async def timed_async(request: HttpRequest) -> HttpResponse:
            started = time.perf_counter()
            response = await get_response(request)
            recorder.record((time.perf_counter() - started) * 1000)
            return response

        return timed_async

    def timed(request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = get_response(request)
        recorder.record((time.perf_counter() - started) * 1000)
        return response

    return timed


@dataclass(frozen=True)
class Snapshot:
    requests: int
    qps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    cpu_s: float
    memory_mb: float
    queue_depth: int


def snapshot(window_s: int = WINDOW_S) -> Snapshot:
    """The last `window_s` seconds of requests, and the process's CPU time and memory."""
    count = recorder.request_count(window_s)
    latencies = recorder.latencies(window_s)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return Snapshot(
        requests=count,
        qps=round(count / window_s, 3),
        p50_ms=round(percentile(latencies, 50), 2),
        p95_ms=round(percentile(latencies, 95), 2),
        p99_ms=round(percentile(latencies, 99), 2),
        cpu_s=round(usage.ru_utime + usage.ru_stime, 2),
        memory_mb=round(_resident_mb(usage.ru_maxrss), 1),
        queue_depth=queue_depth(),
    )


def _resident_mb(max_rss_kb: int) -> float:
    try:
        with open(f"/proc/{os.getpid()}/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return max_rss_kb / 1024


def queue_depth() -> int:
    """Tasks waiting in the Celery queues; 0 without a broker (tasks then run in-process)."""
    if not settings.CELERY_BROKER_URL or settings.BACKGROUND_TASKS != "celery":
        return 0
    try:
        from agentic_rag.celery import app

        with app.connection_for_read() as connection:
            channel = connection.default_channel
            return sum(
                channel.queue_declare(queue=name, passive=True).message_count
                for name in ("default", "ingestion", "embedding", "graph")
            )
    except Exception:  # an unreachable broker must not fail the metrics answer
        return 0
