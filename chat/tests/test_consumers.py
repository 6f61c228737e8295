"""The chat websocket: who may connect, and the fragments a question streams back."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from agentic_rag.asgi import application
from agentic_rag.llm.testing import FakeReply
from agentic_rag.tests.llm_support import configured_as_the_model
from chat.models import Message

from .web_factories import ingest, session_cookie, wait_for_answer

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "How do we review incidents?"
HTMX_HEADERS = {"HX-Request": "true", "HX-Trigger": "chat-form", "HX-Current-URL": "http://127.0.0.1/"}


def headers_for(cookie: str | None = None) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", b"http://127.0.0.1")]
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    return headers


@pytest.fixture
def alice_headers(alice):
    return headers_for(session_cookie(alice))


@pytest.fixture
def ready_kb(kb, alice):
    ingest(kb, alice)
    return kb


@pytest.fixture
def slow_llm(settings):
    """A model that streams one word every 50 ms, served by a fake OpenAI-compatible server."""
    # A model that answers every request with the same stream cannot rewrite the query.
    settings.CHAT_ENABLE_QUERY_REWRITE = False
    reply = FakeReply(text=" ".join(f"word{i}" for i in range(200)), token_delay_s=0.05)
    with configured_as_the_model(settings, reply) as server:
        yield server


async def connect(headers) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def ask(communicator, message: str, **fields) -> None:
    payload = {"message": message, "session_id": "", "kb": "auto", "HEADERS": HTMX_HEADERS, **fields}
    await communicator.send_to(text_data=json.dumps(payload))


async def receive_until(communicator, pattern: str, timeout: float = 10) -> list[str]:
    """Collect fragments until one matches pattern (the final answer or an error)."""
    fragments = []
    while True:
        fragment = await communicator.receive_from(timeout=timeout)
        fragments.append(fragment)
        if re.search(pattern, fragment):
            return fragments


async def test_it_refuses_anonymous_users():
    communicator = WebsocketCommunicator(application, "/ws/chat/", headers=headers_for())
    connected, _ = await communicator.connect()
    assert not connected


async def test_it_streams_stage_cards_tokens_evidence_and_the_final_answer(alice_headers, ready_kb):
    communicator = await connect(alice_headers)
    await ask(communicator, QUESTION, kb="alice-kb")
    fragments = await receive_until(communicator, r'hx-swap-oob="outerHTML:#turn-')
    await communicator.disconnect()

    turn_fragment = fragments[0]
    assert 'hx-swap-oob="beforeend:#messages"' in turn_fragment and QUESTION in turn_fragment
    turn = re.search(r'id="turn-(\w+)"', turn_fragment).group(1)
    assert 'id="pipeline"' in turn_fragment and 'data-state="idle"' in turn_fragment

    everything = "\n".join(fragments)
    session_id = await database_sync_to_async(
        lambda: Message.objects.get(role="assistant").conversation.session_id
    )()
    assert f'id="session-id" value="{session_id}" hx-swap-oob="true"' in everything
    assert f'href="/c/{session_id}/"' in everything  # the sidebar lists the new session
    assert f'id="chat-title" hx-swap-oob="true">{QUESTION}</h1>' in everything
    for stage in ("memory", "rewrite", "intent", "retrieve", "prompt", "generate"):
        assert re.search(rf'class="stage is-running" id="stage-{stage}"', everything), stage
        assert re.search(rf'class="stage is-done" id="stage-{stage}"[^>]*hx-swap-oob="true"', everything), (
            stage
        )
    tokens = [f for f in fragments if f.startswith(f'<span hx-swap-oob="beforeend:#answer-{turn}">')]
    assert len(tokens) > 5
    assert f'id="evidence-{turn}"' in everything and "handbook.md" in everything
    assert '<span class="chip">KB 0.70</span>' in everything

    final = fragments[-1]
    answer = await database_sync_to_async(Message.objects.select_related("trace").get)(role="assistant")
    assert f'id="msg-{answer.pk}"' in final
    assert f'href="#ev-m{answer.pk}-' in final  # citations open the stored evidence
    assert f'hx-swap-oob="outerHTML:#evidence-{turn}"' in final
    assert f"/traces/{answer.trace.trace_id}/" in final
    assert "Citations verified" in final


async def test_it_explains_a_refused_question_without_running_it(alice_headers):
    communicator = await connect(alice_headers)
    await ask(communicator, "   ")
    fragment = await communicator.receive_from(timeout=5)
    assert "The message is empty." in fragment and "beforeend:#messages" in fragment
    await ask(communicator, "hello", kb="someone-elses-kb")
    echoed = await communicator.receive_from(timeout=5)  # the question shows at once
    refused = await communicator.receive_from(timeout=5)
    turn = re.search(r'id="turn-(\w+)"', echoed).group(1)
    assert "No such knowledge base." in refused and f"#turn-{turn}" in refused
    assert await communicator.receive_nothing(timeout=0.3)
    assert not await database_sync_to_async(Message.objects.exists)()
    await communicator.disconnect()


async def test_it_answers_a_greeting_through_the_system_shortcut(alice_headers):
    communicator = await connect(alice_headers)
    await ask(communicator, "hello")
    fragments = await receive_until(communicator, r"outerHTML:#turn-|alert error")
    await communicator.disconnect()
    everything = "\n".join(fragments)
    assert re.search(r'class="stage is-shortcut" id="stage-system"', everything)
    assert re.search(r'aria-label="shortcut"><svg class="icon-bolt".*?</svg>B</span>', everything)
    states = re.findall(r'class="stage is-(\w+)" id="stage-(\w+)"', everything)
    last_state = {stage: state for state, stage in states}
    assert last_state == {
        "memory": "done", "rewrite": "done", "intent": "done", "guide": "done",
        "system": "shortcut", "retrieve": "skipped", "prompt": "skipped", "generate": "skipped",
    }  # fmt: skip


async def test_it_answers_one_question_at_a_time(alice_headers, ready_kb, slow_llm):
    communicator = await connect(alice_headers)
    await ask(communicator, QUESTION, kb="alice-kb")
    await receive_until(communicator, r"beforeend:#answer-")
    await ask(communicator, "And backups?", kb="alice-kb")
    fragments = await receive_until(communicator, r"msg-toast")
    assert "Still answering the last question" in fragments[-1]
    await communicator.disconnect()
    await database_sync_to_async(wait_for_answer)()  # the cancelled run has stored its partial answer


async def test_it_cancels_the_run_and_keeps_a_partial_answer_on_disconnect(alice_headers, ready_kb, slow_llm):
    communicator = await connect(alice_headers)
    await ask(communicator, QUESTION, kb="alice-kb")
    await receive_until(communicator, r"beforeend:#answer-")
    await communicator.disconnect()
    answer = await database_sync_to_async(wait_for_answer)()
    assert answer.partial
    assert "word0" in answer.content and "word199" not in answer.content


async def test_stop_ends_the_answer_keeps_what_was_written_and_the_socket_open(alice_headers, ready_kb, slow_llm):
    communicator = await connect(alice_headers)
    await ask(communicator, QUESTION, kb="alice-kb")
    await receive_until(communicator, r"beforeend:#answer-")

    await communicator.send_to(text_data=json.dumps({"action": "stop"}))
    stopped = await receive_until(communicator, r"msg-stopped")
    ended = await receive_until(communicator, r'id="stage-generate"[^>]*data-state="skipped"')
    answer = await database_sync_to_async(wait_for_answer)()

    assert "Stopped" in stopped[-1] and 'title="stopped"' in ended[-1]
    assert answer.partial and "word0" in answer.content and "word199" not in answer.content
    await ask(communicator, "What does the handbook say about backups?", kb="alice-kb")  # the socket still serves
    assert "msg-user" in (await receive_until(communicator, r"msg-user"))[-1]
    await communicator.disconnect()
    # The second run, cancelled by the disconnect, stores what it had from its own thread:
    # the database is emptied after the test only once it has.
    await asyncio.to_thread(_wait_for_chat_runs)


def _wait_for_chat_runs(timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while any(thread.name == "chat-run" for thread in threading.enumerate()):
        assert time.monotonic() < deadline, "a chat run still had not ended"
        time.sleep(0.05)


async def test_the_chat_answers_with_the_channel_layer_down(alice_headers, settings):
    # Redis, which carries the channel layer on the full stack, on a port nothing listens on.
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "agentic_rag.channel_layers.RedisChannelLayer", "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]}}
    }
    channel_layers.backends.clear()
    try:
        communicator = await connect(alice_headers)
        await ask(communicator, "hello")
        fragments = await receive_until(communicator, r"outerHTML:#turn-|alert error")
        await communicator.disconnect()
    finally:
        channel_layers.backends.clear()
    assert "outerHTML:#turn-" in fragments[-1]
