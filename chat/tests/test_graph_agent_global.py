"""The graph agent's global questions go through map-reduce global search, with the chat's model."""

from __future__ import annotations

import json
from xml.sax.saxutils import quoteattr

import pytest

from agentic_rag.llm.testing import FakeReply
from chat.workers import WORKER_TYPES
from graphrag.build import build_graph
from graphrag.search import global_search
from graphrag.tests.test_build import ingest
from graphrag.tests.test_map_reduce import RoutedFakeServer, router

pytestmark = pytest.mark.django_db
QUESTION = "What themes exist in these documents?"


def points(score: int) -> FakeReply:
    return FakeReply(text=json.dumps({"points": [{"text": "A theme of this group.", "score": score, "sources": [1]}]}))


def test_the_community_the_model_finds_most_helpful_comes_first_in_the_graph_agents_evidence(kb):
    ingest(kb)
    build_graph(kb)
    offline = [a.community.title for a in global_search(kb, QUESTION, top=10)]
    assert len(offline) >= 2
    favoured = offline[-1]  # the model disagrees with the offline order

    with RoutedFakeServer({f"title={quoteattr(favoured)}": points(95)}) as server:
        server.default = points(5)
        output = WORKER_TYPES["graph_agent"](kb.slug).retrieve_with_trace(QUESTION, kb=kb, llm=router(server))

    assert len(server.chat_requests) >= len(offline)  # one map call per report
    first = output["reference"][0]
    assert first.metadata["graph"] == f"community: {favoured}"


def test_offline_the_graph_agent_labels_the_communities_whose_reports_answer(kb):
    ingest(kb)
    build_graph(kb)

    output = WORKER_TYPES["graph_agent"](kb.slug).retrieve_with_trace(QUESTION, kb=kb)

    labels = [r.metadata.get("graph", "") for r in output["reference"]]
    assert labels[0].startswith("community: ")
