from __future__ import annotations

import json

import pytest

from chat.react_agent import MAX_TOOL_CALLS, ReactWorker, is_simple
from chat.tests.conftest import Events, model_router
from graphrag.tests.test_build import ingest
from knowledge.retrieval import RetrievalResult

pytestmark = pytest.mark.django_db


def steps_of(events):
    return [data for kind, data in events if kind == "step"]


def test_a_simple_question_takes_the_fast_path(kb):
    ingest(kb)
    events = []

    output = ReactWorker(kb.slug).retrieve_with_trace("Which broker does Celery use?", on_event=lambda k, d: events.append((k, d)))

    assert is_simple("Which broker does Celery use?")
    assert [s["action"] for s in steps_of(events)] == ["vector_retrieve", "grade"]
    assert output["reference"][0].doc_name == "ops.md"
    assert output["retrieval_results"][0].mode == "react"


def test_thin_evidence_makes_it_rewrite_search_again_rerank_and_stop_within_the_cap(kb):
    ingest(kb)
    seen: list[str] = []

    def retriever(query, kb, params):
        seen.append(query)
        return RetrievalResult(query=query, mode=params.mode)  # finds nothing

    events = []
    output = ReactWorker(kb.slug).retrieve_with_trace(
        "How does Celery schedule work, and which broker does it use for quantum jobs?", retriever=retriever,
        on_event=lambda k, d: events.append((k, d)),
    )

    actions = [s["action"] for s in steps_of(events)]
    assert actions[:3] == ["vector_retrieve", "grade", "query_rewrite"]
    assert actions.count("vector_retrieve") >= 2 and len(set(seen)) >= 2
    assert actions[-1] == "finish" and len(actions) <= MAX_TOOL_CALLS + 1, actions
    assert output["reference"] == []


def test_a_model_that_repeats_itself_or_names_an_unknown_tool_is_stopped(kb, fake_server):
    from agentic_rag.llm.testing import FakeReply

    ingest(kb)
    server = fake_server
    llm = model_router(server)
    server.default = FakeReply(text=json.dumps({"thought": "look", "action": "vector_retrieve", "input": "Celery broker"}))
    events = []
    output = ReactWorker(kb.slug).retrieve_with_trace("Which broker?", llm=llm, on_event=lambda k, d: events.append((k, d)))
    assert [s["action"] for s in steps_of(events)] == ["vector_retrieve", "vector_retrieve"]
    assert steps_of(events)[-1]["observation"] == "repeated: stopped"
    assert output["reference"] and any("already done" in w for w in output["retrieval_results"][0].warnings)
    assert output["incomplete"] == "stopped: vector_retrieve(Celery broker) was already done"

    server.default = FakeReply(text=json.dumps({"thought": "hmm", "action": "launch_rockets", "input": "now"}))
    events.clear()
    output = ReactWorker(kb.slug).retrieve_with_trace("Which broker?", llm=llm, on_event=lambda k, d: events.append((k, d)))
    assert any("unknown tool 'launch_rockets'" in w for w in output["retrieval_results"][0].warnings)

    server.default = FakeReply(text="I refuse to answer in JSON")
    events.clear()
    output = ReactWorker(kb.slug).retrieve_with_trace("Which broker does Celery use?", llm=llm, on_event=lambda k, d: events.append((k, d)))
    assert steps_of(events)[0]["action"] == "vector_retrieve"  # the rules went on
    assert any("no usable action" in w for w in output["retrieval_results"][0].warnings)
    assert output["incomplete"] == ""  # the rules took over and finished: nothing was cut short


def test_the_chat_shows_each_step_and_cites_what_it_found(alice, kb, extractive):
    from chat.pipeline import ChatOptions, ChatRequest, run_chat

    ingest(kb)
    events = Events()
    run_chat(ChatRequest(alice, None, "Which broker does Celery use?", ChatOptions(kb_slug=kb.slug, agent_type="react_agent")),
             emit=events, llm=extractive)

    assert [e.data["action"] for e in events.of("step")] == ["vector_retrieve", "grade"]
    final = events.one("final").data
    assert "Redis" in final["response"] and final["citations"]


def test_offline_it_calls_the_tools_the_question_asks_for_then_searches(kb):
    from chat.pipeline.tools import AgentTools, get_tool_channel

    ingest(kb)
    events = []
    output = ReactWorker(kb.slug).retrieve_with_trace(
        "sqrt(144) + 2**3", tools=AgentTools(get_tool_channel(), ("calculator",)),
        on_event=lambda k, d: events.append((k, d)),
    )

    steps = steps_of(events)
    assert steps[0]["action"] == "calculator" and json.loads(steps[0]["input"]) == {"expression": "sqrt(144) + 2**3"}
    assert "20" in steps[0]["observation"] and steps[1]["action"] == "vector_retrieve"
    [result] = output["tool_results"]
    assert result.ok and result.name == "calculator" and "= 20" in result.output


def test_a_model_can_call_a_chat_tool_and_a_failing_tool_is_an_observation(kb, fake_server):
    from agentic_rag.llm.testing import FakeReply
    from chat.pipeline.tools import AgentTools, Tool, ToolRegistry, get_tool_channel

    ingest(kb)

    def broken(parameters):
        raise RuntimeError("the exchange is closed")

    channel = ToolRegistry((get_tool_channel().get("calculator"), Tool("rates", "Exchange rates.", broken, lambda m: None)))
    fake_server.script(
        FakeReply(text=json.dumps({"thought": "compute", "action": "calculator", "input": '{"expression": "2**10"}'})),
        FakeReply(text=json.dumps({"thought": "rates", "action": "rates", "input": '{"from": "USD"}'})),
        FakeReply(text=json.dumps({"thought": "done", "action": "finish", "input": ""})),
    )
    events = []
    output = ReactWorker(kb.slug).retrieve_with_trace(
        "What is 2 to the power of 10?", llm=model_router(fake_server), tools=AgentTools(channel),
        on_event=lambda k, d: events.append((k, d)),
    )

    assert [s["action"] for s in steps_of(events)] == ["calculator", "rates", "finish"]
    assert "1024" in steps_of(events)[0]["observation"]
    assert steps_of(events)[1]["observation"] == "rates failed: RuntimeError: the exchange is closed"
    assert [(r.name, r.ok) for r in output["tool_results"]] == [("calculator", True), ("rates", False)]
    # The model was told which chat tools exist and what they do.
    assert "- rates: Exchange rates." in fake_server.chat_requests[0].messages[0]["content"]


def test_in_the_chat_react_calls_the_tool_once_and_the_answer_cites_it(alice, kb, extractive):
    from chat.pipeline import ChatOptions, ChatRequest, run_chat

    ingest(kb)
    result = run_chat(ChatRequest(alice, None, "sqrt(144) + 2**3", ChatOptions(kb_slug=kb.slug, agent_type="react_agent")),
                      emit=Events(), llm=extractive)

    assert result.tools == ("calculator",)  # by the agent; the pipeline did not call it as well
    assert "= 20" in result.answer
    assert any(item["source"] == "TOOL" and item["doc"] == "calculator" for item in result.evidence)
    assert [step["action"] for step in result.agent_steps][0] == "calculator"
