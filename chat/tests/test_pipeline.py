"""The pipeline end to end: answers, shortcuts, degrade paths, streaming models, traces."""

from __future__ import annotations

import time

import pytest

from agentic_rag.llm.extractive import MODEL_STOPPED
from agentic_rag.llm.json_reply import CANNED_MESSAGE
from agentic_rag.llm.router import CUT_MARK
from agentic_rag.llm.testing import FakeReply
from chat.models import Conversation, Message, Span, Trace
from chat.pipeline import ChatOptions, ChatRequest, run_chat
from chat.pipeline.tools import Tool, ToolRegistry
from chat.tests.conftest import DOCS, ingest_docs, model_router
from chat.tests.test_intent import DictCache
from chat.tests.test_tracing import settings_handler
from knowledge.models import KnowledgeBase

pytestmark = pytest.mark.django_db

STAGES = ["memory", "rewrite", "intent", "guide", "system", "retrieve", "prompt", "generate"]
QUESTION = "How does hybrid search fuse the rankings?"


def ask(user, message=QUESTION, *, emit, kb="alice-kb", session=None, **kwargs):
    options = kwargs.pop("options", None) or ChatOptions(kb_slug=kb)
    return run_chat(ChatRequest(user, session, message, options), emit=emit, **kwargs)


def test_it_answers_from_the_kb_with_cited_verified_quotes(docs_kb, alice, extractive, events):
    result = ask(alice, emit=events, llm=extractive)

    assert result.status == "done" and result.shortcut is None and result.intent == "KB"
    assert "Hybrid search fuses the BM25 ranking and the vector ranking" in result.answer
    assert result.citations and all(c["doc"] == "hybrid.md" for c in result.citations if c["n"] == 1)
    assert result.verification and all(v["verified"] for v in result.verification)
    assert [s.name for s in result.stages] == STAGES
    assert all(s.status == "done" for s in result.stages)


def test_it_emits_the_events_of_the_contract_in_order(docs_kb, alice, extractive, events):
    result = ask(alice, emit=events, llm=extractive)

    types = events.types()
    assert types[:2] == ["session", "route"] and types[-1] == "final"
    assert types.index("intent") < types.index("retrieval") < types.index("first_token") < types.index("token")
    ended = [e.stage for e in events.of("stage_end")]
    assert ended[0] == "memory" and set(ended[1:3]) == {"rewrite", "intent"} and ended[3:] == STAGES[3:]
    assert events.one("session").data == {
        "session_id": result.session_id, "conversation_id": result.conversation_id, "trace_id": result.trace_id}
    assert events.one("route").data["kb_prefix"] == "alice-kb"
    assert events.one("intent").data == {
        "intents": [{"name": "KB", "confidence": 0.7, "tool": "", "topic": ""}], "method": "rules"}
    retrieval = events.one("retrieval").data
    assert retrieval["count"] == len(retrieval["evidence"]) >= 1
    first = retrieval["evidence"][0]
    assert set(first) >= {"n", "source", "doc", "chunk_id", "section", "score", "preview", "chars", "url"}
    assert first["n"] == 1 and first["source"] == "KB" and first["url"].endswith(f"#chunk-{first['chunk_id']}")
    assert events.tokens() == result.answer
    assert {c.data["n"] for c in events.of("citation")} <= {e["n"] for e in retrieval["evidence"]}
    final = events.one("final")
    assert final.ms == result.total_ms and final.data["trace_id"] == result.trace_id
    assert final.data["response"] == result.answer and final.data["shortcut"] is None
    assert set(final.data) >= {"trace_id", "total_ms", "response", "citations", "shortcut", "verification"}
    assert events.one("first_token").ms == result.first_token_ms > 0


