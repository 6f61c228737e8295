"""A trace's spans laid out on one time axis for the trace viewer."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MIN_WIDTH_PCT = 0.4  # a 0 ms span still shows as a sliver


@dataclass(frozen=True)
class WaterfallRow:
    name: str
    kind: str
    status: str
    start_ms: float
    ms: float
    left_pct: float
    width_pct: float
    input: str
    output: str
    error: str


def waterfall_rows(spans: Iterable[Any], total_ms: float = 0.0) -> tuple[list[WaterfallRow], float]:
    """Return the spans as rows positioned on an axis as long as the trace, and that length."""
    spans = list(spans)
    axis = max([total_ms or 0.0, *(span.start_ms + span.ms for span in spans)]) or 1.0
    rows = []
    for span in sorted(spans, key=lambda span: (span.start_ms, -span.ms)):
        width = max(MIN_WIDTH_PCT, min(100.0, 100.0 * span.ms / axis))
        left = min(100.0 * span.start_ms / axis, 100.0 - width)  # a sliver at the end stays inside
        rows.append(
            WaterfallRow(
                name=span.name,
                kind=span.kind,
                status=span.status,
                start_ms=span.start_ms,
                ms=span.ms,
                left_pct=round(left, 3),
                width_pct=round(width, 3),
                input=_pretty(span.input),
                output=_pretty(span.output),
                error=span.error or "",
            )
        )
    return rows, axis


def _pretty(value: Any) -> str:
    if value in (None, "", {}, []):
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)
