"""The system_metrics tool: this deployment's request rate, latency, CPU, memory and queue."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentic_rag.metrics import Snapshot, snapshot


def extract(message: str) -> dict[str, Any]:
    return {"window_s": 60}


def make_handler(read: Callable[[int], Snapshot] = snapshot) -> Callable[[dict], str]:
    def handle(parameters: dict[str, Any]) -> str:
        window = int(parameters.get("window_s") or 60)
        s = read(window)
        return (
            f"This deployment, last {window} s: {s.requests} requests ({s.qps} QPS); latency p50 {s.p50_ms} ms, "
            f"p95 {s.p95_ms} ms, p99 {s.p99_ms} ms; this process: CPU time {s.cpu_s} s, memory {s.memory_mb} MB; "
            f"task queue depth {s.queue_depth}."
        )

    return handle


PARAMETERS = {"type": "object", "properties": {"window_s": {"type": "integer", "minimum": 1, "maximum": 60}}}
