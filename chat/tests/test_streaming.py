"""iter_chat and aiter_chat: the pipeline in a worker thread, events handed over as they come."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async

from agentic_rag.llm import LLMUnavailable, ModelRouter
from agentic_rag.llm.testing import FakeReply
from chat.models import Message, Trace
from chat.pipeline import ChatOptions, ChatRefused, ChatRequest, aiter_chat, iter_chat
from chat.tests.conftest import model_router

pytestmark = pytest.mark.django_db(transaction=True)


def request(user, message="How does hybrid search fuse the rankings?", **options):
    return ChatRequest(user, None, message, ChatOptions(kb_slug="alice-kb", **options))


def wait_for(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_it_yields_the_events_of_a_run_from_a_worker_thread(docs_kb, alice, extractive):
    events = list(iter_chat(request(alice), llm=extractive))

    types = [event.type for event in events]
    assert types[0] == "session" and types[-1] == "final" and "token" in types
    trace_id = events[-1].data["trace_id"]
    assert Trace.objects.filter(trace_id=trace_id, status="done").exists()


def test_it_refuses_bad_input_before_any_event(docs_kb, alice):
    with pytest.raises(ChatRefused):
        iter_chat(request(alice, "   "))


def test_it_stores_a_partial_answer_when_the_iterator_is_closed(docs_kb, alice, fake_server):
    words = tuple(f"word{i} " for i in range(40))
    fake_server.default = FakeReply(chunks=words, token_delay_s=0.05)
    stream = iter_chat(request(alice, enable_query_rewrite=False), llm=model_router(fake_server))

    for event in stream:
        if event.type == "token" and event.data["text"] == "word1 ":
            break
    stream.close()

    wait_for(lambda: Message.objects.filter(role="assistant").exists())
    message = Message.objects.get(role="assistant")
    assert message.partial and message.content.startswith("word0 word1 ") and len(message.content) < 6 * 40
    assert message.trace.status == "cancelled"


async def test_it_streams_events_to_async_consumers(docs_kb, alice, extractive):
    events = [event async for event in aiter_chat(request(alice), llm=extractive)]

    assert events[0].type == "session" and events[-1].type == "final"
    assert "".join(e.data["text"] for e in events if e.type == "token") == events[-1].data["response"]
    stored = await sync_to_async(Message.objects.filter(role="assistant").count)()
    assert stored == 1


async def test_it_raises_a_refusal_on_the_first_async_step(docs_kb, bob):
    with pytest.raises(ChatRefused, match="no knowledge base 'alice-kb' you can read"):
        async for _ in aiter_chat(request(bob)):
            pass


class _BrokenReader:
    """A fallback that cannot answer either."""

    name = "broken-reader"

    def stream(self, messages, options):
        raise LLMUnavailable("the reader is broken too", provider=self.name)


def test_it_ends_with_an_error_event_when_the_model_stalls_and_nothing_can_finish_the_answer(
    docs_kb, alice, fake_server
):
    fake_server.default = FakeReply(chunks=("one ", "two ", "three "), stall_after=1, stall_s=30)
    stalling = model_router(fake_server, chunk_s=0.3)
    llm = ModelRouter(stalling.providers, fallback=_BrokenReader())

    events = list(iter_chat(request(alice, enable_query_rewrite=False), llm=llm))

    assert events[-1].type == "error" and events[-1].data["code"] == "llm_interrupted"
    message = Message.objects.get(role="assistant")
    assert message.partial and message.content == "one "
