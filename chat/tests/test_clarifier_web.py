"""The Clarifier's `clarify` event over the JSON API, SSE and the chat websocket, and its reply."""

from __future__ import annotations

import json
import re

import pytest
from channels.db import database_sync_to_async
from django.urls import reverse

from chat.models import Message

from .conftest import ingest_docs
from .test_api import parse_sse, post_json
from .test_consumers import alice_headers, ask, connect, receive_until  # noqa: F401 (alice_headers is a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

AMBIGUOUS = "它的权重是多少？"
PLAN_EXECUTE = {"kb": "alice-kb", "agent_type": "plan_execute_agent"}


@pytest.fixture
def docs_kb(kb):
    ingest_docs(kb)
    return kb


def test_the_json_api_returns_the_choices(alice_client, docs_kb):
    response = post_json(alice_client, reverse("api-chat"), {"message": AMBIGUOUS, **PLAN_EXECUTE})
    assert response.status_code == 200
    body = response.json()
    clarification = body["clarification"]
    assert clarification["kind"] == "pronoun" and body["shortcut"] == "A"
    assert body["answer"] == clarification["question"]
    assert clarification["choices"][0] == {"label": "Weights", "message": "Weights 的权重是多少？", "kb": "alice-kb"}


def test_a_clarified_reply_over_the_api_is_answered(alice_client, docs_kb):
    payload = {"message": "Weights 的权重是多少？", "clarified": True, **PLAN_EXECUTE}
    body = post_json(alice_client, reverse("api-chat"), payload).json()
    assert body["clarification"] is None and body["shortcut"] != "A"
    assert "0.7" in body["answer"]  # the weighted mode's 0.7 × vector, quoted from the source


def test_sse_streams_the_clarify_event_before_final(alice_client, docs_kb):
    response = post_json(alice_client, reverse("api-chat-stream"), {"message": AMBIGUOUS, **PLAN_EXECUTE})
    events = parse_sse(response.streaming_content)
    types = [kind for kind, _ in events]
    assert "clarify" in types and types.index("clarify") < types.index("final")
    clarify = dict(events)["clarify"]
    assert clarify["stage"] == "guide" and len(clarify["choices"]) <= 3
    assert events[-1][1]["shortcut"] == "A"


async def test_the_websocket_shows_the_choices_as_buttons_that_send_the_reply(alice_headers, docs_kb):  # noqa: F811
    communicator = await connect(alice_headers)
    await ask(communicator, AMBIGUOUS, **PLAN_EXECUTE)
    fragments = await receive_until(communicator, r'hx-swap-oob="outerHTML:#turn-')
    turn = re.search(r'id="turn-(\w+)"', fragments[0]).group(1)
    live = next(f for f in fragments if f.startswith(f'<div hx-swap-oob="beforeend:#turn-{turn}"'))
    assert 1 <= live.count("data-clarify-choice") <= 3 and 'name="clarified" value="1"' in live
    assert 'name="message" value="Weights 的权重是多少？"' in live
    assert 'name="agent_type" value="plan_execute_agent"' in live
    session_id = await database_sync_to_async(lambda: Message.objects.get(role="assistant").conversation.session_id)()
    assert f'name="session_id" value="{session_id}"' in live
    final = fragments[-1]
    assert "data-clarify-new" in final and final.count("data-clarify-choice") == live.count("data-clarify-choice")

    # Picking a choice sends what its form holds; the answer goes on from it.
    await ask(communicator, "Weights 的权重是多少？", session_id=session_id, clarified="1", **PLAN_EXECUTE)
    fragments = await receive_until(communicator, r'hx-swap-oob="outerHTML:#turn-')
    await communicator.disconnect()
    assert not any("data-clarify-choice" in f for f in fragments)
    answers = await database_sync_to_async(
        lambda: list(Message.objects.filter(role="assistant").order_by("pk").values_list("content", "debug"))
    )()
    assert len(answers) == 2 and answers[1][1]["clarification"] is None and "0.7" in answers[1][0]


def test_the_stored_clarification_renders_its_buttons_on_the_page(alice_client, docs_kb):
    post_json(alice_client, reverse("api-chat"), {"message": AMBIGUOUS, "session_id": "s-clarify", **PLAN_EXECUTE})
    page = alice_client.get(reverse("chat-session", args=["s-clarify"])).content.decode()
    assert 'data-clarify-choice>Weights</button>' in page and "data-clarify-new" not in page
    assert json.dumps("Did you mean:")[1:-1] in page
