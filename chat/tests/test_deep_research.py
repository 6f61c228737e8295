from __future__ import annotations

import json
import time

import pytest

from chat.deep_research import MAX_ROUNDS, DeepResearchWorker, rule_decompose
from chat.tests.conftest import Events, model_router
from chat.workers import AGENT_TYPES, plan_for
from graphrag.build import build_graph
from graphrag.tests.test_build import ingest
from knowledge.retrieval import RetrievalResult

# The rounds search side by side in threads, which see only committed rows.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        ("文档状态有哪些？多进程下进度怎么送到浏览器？", ["文档状态有哪些？", "多进程下进度怎么送到浏览器？"]),
        ("What does Celery use, and which storage does Milvus replace?", ["What does Celery use", "which storage does Milvus replace?"]),
        ("GraphRAG 依赖什么，以及 LightRAG 扩展了什么？", ["GraphRAG 依赖什么", "LightRAG 扩展了什么？"]),
        ("What does LightRAG extend?", ["What does LightRAG extend?"]),
    ],
)
def test_compound_questions_are_cut_into_their_parts(question, parts):
    assert rule_decompose(question) == parts


def test_each_part_gets_its_evidence_and_every_part_reaches_the_references(kb):
    ingest(kb)
    build_graph(kb)
    events = []

    output = DeepResearchWorker(kb.slug).retrieve_with_trace(
        "Which broker does Celery use? What does LightRAG extend?", on_event=lambda kind, data: events.append((kind, data))
    )

    docs = [c.doc_name for c in output["reference"]]
    assert {"ops.md", "graph.md"} <= set(docs[:2])  # one part each, interleaved
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "thinking" and "2 sub-question(s) (rules)" in events[0][1]["text"]
    first_round = events[1][1]
    assert first_round["round"] == 1 and len(first_round["queries"]) == 2 and first_round["sufficient"]
    assert output["retrieval_results"][0].mode == "deep_research"


def test_an_unanswerable_part_gets_follow_ups_and_stops_after_three_rounds(kb):
    ingest(kb)
    seen: list[str] = []

    def retriever(query, kb, params):
        seen.append(query)
        return RetrievalResult(query=query, mode=params.mode)  # never finds anything

    events = []
    output = DeepResearchWorker(kb.slug).retrieve_with_trace(
        "What does Celery use for quantum teleportation?", retriever=retriever,
        on_event=lambda kind, data: events.append((kind, data)),
    )

    rounds = [data for kind, data in events if kind == "round"]
    assert len(rounds) == MAX_ROUNDS and not rounds[-1]["sufficient"]
    assert len(set(seen)) > 1  # the follow-ups asked differently
    assert output["reference"] == []
    assert any("does not cover" in w for w in output["retrieval_results"][0].warnings)


def test_with_a_model_the_model_decomposes_and_bad_json_falls_back_to_the_rules(kb, fake_server):
    ingest(kb)
    server = fake_server
    llm = model_router(server)
    events = []
    server.reply(json.dumps({"sub_questions": ["Which broker does Celery use?", "What runs Redis?"]}))
    DeepResearchWorker(kb.slug).retrieve_with_trace("Tell me about the ops setup", llm=llm, on_event=lambda k, d: events.append((k, d)))
    assert "(model)" in events[0][1]["text"] and "What runs Redis?" in events[0][1]["text"]

    events.clear()
    server.reply("this is not JSON")
    DeepResearchWorker(kb.slug).retrieve_with_trace("Which broker does Celery use?", llm=llm, on_event=lambda k, d: events.append((k, d)))
    assert "(rules)" in events[0][1]["text"]


def test_the_chat_streams_the_rounds_and_cites_every_part(alice, kb, extractive):
    from chat.pipeline import ChatOptions, ChatRequest, run_chat

    ingest(kb)
    events = Events()
    run_chat(
        ChatRequest(alice, None, "Which broker does Celery use? What does LightRAG extend?",
                    ChatOptions(kb_slug=kb.slug, agent_type="deep_research_agent")),
        emit=events, llm=extractive,
    )

    assert events.of("thinking") and events.of("round")
    assert events.one("route").data["worker_name"] == f"{kb.slug}:deep_research_agent:retrieve_only"
    cited = {item["doc"] for item in events.one("retrieval").data["evidence"]}
    assert {"ops.md", "graph.md"} <= cited
    assert "deep_research_agent" in AGENT_TYPES
    assert plan_for(kb.slug, "deep_research_agent", ["a", "b"])[0].queries == ("a",)


def test_it_only_searches_the_kb_it_was_given(kb, bob):
    from knowledge.models import KnowledgeBase

    ingest(kb)
    other = KnowledgeBase.objects.create(slug="bobs", name="Bob's", owner=bob)
    ingest(other, {"secret.md": "# 1 Secret\n\nCelery uses a secret broker called Zebra."})

    output = DeepResearchWorker(kb.slug).retrieve_with_trace("Which broker does Celery use? What is Zebra?")

    assert "secret.md" not in {c.doc_name for c in output["reference"]}


def test_auto_does_not_send_a_simple_question_to_deep_research(kb):
    assert plan_for(kb.slug, "auto", ["Which broker does Celery use?"])[0].agent_type == "hybrid_agent"


