"""The runner enforces the graph's declaration: hard budgets, switches, declared branches,
and one result read from the run's events."""

from __future__ import annotations

import time

import pytest

from agentic_rag.llm.testing import FakeReply
from chat.models import Message, Trace
from chat.pipeline import ChatOptions, ChatRequest, fold_events, run_chat
from chat.pipeline.nodes import HANDLERS
from chat.pipeline.options import StageStatus
from chat.pipeline.run import Outcome
from chat.tests.conftest import model_router

pytestmark = pytest.mark.django_db

QUESTION = "How does hybrid search fuse the rankings?"


def ask(user, *, emit, llm, message=QUESTION, **options):
    return run_chat(ChatRequest(user, None, message, ChatOptions(kb_slug="alice-kb", **options)), emit=emit, llm=llm)


def test_a_slow_model_cannot_hold_rewrite_and_intent_past_their_budgets(
    docs_kb, alice, fake_server, events, settings
):
    settings.CHAT_STAGE_BUDGETS_MS = {"rewrite": 300, "intent": 200}
    # Whatever the model is asked first (a rewrite, an intent) hangs for 2 s; the answer comes at once.
    fake_server.script(FakeReply(headers_delay_s=2), FakeReply(headers_delay_s=2))
    fake_server.default = FakeReply(text="Hybrid search fuses the two rankings [1].")
    started = time.perf_counter()

    result = ask(alice, emit=events, llm=model_router(fake_server))

    assert time.perf_counter() - started < 1.5  # neither stage waited for its model
    rewrite, intent = result.stage("rewrite"), result.stage("intent")
    assert (rewrite.status, intent.status) == (StageStatus.FAILED, StageStatus.FAILED)
    assert "over its 300 ms budget" in rewrite.detail and "over its 200 ms budget" in intent.detail
    assert 200 <= rewrite.ms < 1500 and 150 <= intent.ms < 1500
    # Each degraded as the graph declares: the original query, the default KB intent.
    assert result.intent == "KB" and result.intent_method == "fallback"
    assert result.status == "done" and "fuses the two rankings" in result.answer
    debug = Message.objects.get(pk=result.message_id).debug
    assert debug["rewrite"]["method"] == "fallback" and debug["rewrite"]["query"] == QUESTION
    time.sleep(max(0.0, started + 2.3 - time.perf_counter()))  # the cut-off calls end while the test still logs


def test_a_stage_that_finishes_after_its_budget_changes_nothing(docs_kb, alice, extractive, events, settings,
                                                                monkeypatch):
    settings.CHAT_STAGE_BUDGETS_MS = {"intent": 100}
    late = {}

    def slow_intent(run):
        time.sleep(0.4)
        late["outcome"] = HANDLERS_BEFORE["intent"](run)
        return late["outcome"]

    HANDLERS_BEFORE = dict(HANDLERS)
    monkeypatch.setitem(HANDLERS, "intent", slow_intent)

    result = ask(alice, emit=events, llm=extractive)
    time.sleep(0.5)  # the cut-off thread has finished by now

    assert late["outcome"].found["intent"].method == "rules"  # it did finish, late
    assert result.intent_method == "fallback" and [e.data["method"] for e in events.of("intent")] == ["fallback"]
    assert Trace.objects.get(trace_id=result.trace_id).spans.get(name="intent").status == "degraded"


def test_a_switched_off_stage_is_skipped_by_the_runner(docs_kb, alice, extractive, events, monkeypatch):
    monkeypatch.setitem(HANDLERS, "rewrite", lambda run: pytest.fail("a switched-off stage ran"))

    result = ask(alice, emit=events, llm=extractive, enable_query_rewrite=False)

    assert result.stage("rewrite").status == StageStatus.SKIPPED and result.status == "done"
    assert "rewrite" not in [e.stage for e in events.of("stage_start")]


def test_a_shortcut_the_graph_does_not_declare_fails_the_run(docs_kb, alice, extractive, events, monkeypatch):
    monkeypatch.setitem(HANDLERS, "guide", lambda run: Outcome(StageStatus.SHORTCUT, "made up", "C"))

    result = ask(alice, emit=events, llm=extractive)

    assert result.status == "failed" and result.error_code == "internal"
    assert "does not declare" in result.error and events.types()[-1] == "error"


def test_the_result_is_the_fold_of_the_events_the_client_saw(docs_kb, alice, extractive, events):
    result = ask(alice, emit=events, llm=extractive)

    assert fold_events(events) == result
    assert result.message_id == Message.objects.filter(role="assistant").get().pk
    assert result.tools == () and result.evidence and result.routing["method"] == "requested"


def test_a_client_that_leaves_still_gets_a_whole_result(docs_kb, alice, extractive):
    def gone(event):
        if event.type == "token":
            raise ConnectionError("the socket closed")

    result = ask(alice, emit=gone, llm=extractive)

    # The run stops streaming to it, but keeps every event for the stored exchange and the result.
    assert result.trace_id and result.message_id is not None and result.status == "cancelled"