def test_it_stores_the_conversation_messages_trace_and_spans(docs_kb, alice, extractive, events):
    result = ask(alice, emit=events, llm=extractive, session="s-1")

    conversation = Conversation.objects.get(user=alice, session_id="s-1")
    assert conversation.kb == docs_kb and conversation.title == QUESTION
    question, answer = conversation.messages.all()
    assert (question.role, question.content) == ("user", QUESTION)
    assert answer.role == "assistant" and answer.content == result.answer and not answer.partial
    assert answer.citations == list(result.citations) and answer.pk == result.message_id
    assert answer.debug["evidence"][0]["text"] and answer.debug["trace_id"] == result.trace_id
    trace = Trace.objects.get(trace_id=result.trace_id)
    assert answer.trace == question.trace == trace and trace.conversation == conversation
    assert (trace.route, trace.intent, trace.shortcut, trace.status) == ("alice-kb", "KB", "", "done")
    assert trace.total_ms == result.total_ms and trace.first_token_ms == result.first_token_ms
    assert trace.verification == list(result.verification)
    spans = {span.name: span for span in trace.spans.all()}
    assert set(STAGES) | {"kb", "llm", "verify", "kb.bm25", "kb.vector", "kb.gate"} <= set(spans)
    assert spans["kb"].kind == "retrieval" and spans["llm"].kind == "llm" and spans["memory"].kind == "stage"
    assert spans["llm"].output == "".join(events.tokens()) and "<documents>" in spans["llm"].input
    assert all(span.start_ms <= trace.total_ms for span in spans.values())


def test_it_cuts_span_text_to_the_setting(docs_kb, alice, extractive, events, settings):
    settings.CHAT_SPAN_MAX_CHARS = 50

    result = ask(alice, emit=events, llm=extractive)

    assert max(len(span.input) for span in Span.objects.filter(trace__trace_id=result.trace_id)) == 50


def test_it_continues_a_conversation_with_its_history(docs_kb, alice, extractive, events):
    ask(alice, "What is hybrid search?", emit=events, llm=extractive, session="s-2")
    events.clear()

    result = ask(alice, "How does it weigh the vector score?", emit=events, llm=extractive, session="s-2")

    assert events.stage_end("memory")["detail"] == "1 earlier turns"
    assert "hybrid search" in events.stage_end("rewrite")["detail"]
    assert result.conversation_id == Conversation.objects.get(session_id="s-2").pk
    assert Message.objects.filter(conversation_id=result.conversation_id).count() == 4


# --- shortcuts -------------------------------------------------------------------------------


def test_it_asks_a_clarifying_question_for_a_vague_message_shortcut_a(docs_kb, alice, extractive, events):
    result = ask(alice, "它呢？", emit=events, llm=extractive)

    assert result.shortcut == "A" and result.answer.startswith("能再具体一点吗")
    assert events.stage_end("guide") == {"status": "shortcut", "shortcut": "A", "detail": "top confidence 0.40 < 0.70"}
    assert [events.stage_end(s)["status"] for s in STAGES[4:]] == ["skipped"] * 4
    assert "retrieval" not in events.types() and events.of("final")[0].data["shortcut"] == "A"
    assert Trace.objects.get(trace_id=result.trace_id).shortcut == "A"
    assert Message.objects.get(pk=result.message_id).content == result.answer


def test_it_runs_every_tool_a_message_names_instead_of_asking_which(docs_kb, alice, extractive, events):
    tools = ToolRegistry(tuple(
        Tool(name, f"{name} for tests", handler=lambda p, name=name: f"The {name} tool answered.",
             extract=lambda m: {})
        for name in ("weather", "currency")))

    result = ask(alice, "weather in Paris and the USD exchange rate", emit=events, llm=extractive, tools=tools)

    assert result.shortcut is None and set(result.tools) == {"currency", "weather"}
    assert "The weather tool answered." in result.answer and "The currency tool answered." in result.answer
    assert events.stage_end("guide")["detail"] == "the intent is clear"