def test_the_sse_api_streams_thinking_and_rounds_before_the_answer(alice_client, kb):
    from django.urls import reverse

    from chat.tests.test_api import parse_sse, post_json

    ingest(kb)
    body = {"message": "Which broker does Celery use? What does LightRAG extend?", "kb": kb.slug,
            "agent_type": "deep_research_agent"}

    response = post_json(alice_client, reverse("api-chat-stream"), body)

    types = [kind for kind, _ in parse_sse(response.streaming_content)]
    assert types.index("thinking") < types.index("round") < types.index("retrieval") < types.index("final")


def test_the_fusion_agent_runs_its_members_side_by_side_and_merges_once(kb):
    from chat.fusion_agent import FusionAgentWorker
    from chat.workers import WORKER_TYPES

    ingest(kb)
    build_graph(kb)

    output = WORKER_TYPES["fusion_agent"](kb.slug).retrieve_with_trace("Which broker does Celery use? What does LightRAG extend?")

    ids = [c.chunk_id for c in output["reference"]]
    assert len(ids) == len(set(ids)) and {"ops.md", "graph.md"} <= {c.doc_name for c in output["reference"]}
    assert output["retrieval_results"][0].mode == "fusion"

    class Failing:
        def __init__(self, kb_slug):
            pass

        def retrieve_with_trace(self, *args, **kwargs):
            raise RuntimeError("member down")

    worker = FusionAgentWorker(kb.slug, {"hybrid_agent": WORKER_TYPES["hybrid_agent"], "broken": Failing})
    output = worker.retrieve_with_trace("Which broker does Celery use?")
    assert output["reference"] and "broken: member down" in output["retrieval_results"][0].warnings



def test_the_merge_ranks_a_chunk_several_members_found_first_and_keeps_each_chunk_once():
    from chat.fusion_agent import merge_by_rank
    from knowledge.candidates import Candidate

    def chunks(*ids):
        return [Candidate(chunk_id=i, doc_id=1, doc_name="d", text=str(i)) for i in ids]

    merged = merge_by_rank({"hybrid": chunks(1, 2, 3), "graph": chunks(3, 4), "deep": chunks(5, 3)})

    assert [c.chunk_id for c in merged] == [3, 1, 5, 2, 4]  # ties keep the order first seen


def test_a_model_that_never_says_sufficient_is_stopped_after_three_rounds(kb, fake_server):
    from agentic_rag.llm.testing import FakeReply

    ingest(kb)
    server = fake_server
    llm = model_router(server)
    server.script(FakeReply(text=json.dumps({"sub_questions": ["Which broker does Celery use?"]})))
    server.reply(json.dumps({"sufficient": False, "open": [0], "follow_up_queries": {"0": ["Celery message broker"]}}))
    events = []

    output = DeepResearchWorker(kb.slug).retrieve_with_trace("Which broker?", llm=llm, on_event=lambda k, d: events.append((k, d)))

    rounds = [d for k, d in events if k == "round"]
    assert len(rounds) == MAX_ROUNDS and rounds[1]["queries"] == ["Celery message broker"]
    assert output["reference"]  # what was found is still used
    assert any("does not cover" in w for w in output["retrieval_results"][0].warnings)
    assert output["incomplete"].startswith("after 3 round(s) the evidence does not cover")


def test_an_agent_stopped_at_its_cap_leaves_a_stored_answer_flagged_partial(docs_kb, alice, fake_server, events):
    from agentic_rag.llm.testing import FakeReply
    from chat.models import Message
    from chat.pipeline import ChatOptions, ChatRequest, run_chat

    # The model never says the evidence is enough: deep research stops after its last round.
    fake_server.default = FakeReply(text='{"sufficient": false, "open": [0], "follow_up_queries": {"0": ["fuse"]}}')
    options = ChatOptions(kb_slug="alice-kb", agent_type="deep_research_agent")
    result = run_chat(ChatRequest(alice, None, "How does hybrid search fuse the rankings?", options), emit=events,
                      llm=model_router(fake_server))

    assert result.status == "done" and result.partial and "does not cover" in result.incomplete
    message = Message.objects.get(pk=result.message_id)
    assert message.partial and message.debug["incomplete"] == result.incomplete
    assert events.one("final").data["partial"] is True


def test_a_hung_model_costs_one_timeout_and_the_rules_finish_the_research(kb, fake_server, settings):
    from agentic_rag.llm.testing import FakeReply

    ingest(kb)
    settings.CHAT_AGENT_MODEL_TIMEOUT_S = 0.3
    fake_server.default = FakeReply(headers_delay_s=3)  # it never answers in time
    started = time.perf_counter()

    output = DeepResearchWorker(kb.slug).retrieve_with_trace("Which broker does Celery use? What does LightRAG extend?",
                                                             llm=model_router(fake_server))

    assert time.perf_counter() - started < 2.5  # one wait, not one per round
    assert len(fake_server.chat_requests) == 1
    assert {"ops.md", "graph.md"} <= {c.doc_name for c in output["reference"]}
    assert any("the model failed" in w for w in output["retrieval_results"][0].warnings)
