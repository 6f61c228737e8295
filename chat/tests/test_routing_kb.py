"""The router: worker_name parsing, routing by content, overrides and isolation."""

from __future__ import annotations

import pytest

from chat.routing_kb import (
    GENERAL,
    InvalidWorkerName,
    WorkerSpec,
    clear_profiles,
    format_worker_name,
    kb_profile,
    parse_worker_name,
    route,
)
from chat.tests.conftest import Events, ingest_docs
from knowledge.models import KnowledgeBase, Visibility

SEARCH_DOCS = {
    "fusion.md": "# Hybrid search\n\nHybrid search fuses the BM25 ranking and the vector ranking with reciprocal "
    "rank fusion. BM25 scores keywords; the vector leg scores embeddings by cosine similarity.",
    "rerank.md": "# Rerank\n\nThe reranker reorders the fused candidates of a retrieval query by relevance.",
}
BAKING_DOCS = {
    "bread.md": "# Bread\n\nKnead the dough for ten minutes, then let the dough rise for two hours until it "
    "doubles. Bake the bread at 220 degrees for thirty minutes in a hot oven.",
    "cake.md": "# Cake\n\nWhisk eggs and sugar, fold in the flour and bake the sponge cake at 180 degrees.",
}
SECRET_DOCS = {
    "volcano.md": "# Volcano\n\nThe volcano eruption sends lava, magma and volcanic ash across the island. "
    "Volcanologists measure magma pressure before each eruption.",
}


@pytest.fixture(autouse=True)
def _fresh_profiles():
    clear_profiles()
    yield
    clear_profiles()


@pytest.fixture
def two_kbs(alice):
    search = KnowledgeBase.objects.create(slug="search", name="Search engineering", owner=alice,
                                          description="retrieval, ranking and fusion")
    baking = KnowledgeBase.objects.create(slug="baking", name="Baking", owner=alice,
                                          description="bread and cake recipes")
    ingest_docs(search, SEARCH_DOCS)
    ingest_docs(baking, BAKING_DOCS)
    return search, baking


@pytest.fixture
def bobs_secret(bob):
    secret = KnowledgeBase.objects.create(slug="bob-volcano", name="Volcanoes", owner=bob,
                                          description="volcano eruptions and magma")
    ingest_docs(secret, SECRET_DOCS)
    return secret


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("", WorkerSpec("", "", "retrieve_only")),
        ("   ", WorkerSpec("", "", "retrieve_only")),
        ("hybrid_agent", WorkerSpec("", "hybrid_agent", "retrieve_only")),
        ("edu:hybrid_agent", WorkerSpec("edu", "hybrid_agent", "retrieve_only")),
        ("edu:hybrid_agent:retrieve_only", WorkerSpec("edu", "hybrid_agent", "retrieve_only")),
        (" movie : graph_agent : retrieve_only ", WorkerSpec("movie", "graph_agent", "retrieve_only")),
        ("edu:naive_rag_agent:", WorkerSpec("edu", "naive_rag_agent", "retrieve_only")),
    ],
)
def test_it_parses_valid_worker_names(name, expected):
    assert parse_worker_name(name) == expected


@pytest.mark.parametrize(
    "name",
    ["edu:hybrid_agent:generate", "edu:hybrid_agent:retrieve_only:extra", "a:b:c:d", "edu:hybrid_agent:stream"],
)
def test_it_refuses_invalid_worker_names(name):
    with pytest.raises(InvalidWorkerName):
        parse_worker_name(name)


@pytest.mark.parametrize(
    ("kb", "agent_type", "expected"),
    [
        ("edu", "hybrid_agent", "edu:hybrid_agent:retrieve_only"),
        ("general", "hybrid_agent", ""),
        ("", "", "default:hybrid_agent:retrieve_only"),
        ("movie", "naive_rag_agent", "movie:naive_rag_agent:retrieve_only"),
    ],
)
def test_it_formats_worker_names(kb, agent_type, expected):
    assert format_worker_name(kb, agent_type) == expected


