from __future__ import annotations

import dataclasses

import pytest

from graphrag.build import build_graph
from graphrag.search import global_search, local_search, path_search
from graphrag.tests.test_build import ingest
from knowledge.models import KnowledgeBase
from knowledge.retrieval import RetrievalParams, retrieve

pytestmark = pytest.mark.django_db


@pytest.fixture
def graph_kb(kb):
    ingest(kb)
    build_graph(kb)
    return kb


def documents(result) -> list[str]:
    return list(dict.fromkeys(c.doc_name for c in result.candidates))


def test_the_graph_leg_reaches_documents_through_the_entities_a_question_names(graph_kb):
    result = retrieve("What does LightRAG build on?", graph_kb, RetrievalParams(mode="graph", top_k=10))

    # graph.md names LightRAG; pipeline.md is reached through GraphRAG, LightRAG's neighbour.
    assert documents(result)[0] == "graph.md"
    assert "pipeline.md" in documents(result)
    assert all("graph" in c.scores for c in result.candidates)


def test_hybrid_plus_graph_keeps_hybrids_ranking_and_adds_the_documents_only_the_graph_reached(graph_kb):
    question = "Which relation does LightRAG have?"
    params = RetrievalParams(mode="hybrid", top_k=1, postprocess=False, gate=None)
    hybrid = retrieve(question, graph_kb, params)
    both = retrieve(question, graph_kb, dataclasses.replace(params, mode="hybrid+graph"))

    assert set(both.legs) == {"bm25", "vector", "graph"} and "graph" in both.timings_ms
    assert documents(hybrid)[0] == documents(both)[0] == "graph.md"
    added = [c for c in both.candidates if any(n.startswith("graph:") for n in c.notes)]
    assert added and {c.doc_name for c in added} <= {"pipeline.md", "ops.md"}
    assert both.candidates.index(added[0]) == 1  # after the strongest hit, before hybrid's others
    assert [c.chunk_id for c in both.candidates if c not in added] == [c.chunk_id for c in hybrid.candidates]


def test_a_question_naming_no_entity_gets_no_graph_hits_and_says_why(graph_kb):
    result = retrieve("weather tomorrow", graph_kb, RetrievalParams(mode="graph"))

    assert not result.candidates
    assert any("names no entity" in w for w in result.warnings)


def test_another_users_graph_never_answers(graph_kb, bob):
    other = KnowledgeBase.objects.create(slug="bobs", name="Bob's", owner=bob)
    ingest(other, {"secret.md": "# 1 Secret\n\nLightRAG extends GraphRAG with a secret index."})
    build_graph(other)

    for kb, foreign in ((graph_kb, "secret.md"), (other, "graph.md")):
        for mode in ("graph", "hybrid+graph"):
            result = retrieve("LightRAG GraphRAG", kb, RetrievalParams(mode=mode, top_k=20))
            assert result.candidates and foreign not in documents(result)
        assert all(e.kb_id == kb.pk for e in local_search(kb, "LightRAG").entities)


def test_local_search_gives_the_entity_its_neighbours_relations_and_chunks(graph_kb):
    found = local_search(graph_kb, "What is GraphRAG?")

    assert [e.key for e in found.entities] == ["graphrag"]
    neighbours = {e.key for e in found.neighbours}
    assert {"networkx", "lightrag", "streamchatpipeline"} <= neighbours
    assert any(f.relation == "extends" and f.source == "LightRAG" for f in found.facts)
    assert found.chunk_ids and all(f.chunk_ids for f in found.facts)


def test_path_search_links_two_entities_through_the_one_between_them(graph_kb):
    facts = path_search(graph_kb, "How is LightRAG related to networkx?")

    names = [f.source for f in facts] + [f.target for f in facts]
    assert {"LightRAG", "networkx"} <= set(names)
    assert all(f.chunk_ids for f in facts)


def test_global_search_ranks_communities_by_the_question(graph_kb):
    answers = global_search(graph_kb, "What do Docker, Celery and Redis do?")

    assert answers
    top = answers[0].community
    assert any(name in top.title + top.summary for name in ("Celery", "Docker", "Redis"))