def test_it_answers_a_greeting_directly_shortcut_b(docs_kb, alice, extractive, events):
    result = ask(alice, "你好", emit=events, llm=extractive)

    assert result.shortcut == "B" and result.intent == "SYSTEM" and result.answer.startswith("你好！")
    assert events.stage_end("system")["shortcut"] == "B"
    assert [events.stage_end(s)["status"] for s in ("retrieve", "prompt", "generate")] == ["skipped"] * 3
    assert events.tokens() == result.answer and "first_token" in events.types()


def test_it_says_so_when_the_kb_has_nothing_shortcut_c(kb, alice, extractive, events):
    result = ask(alice, QUESTION, emit=events, llm=extractive)

    assert result.shortcut == "C" and "the knowledge base has no ready documents" in result.answer
    assert events.stage_end("retrieve")["shortcut"] == "C"
    assert events.one("retrieval").data == {"count": 0, "evidence": [], "reason": "the knowledge base has no ready documents"}
    assert [events.stage_end(s)["status"] for s in ("prompt", "generate")] == ["skipped", "skipped"]
    assert not Span.objects.filter(trace__trace_id=result.trace_id, name="llm").exists()


def test_it_says_so_when_no_kb_is_selected_shortcut_c(alice, extractive, events):
    result = ask(alice, QUESTION, emit=events, llm=extractive, kb=None)

    assert result.shortcut == "C" and result.route is None
    assert "cannot be answered offline" in result.answer and "LLM_PROVIDERS" in result.answer
    assert events.one("route").data["method"] == "none"


def test_with_a_model_a_general_question_gets_a_generated_answer_without_sources(alice, fake_server, events):
    from agentic_rag.llm.testing import FakeReply
    from chat.tests.conftest import model_router

    fake_server.default = FakeReply(text="This is general knowledge, not from your documents: Paris.")
    result = ask(alice, "What is the capital of France?", emit=events, llm=model_router(fake_server), kb=None)

    assert result.shortcut != "C" and "Paris" in result.answer and not result.citations
    prompt = fake_server.chat_requests[-1].messages
    assert "<mode>GENERAL</mode>" in prompt[-1]["content"]
    assert "does not come from the user's documents" in prompt[0]["content"]


# --- degrade paths (seed 001 §10) ---------------------------------------------------------------


