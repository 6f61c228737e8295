"""The chat pipeline declared as nodes, edges and branches, and its JSON export.

The runner executes this declaration: nodes in edge order, nodes of one parallel group
side by side, a node whose switch is off skipped, a node with a hard budget or a timeout
(chat.pipeline.timeouts) cut off when it runs over, and a branch taken only when its node
reports the branch's shortcut. The UI draws its stage cards from `export_graph()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext_noop

START = "START"
END = "END"


@dataclass(frozen=True)
class Node:
    id: str
    label: str
    stage: int  # its number on the stage cards, 1-8
    budget_ms: int | None = None
    parallel_group: str = ""  # nodes of one group run at the same time
    switch: str = ""  # the ChatOptions field that turns the node off
    on_error: str = "fail"  # what a failure degrades to
    # A hard budget cuts the stage off and degrades it as on_error says. Only stages that wait
    # on a model have one: their fallback is good enough to answer with, and a slow model must
    # not hold every question. Other budgets are targets the trace shows time against.
    hard_budget: bool = False
    # What a node past its timeout (settings.CHAT_NODE_TIMEOUTS_S) degrades to, when that differs
    # from on_error; a node with neither fails the run at its timeout.
    on_timeout: str = ""

    @property
    def timeout_fallback(self) -> str:
        return self.on_timeout or self.on_error


@dataclass(frozen=True)
class Edge:
    source: str
    target: str


@dataclass(frozen=True)
class Branch:
    source: str
    condition: str
    target: str
    shortcut: str = ""


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    branches: tuple[Branch, ...]

    def node(self, node_id: str) -> Node:
        return next(node for node in self.nodes if node.id == node_id)

    def has_branch(self, source: str, shortcut: str) -> bool:
        return any(b.source == source and b.shortcut == shortcut for b in self.branches)

    def steps(self) -> tuple[tuple[Node, ...], ...]:
        """Nodes in execution order; the nodes of a step run in parallel."""
        incoming = {node.id: {e.source for e in self.edges if e.target == node.id} - {START} for node in self.nodes}
        done: set[str] = set()
        steps: list[tuple[Node, ...]] = []
        while len(done) < len(self.nodes):
            ready = [n for n in self.nodes if n.id not in done and incoming[n.id] <= done]
            if not ready:
                raise ValueError("the pipeline graph has a cycle")
            group = ready[0].parallel_group
            step = tuple(n for n in ready if group and n.parallel_group == group) or (ready[0],)
            steps.append(step)
            done.update(n.id for n in step)
        return tuple(steps)

    def export(self) -> dict[str, Any]:
        return {
            "nodes": [_node_dict(node) for node in self.nodes],
            "edges": [{"source": e.source, "target": e.target} for e in self.edges],
            "branches": [
                {"source": b.source, "condition": b.condition, "target": b.target, "shortcut": b.shortcut}
                for b in self.branches
            ],
        }


def _node_dict(node: Node) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": node.id,
        "label": node.label,
        "stage": node.stage,
        "budget_ms": node.budget_ms,
        "on_error": node.on_error,
        "hard_budget": node.hard_budget,
        "on_timeout": node.timeout_fallback,
    }
    if node.parallel_group:
        data["parallel_group"] = node.parallel_group
    if node.switch:
        data["switch"] = node.switch
    return data


CHAT_GRAPH = Graph(
    nodes=(
        Node("memory", gettext_noop("Memory"), 1, 50, on_error="empty history"),
        Node("rewrite", gettext_noop("Rewrite"), 2, 500, "understand", "enable_query_rewrite", "original query",
             hard_budget=True),
        Node("intent", gettext_noop("Intent"), 3, 350, "understand", on_error="default KB intent", hard_budget=True),
        Node("guide", gettext_noop("Ambiguity guide"), 4, 5, on_error="continue"),
        Node("system", gettext_noop("System direct"), 5, 5, on_error="continue"),
        Node("retrieve", gettext_noop("KB ∥ Tools"), 6, 2000, on_error="empty evidence",
             on_timeout="not found (shortcut C)"),
        Node("prompt", gettext_noop("Prompt"), 7, 50),
        Node("generate", gettext_noop("Stream"), 8, 800,
             on_timeout="the answer streamed so far, else the extractive reader's"),
    ),
    edges=(
        Edge(START, "memory"),
        Edge("memory", "rewrite"),
        Edge("memory", "intent"),
        Edge("rewrite", "guide"),
        Edge("intent", "guide"),
        Edge("guide", "system"),
        Edge("system", "retrieve"),
        Edge("retrieve", "prompt"),
        Edge("prompt", "generate"),
        Edge("generate", END),
    ),
    branches=(
        Branch("guide", "top intent confidence < 0.7 or top-2 gap < 0.15: ask a clarifying question", END, "A"),
        Branch("system", "every intent is SYSTEM: answer directly", END, "B"),
        Branch("retrieve", "no KB evidence and no tool ran: say so", END, "C"),
    ),
)


def export_graph() -> dict[str, Any]:
    """Return the chat pipeline's nodes, edges and branches as JSON-ready data."""
    return CHAT_GRAPH.export()
