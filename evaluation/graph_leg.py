"""Judge the graph leg on a KB's golden questions: hybrid against hybrid+graph.

The leg helps when hybrid+graph's recall@10 is at least `MARGIN` above plain hybrid's; the
verdict and both figures are stored in the KB's retrieval settings, where auto mode
(`knowledge.graph_leg.graph_leg_helps`) and the KB's settings page read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from knowledge.graph_leg import SETTING
from knowledge.models import KnowledgeBase

from .runner import EvalQuestion, evaluate

METRIC = "recall@10"
MARGIN = 0.0  # any gain keeps the leg; a tie or a loss turns it off (it costs time)


@dataclass(frozen=True)
class GraphLegVerdict:
    helps: bool
    hybrid: dict[str, float]
    hybrid_graph: dict[str, float]
    questions: int

    def as_setting(self) -> dict:
        return {
            "helps": self.helps, "metric": METRIC, "questions": self.questions,
            "hybrid": round(self.hybrid[METRIC], 4), "hybrid+graph": round(self.hybrid_graph[METRIC], 4),
            "ndcg@10": {"hybrid": round(self.hybrid["ndcg@10"], 4), "hybrid+graph": round(self.hybrid_graph["ndcg@10"], 4)},
        }


def judge_graph_leg(kb: KnowledgeBase, questions: Sequence[EvalQuestion], *, save: bool = True, **overrides) -> GraphLegVerdict:
    """Retrieve every question in both modes; store whether the graph leg raised recall@10."""
    hybrid = evaluate(kb, questions, mode="hybrid", **overrides).report.metrics
    with_graph = evaluate(kb, questions, mode="hybrid+graph", **overrides).report.metrics
    verdict = GraphLegVerdict(with_graph[METRIC] > hybrid[METRIC] + MARGIN, hybrid, with_graph, len(questions))
    if save:
        store_verdict(kb, verdict)
    return verdict


def store_verdict(kb: KnowledgeBase, verdict: GraphLegVerdict) -> None:
    kb.refresh_from_db(fields=["retrieval_settings"])
    kb.retrieval_settings = {**(kb.retrieval_settings or {}), SETTING: verdict.as_setting()}
    KnowledgeBase.objects.filter(pk=kb.pk).update(retrieval_settings=kb.retrieval_settings)