def test_it_refuses_a_mode_other_than_retrieve_only():
    with pytest.raises(InvalidWorkerName):
        format_worker_name("edu", "hybrid_agent", "generate")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("How does reciprocal rank fusion combine BM25 and vector rankings?", "search"),
        ("How long should the bread dough rise before I bake it?", "baking"),
    ],
)
def test_it_routes_by_content(alice, two_kbs, question, expected):
    decision = route(alice, question)
    assert decision.method == "auto"
    assert decision.kb_prefix == expected == decision.routed_kb_prefix
    assert decision.worker_name == f"{expected}:hybrid_agent:retrieve_only"
    assert 0 < decision.confidence <= 1
    assert "content match" in decision.reason


@pytest.mark.django_db
def test_it_takes_the_general_path_when_nothing_matches(alice, two_kbs):
    decision = route(alice, "zzz qqq xyzzy")
    assert decision.kb_prefix == GENERAL
    assert decision.worker_name == ""


@pytest.mark.django_db
def test_a_requested_kb_overrides_the_content_route(alice, two_kbs):
    decision = route(alice, "How long should the bread dough rise?", requested_kb="search")
    assert (decision.kb_prefix, decision.method, decision.confidence) == ("search", "requested", 1.0)
    assert decision.requested_kb_prefix == "search"


@pytest.mark.django_db
def test_auto_route_off_goes_general(alice, two_kbs, settings):
    settings.KB_AUTO_ROUTE = False
    decision = route(alice, "How long should the bread dough rise?")
    assert (decision.kb_prefix, decision.worker_name, decision.method) == (GENERAL, "", "disabled")


@pytest.mark.django_db
def test_a_chosen_agent_type_lands_in_the_worker_name(alice, two_kbs):
    decision = route(alice, "bake the bread dough", agent_type="naive_rag_agent")
    assert decision.worker_name == "baking:naive_rag_agent:retrieve_only"


@pytest.mark.django_db
def test_it_never_routes_to_another_users_private_kb(alice, bob, two_kbs, bobs_secret):
    question = "What does magma pressure tell volcanologists before a volcano eruption?"
    assert route(bob, question).kb_prefix == "bob-volcano"  # the question does match it
    decision = route(alice, question)
    assert decision.kb_prefix != "bob-volcano"
    assert "bob-volcano" not in decision.reason


@pytest.mark.django_db
def test_it_routes_to_a_public_kb_of_another_user(alice, bob, two_kbs, bobs_secret):
    bobs_secret.visibility = Visibility.PUBLIC
    bobs_secret.save()
    decision = route(alice, "What does magma pressure tell volcanologists before a volcano eruption?")
    assert decision.kb_prefix == "bob-volcano"


@pytest.mark.django_db
def test_the_profile_is_rebuilt_when_the_content_changes(alice, two_kbs):
    search, _ = two_kbs
    before = kb_profile(search)
    assert kb_profile(search) is before
    ingest_docs(search, {"sourdough.md": "# Sourdough\n\nSourdough starter feeds on flour and water."})
    search.refresh_from_db()
    assert kb_profile(search) is not before
    assert "sourdough" in kb_profile(search).terms


@pytest.mark.django_db
def test_the_pipeline_routes_a_question_without_a_kb(alice, two_kbs, extractive):
    from chat.pipeline import ChatOptions, ChatRequest, run_chat

    events = Events()
    request = ChatRequest(alice, None, "How long should the bread dough rise?", ChatOptions(kb_slug=None))
    result = run_chat(request, emit=events, llm=extractive)
    route_event = events.one("route").data
    assert route_event["kb_prefix"] == "baking" and route_event["method"] == "auto"
    assert result.route == "baking"
    assert any(item["doc"] == "bread.md" for item in result.evidence)
    from chat.models import Trace

    span = Trace.objects.get(trace_id=result.trace_id).spans.get(name="route")
    assert '"method": "auto"' in span.output


@pytest.mark.django_db
def test_a_failing_embedder_routes_to_general(alice, two_kbs):
    def broken(name):
        raise RuntimeError("embedding service down")

    decision = route(alice, "How long should the bread dough rise?", embedder_for=broken)
    assert (decision.kb_prefix, decision.method) == (GENERAL, "failed")
