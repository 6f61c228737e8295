"""Retrieve-only workers: the pool's keys, the registry and the fan-out with a timeout."""

from __future__ import annotations

import threading
import time

import pytest

from chat.pipeline.stages import collect_search
from chat.routing_kb import InvalidWorkerName
from chat.tests.conftest import ingest_docs
from chat.workers import WORKER_TYPES, RagRunSpec, UnknownWorker, WorkerPool, plan_for, run_plan
from knowledge.candidates import Candidate
from knowledge.retrieval import RetrievalResult


def _candidate(chunk_id: int, text: str) -> Candidate:
    return Candidate(chunk_id=chunk_id, doc_id=1, doc_name="doc.md", text=text, score=1.0)


class FakeWorker:
    def __init__(self, kb: str, chunk_ids: tuple[int, ...], delay_s: float = 0.0) -> None:
        self.kb, self.chunk_ids, self.delay_s = kb, chunk_ids, delay_s
        self.released = threading.Event()

    def retrieve_with_trace(self, query: str, thread_id: str = "", **overrides) -> dict:
        if self.delay_s:
            self.released.wait(self.delay_s)
        refs = [_candidate(i, f"{self.kb} chunk {i} for {query}") for i in self.chunk_ids]
        result = RetrievalResult(query=query, mode="fake", candidates=refs)
        return {"context": "\n".join(c.text for c in refs), "retrieval_results": [result], "reference": refs}


@pytest.fixture
def pool():
    registry = {
        "fast_agent": lambda kb: FakeWorker(kb, (1, 2)),
        "other_agent": lambda kb: FakeWorker(kb, (2, 3)),
        "slow_agent": lambda kb: FakeWorker(kb, (9,), delay_s=5),
    }
    return WorkerPool(registry)


def test_the_pool_keeps_one_worker_per_kb_type_and_mode(pool):
    first = pool.get("edu:fast_agent:retrieve_only")
    assert pool.get("edu:fast_agent") is first  # the two-part form names the same worker
    assert pool.get("movie:fast_agent:retrieve_only") is not first
    pool.get("edu:other_agent:retrieve_only")
    assert pool.keys() == [
        "edu:fast_agent:retrieve_only", "edu:other_agent:retrieve_only", "movie:fast_agent:retrieve_only",
    ]


def test_sessions_do_not_add_workers(pool):
    spec = RagRunSpec("edu", "fast_agent", ("q",))
    for session in ("s1", "s2", "s3"):
        run_plan([spec], kb=None, thread_id=session, pool=pool)
    assert pool.keys() == ["edu:fast_agent:retrieve_only"]


def test_the_pool_refuses_unknown_types_and_modes(pool):
    with pytest.raises(UnknownWorker):
        pool.get("edu:graph_agent:retrieve_only")
    with pytest.raises(InvalidWorkerName):
        pool.get("edu:fast_agent:generate")


def test_the_registry_has_the_two_retrieve_only_workers():
    assert {"naive_rag_agent", "hybrid_agent"} <= set(WORKER_TYPES)
    assert WORKER_TYPES["naive_rag_agent"]("kb").search_mode == "vector"
    assert WORKER_TYPES["hybrid_agent"]("kb").search_mode == "hybrid"


def test_a_fan_out_merges_results_and_drops_a_worker_that_times_out(pool):
    plan = [RagRunSpec("edu", "fast_agent", ("q",)), RagRunSpec("edu", "slow_agent", ("q",)),
            RagRunSpec("edu", "other_agent", ("q",))]
    started = time.perf_counter()
    fanout = run_plan(plan, kb=None, pool=pool, timeout_s=0.2)
    elapsed = time.perf_counter() - started
    pool.get("edu:slow_agent").released.set()
    assert elapsed < 1.0
    assert fanout.errors == ["edu:slow_agent:retrieve_only: timed out after 0.2s"]
    assert len(fanout.results) == 2
    # The one merge: each chunk once, in plan order.
    assert [c.chunk_id for c in collect_search(fanout.results).references] == [1, 2, 3]


def test_a_failing_worker_is_reported_and_the_rest_kept(pool):
    plan = [RagRunSpec("edu", "fast_agent", ("q",)), RagRunSpec("edu", "missing_agent", ("q",))]
    fanout = run_plan(plan, kb=None, pool=pool, timeout_s=1)
    assert [c.chunk_id for c in collect_search(fanout.results).references] == [1, 2]
    assert fanout.errors and fanout.errors[0].startswith("edu:missing_agent:retrieve_only")


@pytest.mark.parametrize(("agent_type", "expected"), [("auto", "hybrid_agent"), ("naive_rag_agent", "naive_rag_agent")])
def test_the_plan_uses_the_chosen_type(agent_type, expected):
    assert plan_for("edu", agent_type, ["q"]) == [RagRunSpec("edu", expected, ("q",))]


@pytest.mark.django_db
def test_the_naive_worker_retrieves_with_the_vector_leg_only(kb):
    ingest_docs(kb)
    seen = []

    def retriever(query, kb, params):
        seen.append(params.mode)
        return RetrievalResult(query=query, mode=params.mode)

    worker = WORKER_TYPES["naive_rag_agent"](kb.slug)
    output = worker.retrieve_with_trace("circuit breaker", "session-1", retriever=retriever)
    assert seen == ["vector"]
    assert set(output) == {"context", "retrieval_results", "reference", "incomplete"} and output["incomplete"] == ""


@pytest.mark.django_db
def test_the_hybrid_worker_finds_the_passage(kb):
    ingest_docs(kb)
    output = WORKER_TYPES["hybrid_agent"](kb.slug).retrieve_with_trace("When does the circuit breaker open?")
    assert any(ref.doc_name == "breaker.md" for ref in output["reference"])
    assert "circuit breaker" in output["context"]


@pytest.mark.django_db
@pytest.mark.parametrize(("agent_type", "mode"), [("auto", "hybrid"), ("naive_rag_agent", "vector")])
def test_the_pipeline_retrieves_through_the_chosen_worker(alice, docs_kb, extractive, agent_type, mode):
    from chat.pipeline import ChatOptions, ChatRequest, run_chat
    from chat.tests.conftest import Events

    seen = []

    def retriever(query, kb, params):
        seen.append(params.mode)
        return RetrievalResult(query=query, mode=params.mode)

    options = ChatOptions(kb_slug=docs_kb.slug, agent_type=agent_type)
    events = Events()
    run_chat(ChatRequest(alice, None, "When does the circuit breaker open?", options), emit=events,
             llm=extractive, retriever=retriever)
    assert seen and set(seen) == {mode}
    assert events.one("route").data["worker_name"] == f"{docs_kb.slug}:{plan_for('', agent_type, [])[0].agent_type}:retrieve_only"


@pytest.mark.django_db
def test_the_form_takes_an_agent_type_and_refuses_unknown_ones(alice):
    from chat.forms import AskForm, chat_request

    form = AskForm({"message": "hi", "agent_type": "naive_rag_agent"}, user=alice)
    assert form.is_valid() and chat_request(form).options.agent_type == "naive_rag_agent"
    assert AskForm({"message": "hi"}, user=alice).is_valid()
    assert not AskForm({"message": "hi", "agent_type": "evil_agent"}, user=alice).is_valid()


@pytest.mark.django_db
def test_the_pipeline_refuses_an_unknown_agent_type(alice):
    from chat.pipeline import ChatOptions, ChatRefused, ChatRequest, run_chat

    with pytest.raises(ChatRefused):
        run_chat(ChatRequest(alice, None, "hi", ChatOptions(agent_type="evil_agent")), emit=lambda e: None)
