from __future__ import annotations

import pytest

from chat.routing_kb import graph_question
from chat.tests.conftest import Events
from chat.workers import AGENT_TYPES, WORKER_TYPES, RagRunSpec, plan_for
from graphrag.build import build_graph
from graphrag.tests.test_build import DOCS, ingest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("GraphRAG 和 networkx 的关系是什么？", "path"),
        ("How is LightRAG related to networkx?", "path"),
        ("What is the relationship between Celery and Redis?", "path"),
        ("检索领域有哪些方向？", "global"),
        ("What themes exist in these documents?", "global"),
        ("What does StreamChatPipeline depend on?", "local"),
        ("GraphRAG 依赖什么？", "local"),
        ("When does the circuit breaker open?", ""),
        ("混合检索的权重是多少？", ""),
    ],
)
def test_relation_style_questions_are_the_graphs(question, kind):
    assert graph_question(question) == kind


def test_auto_sends_relation_questions_to_the_graph_agent_and_the_rest_to_hybrid():
    assert plan_for("kb", "auto", ["GraphRAG 和 networkx 的关系？"]) == [
        RagRunSpec("kb", "graph_agent", ("GraphRAG 和 networkx 的关系？",))
    ]
    assert plan_for("kb", "auto", ["When does it open?"])[0].agent_type == "hybrid_agent"
    assert "graph_agent" in AGENT_TYPES  # the agent selector and the API accept it


def test_the_graph_agent_puts_the_relation_it_found_first_and_labels_it(kb):
    ingest(kb)
    build_graph(kb)

    output = WORKER_TYPES["graph_agent"](kb.slug).retrieve_with_trace("What does LightRAG extend?")

    first = output["reference"][0]
    assert first.metadata["graph"] == "relation: LightRAG —extends→ GraphRAG"
    assert "LightRAG extends GraphRAG" in first.text
    assert output["retrieval_results"][0].mode == "hybrid+graph"


def test_without_a_graph_it_answers_from_hybrid_search_and_says_so(kb):
    ingest(kb, {"ops.md": DOCS["ops.md"]})  # ingested, the graph not built yet

    output = WORKER_TYPES["graph_agent"](kb.slug).retrieve_with_trace("What does Celery use?")

    assert output["reference"] and not any(r.metadata.get("graph") for r in output["reference"])
    assert any("no graph yet" in w for w in output["retrieval_results"][0].warnings)


def test_a_relation_question_in_chat_is_answered_with_cited_graph_evidence(alice, kb, extractive):
    from chat.pipeline import ChatOptions, ChatRequest, run_chat

    ingest(kb)
    build_graph(kb)
    events = Events()
    run_chat(ChatRequest(alice, None, "How is LightRAG related to networkx?", ChatOptions(kb_slug=kb.slug)),
             emit=events, llm=extractive)

    assert events.one("route").data["worker_name"] == f"{kb.slug}:graph_agent:retrieve_only"
    evidence = events.one("retrieval").data["evidence"]
    graph_items = [item for item in evidence if item["source"] == "GRAPH"]
    assert graph_items and all(item["section"].startswith("relation: ") for item in graph_items)
    assert {"graph.md"} <= {item["doc"] for item in graph_items}


def test_the_offline_reader_answers_a_relation_question_from_the_graph_evidence(alice, kb, extractive):
    from chat.pipeline import ChatOptions, ChatRequest, run_chat

    ingest(kb)
    build_graph(kb)
    events = Events()
    run_chat(ChatRequest(alice, None, "How is LightRAG related to networkx?", ChatOptions(kb_slug=kb.slug)),
             emit=events, llm=extractive)

    final = events.one("final").data
    assert "LightRAG" in final["response"] and final["citations"]
    assert "no evidence" not in final["response"]
