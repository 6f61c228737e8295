from __future__ import annotations

import json

import pytest

from chat.pipeline import CHAT_GRAPH, export_graph
from chat.pipeline.graph import END, START, Edge, Graph, Node

STAGES = ["memory", "rewrite", "intent", "guide", "system", "retrieve", "prompt", "generate"]


def test_it_exports_nodes_edges_and_branches_as_json():
    graph = export_graph()

    assert set(graph) == {"nodes", "edges", "branches"}
    assert [node["id"] for node in graph["nodes"]] == STAGES
    assert [node["stage"] for node in graph["nodes"]] == list(range(1, 9))
    assert all({"id", "label", "stage", "budget_ms", "on_error"} <= set(node) for node in graph["nodes"])
    assert {n["id"] for n in graph["nodes"] if n.get("parallel_group")} == {"rewrite", "intent"}
    assert {"source": "memory", "target": "rewrite"} in graph["edges"]
    assert {"source": START, "target": "memory"} in graph["edges"] and {"source": "generate", "target": END} in graph["edges"]
    assert [(b["source"], b["shortcut"], b["target"]) for b in graph["branches"]] == [
        ("guide", "A", END), ("system", "B", END), ("retrieve", "C", END)]
    assert json.loads(json.dumps(graph)) == graph


def test_it_declares_the_switches_and_degrade_paths_of_seed_001():
    nodes = {node["id"]: node for node in export_graph()["nodes"]}

    assert nodes["rewrite"]["switch"] == "enable_query_rewrite"
    assert nodes["rewrite"]["on_error"] == "original query"
    assert nodes["intent"]["on_error"] == "default KB intent"
    assert nodes["retrieve"]["on_error"] == "empty evidence"
    assert nodes["generate"]["on_error"] == "fail"


def test_it_runs_rewrite_and_intent_in_one_parallel_step():
    steps = [[node.id for node in step] for step in CHAT_GRAPH.steps()]

    assert steps == [["memory"], ["rewrite", "intent"], ["guide"], ["system"], ["retrieve"], ["prompt"], ["generate"]]


def test_it_refuses_a_graph_with_a_cycle():
    graph = Graph((Node("a", "A", 1), Node("b", "B", 2)), (Edge(START, "a"), Edge("a", "b"), Edge("b", "a")), ())

    with pytest.raises(ValueError, match="cycle"):
        graph.steps()
