"""Whether the graph leg earns its place in a KB's searches, as the KB's own evaluation found.

`evaluation.graph_leg.judge_graph_leg` measures hybrid against hybrid+graph on the KB's golden
questions and stores the verdict in `retrieval_settings["graph_leg"]`; the workers that would
add the graph leg on their own (auto mode) read it here. A KB never judged keeps the leg.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .models import KnowledgeBase

SETTING = "graph_leg"


def graph_leg_verdict(kb: KnowledgeBase) -> dict[str, Any] | None:
    """The stored verdict: {"helps", "metric", "hybrid", "hybrid+graph", "questions"}, or None."""
    verdict = (kb.retrieval_settings or {}).get(SETTING)
    return verdict if isinstance(verdict, dict) and "helps" in verdict else None


def graph_leg_helps(kb: KnowledgeBase) -> bool:
    """False only when the KB's evaluation found the leg no better than plain hybrid."""
    verdict = graph_leg_verdict(kb)
    return True if verdict is None else bool(verdict["helps"])


@dataclass(frozen=True)
class GraphLegSummary:
    """The verdict as the KB's settings page shows it."""

    helps: bool
    hybrid: float
    with_graph: float
    questions: int


def graph_leg_summary(kb: KnowledgeBase) -> GraphLegSummary | None:
    verdict = graph_leg_verdict(kb)
    if verdict is None:
        return None
    return GraphLegSummary(
        bool(verdict["helps"]), float(verdict.get("hybrid", 0.0)), float(verdict.get("hybrid+graph", 0.0)),
        int(verdict.get("questions", 0)),
    )