def test_it_keeps_the_original_query_when_rewrite_fails(docs_kb, alice, extractive, events, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("rewrite exploded")

    monkeypatch.setattr("chat.pipeline.nodes.rewrite_query", broken)

    result = ask(alice, f"请问 {QUESTION}", emit=events, llm=extractive)

    assert events.stage_end("rewrite")["status"] == "failed"
    assert "rewrite exploded" in events.stage_end("rewrite")["detail"]
    assert result.status == "done" and result.citations
    span = Span.objects.get(trace__trace_id=result.trace_id, name="rewrite")
    assert span.status == "degraded" and "rewrite exploded" in span.error


def test_it_falls_back_to_the_kb_intent_when_intent_fails(docs_kb, alice, extractive, events, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("intent exploded")

    monkeypatch.setattr("chat.pipeline.nodes.classify_intent", broken)

    result = ask(alice, "你好", emit=events, llm=extractive)  # would be shortcut B

    assert events.stage_end("intent")["status"] == "failed"
    assert events.one("intent").data["method"] == "fallback" and result.intent == "KB"
    # searched as a KB question (no document answers a greeting: shortcut C), not greeted (B)
    assert events.stage_end("retrieve")["status"] != "skipped"
    assert result.shortcut != "B" and result.status == "done"


def test_it_continues_without_evidence_when_the_search_fails(docs_kb, alice, extractive, events):
    def broken(query, kb, params):
        raise ConnectionError("index unreachable")

    result = ask(alice, emit=events, llm=extractive, retriever=broken)

    assert events.stage_end("retrieve") == {"status": "failed", "shortcut": "C", "detail": "the search failed"}
    assert result.shortcut == "C" and "the search failed" in result.answer and result.status == "done"
    span = Span.objects.get(trace__trace_id=result.trace_id, name="kb")
    assert span.status == "failed" and "index unreachable" in span.error


def test_it_keeps_the_fused_order_when_rerank_fails(docs_kb, alice, extractive, events, monkeypatch):
    def broken(self, query, candidates):
        raise RuntimeError("reranker exploded")

    monkeypatch.setattr("knowledge.rerank.FiveFactorReranker.rerank", broken)
    docs_kb.retrieval_settings = {"rerank": True}  # untuned hashing KBs do not rerank
    docs_kb.save(update_fields=["retrieval_settings"])
    ingest_docs(docs_kb, {f"extra-{i}.md": f"# {i}\n\nHybrid search note {i} about fusion." for i in range(4)})

    result = ask(alice, emit=events, llm=extractive)

    assert result.status == "done" and result.citations
    assert "rerank failed" in events.stage_end("retrieve")["detail"]
    assert Span.objects.filter(trace__trace_id=result.trace_id, name="kb.rerank", status="degraded").exists()


def test_it_honours_the_switches_of_a_request(docs_kb, alice, extractive, events):
    options = ChatOptions(kb_slug="alice-kb", enable_query_rewrite=False, enable_source_citation=False, top_k=1)

    result = ask(alice, f"请问 {QUESTION}", emit=events, llm=extractive, options=options)

    assert events.stage_end("rewrite") == {"status": "skipped", "detail": "switched off (enable_query_rewrite)"}
    assert events.one("retrieval").data["count"] == 1
    assert result.citations == () and result.verification == ()


# --- streaming models ---------------------------------------------------------------------------


def test_it_streams_a_models_answer_without_its_thinking(docs_kb, alice, fake_server, events):
    answer = ("Hybrid search fuses the BM25 ranking and the vector ranking with reciprocal rank fusion. [1] "
              "It was invented in 1850. [1]")
    fake_server.default = FakeReply(chunks=("<thi", "nk>weigh the options</th", "ink>\n", answer[:30], answer[30:]))
    options = ChatOptions(kb_slug="alice-kb", enable_query_rewrite=False)

    result = ask(alice, emit=events, llm=model_router(fake_server), options=options)

    assert events.tokens() == result.answer == answer
    assert [v["verified"] for v in result.verification] == [True, False]
    stream = fake_server.chat_requests[-1]
    assert stream.body["stream"] is True and stream.body["temperature"] == 0.1
    prompt = "\n".join(m["content"] for m in stream.messages)
    assert "<documents>" in prompt and f"<question>{QUESTION}</question>" in prompt
    assert "fake-model" not in result.answer and events.stage_end("generate")["detail"].startswith("openai")


def test_a_model_that_stalls_mid_answer_is_finished_by_the_reader_and_stored_as_partial(
    docs_kb, alice, fake_server, events
):
    fake_server.default = FakeReply(chunks=("Hybrid ", "search ", "fuses ", "rankings."), stall_after=2, stall_s=30)
    options = ChatOptions(kb_slug="alice-kb", enable_query_rewrite=False)

    result = ask(alice, emit=events, llm=model_router(fake_server, chunk_s=0.3), options=options)

    assert result.status == "done" and result.partial and events.types()[-1] == "final"
    assert events.tokens() == result.answer
    assert result.answer.startswith("Hybrid search " + CUT_MARK + MODEL_STOPPED["en"])
    assert "Hybrid search fuses the BM25 ranking" in result.answer and "rankings." not in result.answer
    assert "stopped mid-answer, finished by extractive" in events.stage_end("generate")["detail"]
    message = Message.objects.get(pk=result.message_id)
    assert message.partial and message.content == result.answer
    assert message.debug["incomplete"].startswith("the language model stopped mid-answer")
    trace = Trace.objects.get(trace_id=result.trace_id)
    assert trace.status == "done"
    assert Span.objects.get(trace=trace, name="generate").status == "ok"


def test_it_stores_a_partial_answer_when_the_client_goes_away(docs_kb, alice, extractive, events):
    result = ask(alice, emit=events, llm=extractive, cancelled=lambda: len(events.of("token")) >= 3)

    assert result.status == "cancelled" and result.partial and len(events.of("token")) == 3
    assert events.types()[-1] == "final" and events.of("final")[0].data["status"] == "cancelled"
    message = Message.objects.get(pk=result.message_id)
    assert message.partial and message.content == events.tokens()
    assert Trace.objects.get(trace_id=result.trace_id).status == "cancelled"


def test_it_stops_before_generating_when_cancelled_early(docs_kb, alice, extractive, events):
    result = ask(alice, emit=events, llm=extractive, cancelled=lambda: True)

    assert result.status == "cancelled" and result.message_id is None and "token" not in events.types()
    assert Message.objects.filter(conversation_id=result.conversation_id).count() == 1  # the question only


def test_it_treats_a_failing_event_receiver_as_a_client_gone(docs_kb, alice, extractive):
    seen = []

    def emit(event):
        seen.append(event.type)
        if event.type == "token":
            raise BrokenPipeError("socket closed")

    result = ask(alice, emit=emit, llm=extractive)

    assert result.status == "cancelled" and seen.count("token") == 1 and seen[-1] == "token"


# --- logs ----------------------------------------------------------------------------------------


def test_it_logs_every_line_of_a_request_with_its_trace_id(docs_kb, alice, extractive, events):
    import logging

    handler, stream = settings_handler()
    logger = logging.getLogger("chat.pipeline")
    logger.addHandler(handler)
    try:
        result = ask(alice, emit=events, llm=extractive)
    finally:
        logger.removeHandler(handler)

    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and all(f"[{result.trace_id}]" in line for line in lines)


def test_it_reads_a_kb_shared_publicly_but_never_anothers_private_documents(docs_kb, alice, bob, extractive, events):
    bobs = KnowledgeBase.objects.create(slug="bobs", name="Bob's", owner=bob, visibility="public")
    ingest_docs(bobs, {"bob.md": "# Bob\n\nBob's hybrid search secret: fuse with a coin toss."})

    result = ask(alice, emit=events, llm=extractive, kb="bobs")

    assert {c["doc"] for c in result.citations} <= {"bob.md"}
    assert all(e["doc"] not in DOCS for e in events.one("retrieval").data["evidence"])


def test_it_resolves_a_follow_up_against_the_rewritten_earlier_question(docs_kb, alice, extractive, events):
    ask(alice, "什么是混合检索？", emit=events, llm=extractive, session="s-3")
    ask(alice, "它的权重是多少？", emit=events, llm=extractive, session="s-3")
    events.clear()

    ask(alice, "那向量检索呢？", emit=events, llm=extractive, session="s-3")

    assert events.stage_end("rewrite")["detail"] == "rules: 向量检索的权重是多少？"
    stored = Message.objects.filter(role="user", content="它的权重是多少？").get()
    assert stored.debug == {"query": "混合检索的权重是多少？"}


def test_it_says_not_found_instead_of_answering_from_weak_evidence(docs_kb, alice, extractive, events):
    result = ask(alice, "What is the boiling point of ethanol?", emit=events, llm=extractive)

    assert result.shortcut == "C" and result.status == "done"
    assert "found nothing in the knowledge base" in result.answer
    assert "Alice's KB" in result.answer
    assert not result.citations and not result.evidence


def test_a_question_naming_what_the_kb_never_mentions_is_not_found(docs_kb, alice, extractive, events):
    # Both share "hybrid search" and "BM25" with hybrid.md; only one names what the KB holds.
    named = ask(alice, "Does hybrid search run BM25 on OpenSearch?", emit=events, llm=extractive)
    held = ask(alice, "Does hybrid search fuse the BM25 ranking?", emit=events, llm=extractive)
    chinese = ask(alice, "混凝土结构验收为什么要用 Kafka？", emit=events, llm=extractive)

    assert named.shortcut == "C" and "never mentions OpenSearch" in named.answer
    assert not named.citations and not named.evidence
    assert held.shortcut is None and held.citations
    assert chinese.shortcut == "C" and "知识库里没有提到 Kafka" in chinese.answer


def test_the_answer_gate_can_be_switched_off(docs_kb, alice, extractive, events):
    # One word in common ("fused"): found, but far too little of the question to answer it.
    question = "What is the boiling point of fused ethanol?"
    gated = ask(alice, question, emit=events, llm=extractive)
    options = ChatOptions(kb_slug="alice-kb", min_evidence_coverage=0.0)
    result = ask(alice, question, emit=events, llm=extractive, options=options)

    assert gated.shortcut == "C"
    assert result.shortcut is None and result.evidence


# --- a model that fails: the chat ends cleanly, on the extractive reader or with a partial answer ---


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (FakeReply(status=500), "a server error"),
        (FakeReply(status=429, retry_after="120"), "rate limited for longer than the chat can wait"),
        (FakeReply(headers_delay_s=3), "no answer within the first-token timeout"),
        (FakeReply(cut_after=0), "a connection dropped before the first token"),
    ],
)
def test_a_model_that_fails_before_its_first_token_leaves_the_answer_to_the_reader(
    docs_kb, alice, fake_server, events, reply, why
):
    fake_server.default = reply
    options = ChatOptions(kb_slug="alice-kb", enable_query_rewrite=False)
    started = time.monotonic()

    result = ask(alice, emit=events, llm=model_router(fake_server, first_token_s=1), options=options)

    assert time.monotonic() - started < 8, why  # each model call gives up at its own timeout
    assert result.status == "done" and not result.partial, why
    assert "Hybrid search fuses the BM25 ranking" in result.answer, why
    assert "extractive" in events.stage_end("generate")["detail"], why
    message = Message.objects.get(pk=result.message_id)
    assert message.content == result.answer and not message.partial


