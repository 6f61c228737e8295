"""Every node that can wait has a timeout (settings.CHAT_NODE_TIMEOUTS_S) the runner keeps: a
slow search, memory, answer stream or citation check degrades as the graph says, the events
and the trace name the node and its fallback, and the run answers without waiting for it.

These runs commit their data (transaction=True): only then may a node's work leave the
request's thread, so that the runner can stop waiting for it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from agentic_rag.llm import LLMConfig, build_llm
from chat.models import Message, Trace
from chat.pipeline import ChatOptions, ChatRequest, run_chat
from chat.pipeline import results as results_module
from chat.pipeline.nodes import HANDLERS
from chat.pipeline.options import StageStatus
from chat.pipeline.timeouts import node_timeout_s
from knowledge.retrieval import RetrievalParams, retrieve

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "How does hybrid search fuse the rankings?"


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Lets the cut-off collaborators finish when the test is done (they wait on it)."""
    event = threading.Event()
    yield event
    event.set()
    time.sleep(0.2)  # their threads end before the database is flushed


def ask(user, events, **kwargs):
    return run_chat(ChatRequest(user, None, QUESTION, ChatOptions(kb_slug="alice-kb")), emit=events, **kwargs)


def timeouts(settings, **seconds: float) -> None:
    settings.CHAT_NODE_TIMEOUTS_S = {**settings.CHAT_NODE_TIMEOUTS_S, **seconds}


class SlowStream:
    """The extractive router, whose answer stream says `first` and then hangs until released."""

    within = None  # not a router to bind to a request's budget: the runner keeps this object

    def __init__(self, release: threading.Event, first: str | None) -> None:
        self._llm = build_llm(LLMConfig())
        self._release = release
        self._first = first

    def __getattr__(self, name: str):
        return getattr(self._llm, name)

    def stream(self, messages, options) -> Iterator[str]:
        if self._first is not None:
            yield self._first
        self._release.wait(10)
        yield " and this came too late"


def test_a_search_past_its_timeout_answers_not_found_at_once(docs_kb, alice, extractive, events, settings, release):
    timeouts(settings, search=0.3)

    def hung_search(query, kb, params=RetrievalParams(), **kwargs):
        release.wait(10)
        return retrieve(query, kb, params)

    started = time.perf_counter()
    result = ask(alice, events, llm=extractive, retriever=hung_search)

    assert time.perf_counter() - started < 2.5
    assert result.status == "done" and result.shortcut == "C" and "ran out of time" in result.answer
    timeout = events.one("timeout")
    assert timeout.stage == "retrieve" and timeout.data["node"] == "search"
    assert timeout.data["fallback"] == "the tools' results alone" and timeout.data["timeout_ms"] >= 300
    span = Trace.objects.get(trace_id=result.trace_id).spans.get(name="kb")
    assert span.status == "degraded" and "timed out after 0.3 s" in span.error


def test_a_retrieve_node_past_its_timeout_degrades_to_not_found(docs_kb, alice, extractive, events, settings,
                                                                 release):
    timeouts(settings, search=30, retrieve=0.3)

    def hung_search(query, kb, params=RetrievalParams(), **kwargs):
        release.wait(10)
        return retrieve(query, kb, params)

    started = time.perf_counter()
    result = ask(alice, events, llm=extractive, retriever=hung_search)

    assert time.perf_counter() - started < 2.5
    assert result.status == "done" and result.shortcut == "C"
    assert result.stage("retrieve").status == StageStatus.FAILED
    end = next(e for e in events.of("stage_end") if e.stage == "retrieve")
    assert end.data["timed_out"] is True and end.data["fallback"] == "not found (shortcut C)"
    assert events.one("timeout").data == {"node": "retrieve", "timeout_ms": 300, "fallback": "not found (shortcut C)"}
    release.set()
    time.sleep(0.3)
    # What the cut-off node found later reached neither the client nor the run.
    assert events.types().count("retrieval") == 0 and events.types()[-1] == "final"


def test_an_answer_stream_past_its_timeout_keeps_what_it_said(docs_kb, alice, events, settings, release):
    timeouts(settings, generate=0.5)

    started = time.perf_counter()
    result = ask(alice, events, llm=SlowStream(release, "Hybrid search fuses both rankings"))
    release.set()
    time.sleep(0.2)

    assert time.perf_counter() - started < 3
    assert result.status == "done" and result.partial and "ran over its time" in result.incomplete
    assert result.answer == "Hybrid search fuses both rankings"
    assert "too late" not in "".join(e.data["text"] for e in events.of("token"))
    assert events.one("timeout").data["node"] == "generate"
    span = Trace.objects.get(trace_id=result.trace_id).spans.get(name="generate")
    assert span.status == "degraded" and "over its 500 ms" in span.error


def test_an_answer_stream_silent_past_its_timeout_is_answered_by_the_extractive_reader(
    docs_kb, alice, events, settings, release
):
    timeouts(settings, generate=0.5)

    result = ask(alice, events, llm=SlowStream(release, None))

    assert result.status == "done" and not result.partial and result.citations
    assert "too late" not in result.answer and result.stage("generate").status == StageStatus.FAILED
    assert "extractive reader" in result.stage("generate").detail


def test_a_memory_stage_past_its_timeout_goes_on_without_history(docs_kb, alice, extractive, events, settings,
                                                                   monkeypatch, release):
    timeouts(settings, memory=0.2)
    memory = HANDLERS["memory"]

    def slow_memory(run):
        release.wait(10)
        return memory(run)

    monkeypatch.setitem(HANDLERS, "memory", slow_memory)
    result = ask(alice, events, llm=extractive)

    assert result.status == "done" and result.citations
    assert result.stage("memory").status == StageStatus.FAILED and "over its 200 ms" in result.stage("memory").detail
    assert events.one("timeout").data["fallback"] == "empty history"


def test_a_citation_check_past_its_timeout_shows_the_citations_unverified(docs_kb, alice, extractive, events,
                                                                           settings, monkeypatch, release):
    timeouts(settings, verify=0.2)
    check = results_module.check_citations

    def slow_check(*args, **kwargs):
        release.wait(10)
        return check(*args, **kwargs)

    monkeypatch.setattr(results_module, "check_citations", slow_check)
    result = ask(alice, events, llm=extractive)

    assert result.status == "done" and result.citations
    assert all(not v["verified"] and v["reason"] == "the check ran out of time" for v in result.verification)
    assert events.one("timeout").data == {"node": "verify", "timeout_ms": events.one("timeout").data["timeout_ms"],
                                          "fallback": "citations shown unverified"}


def test_every_node_that_waits_has_a_timeout_from_the_settings():
    for name in ("memory", "rewrite", "intent", "search", "tools", "workers", "agent_model", "retrieve",
                 "generate", "verify"):
        assert node_timeout_s(name) and node_timeout_s(name) > 0, name


@pytest.mark.django_db  # inside the test's transaction: the search must see its uncommitted KB
def test_inside_a_transaction_a_slow_search_stays_on_its_thread_and_its_overrun_is_noted(
    docs_kb, alice, extractive, events, settings
):
    timeouts(settings, search=0.1)

    def slow_search(query, kb, params=RetrievalParams(), **kwargs):
        time.sleep(0.3)
        return retrieve(query, kb, params)

    result = ask(alice, events, llm=extractive, retriever=slow_search)

    assert result.status == "done" and result.citations and not events.of("timeout")
    debug = Message.objects.get(pk=result.message_id).debug
    assert "the KB search ran over its 0.1 s timeout" in debug["warnings"]