def test_a_stream_cut_half_way_keeps_what_was_written_and_the_reader_finishes_it(
    docs_kb, alice, fake_server, events
):
    fake_server.default = FakeReply(chunks=("Hybrid ", "search ", "fuses ", "rankings."), cut_after=2)
    options = ChatOptions(kb_slug="alice-kb", enable_query_rewrite=False)

    result = ask(alice, emit=events, llm=model_router(fake_server), options=options)

    assert result.status == "done" and result.partial
    assert result.answer.startswith("Hybrid search " + CUT_MARK + MODEL_STOPPED["en"])
    message = Message.objects.get(pk=result.message_id)
    assert message.partial and message.content == result.answer


def test_a_model_that_replies_only_reasoning_fails_and_nothing_of_it_is_kept(docs_kb, alice, bob, fake_server, events):
    # Every call (rewrite, intent, answer) gets a think block that never closes.
    fake_server.default = FakeReply(text="<think>The user asks about fusion; I should first consider whether")
    cache = DictCache()

    result = ask(alice, emit=events, llm=model_router(fake_server), cache=cache)

    assert result.status == "done" and "Hybrid search fuses the BM25 ranking" in result.answer
    assert "language model failed" in result.answer and "no language model" not in result.answer
    assert "extractive" in events.stage_end("generate")["detail"]
    rewrite = events.stage_end("rewrite")
    assert rewrite["detail"].startswith("fallback") and CANNED_MESSAGE not in rewrite["detail"]
    assert QUESTION.rstrip("?") in rewrite["detail"]  # searched for what was asked
    assert not cache  # a failed call is cached for no one

    # Bob asks the same once the model answers again: he gets the model's rewrite, not a leftover.
    docs_kb.visibility = "public"
    docs_kb.save()
    fake_server.default = FakeReply(text='{"query": "How does hybrid search fuse BM25 and vector rankings?"}')
    ask(bob, emit=(later := type(events)()), llm=model_router(fake_server), cache=cache)
    assert later.stage_end("rewrite")["detail"].startswith("llm: How does hybrid search fuse BM25")
