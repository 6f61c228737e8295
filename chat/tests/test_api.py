"""The HTTP API: SSE and JSON answers, bad input, and who may call it (session or token)."""

from __future__ import annotations

import json

import pytest
from django.test import AsyncClient, Client
from django.urls import reverse

from agentic_rag.llm.testing import FakeReply
from agentic_rag.models import ApiToken
from agentic_rag.tests.llm_support import configured_as_the_model
from chat.events import PipelineEvent
from chat.models import Conversation, Message
from chat.pipeline import ChatResult, export_graph
from knowledge.models import KnowledgeBase

from .web_factories import ingest, wait_for_answer

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "How do we review incidents?"
STREAM = reverse("api-chat-stream")
JSON_API = reverse("api-chat")


def parse_sse(chunks) -> list[tuple[str, dict | str]]:
    """Split an SSE body into (event, data) pairs; comments come out as ("comment", text)."""
    body = b"".join(chunks).decode()
    events = []
    for block in body.split("\n\n"):
        if not block:
            continue
        if block.startswith(":"):
            events.append(("comment", block[1:].strip()))
            continue
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((fields["event"], json.loads(fields["data"])))
    return events


def post_json(client, url, payload, **kwargs):
    return client.post(url, json.dumps(payload), content_type="application/json", **kwargs)


@pytest.fixture
def ready_kb(kb, alice):
    ingest(kb, alice)
    return kb


@pytest.fixture
def token_key(alice):
    return ApiToken.issue(alice, "tests")[1]


@pytest.fixture
def slow_llm(settings):
    """A model that streams one word every 50 ms, served by a fake OpenAI-compatible server."""
    words = " ".join(f"word{i}" for i in range(200))
    # A model that answers every request with the same stream cannot rewrite the query.
    settings.CHAT_ENABLE_QUERY_REWRITE = False
    with configured_as_the_model(settings, FakeReply(text=words, token_delay_s=0.05)) as server:
        yield server


def test_it_streams_every_stage_tokens_and_the_final_answer_as_sse(alice_client, ready_kb):
    response = post_json(alice_client, STREAM, {"message": QUESTION, "kb": "alice-kb"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    assert response["X-Accel-Buffering"] == "no"
    events = parse_sse(response.streaming_content)
    types = [kind for kind, _ in events]
    assert types[0] == "session" and types[-1] == "final"
    for kind in (
        "route",
        "stage_start",
        "stage_end",
        "intent",
        "retrieval",
        "first_token",
        "token",
        "citation",
    ):
        assert kind in types, kind
    ended = [data["stage"] for kind, data in events if kind == "stage_end"]
    assert sorted(ended) == sorted(node["id"] for node in export_graph()["nodes"])
    final = events[-1][1]
    tokens = "".join(data["text"] for kind, data in events if kind == "token")
    assert final["response"] == tokens and "incident review" in tokens
    assert final["trace_id"] and final["total_ms"] > 0
    retrieval = next(data for kind, data in events if kind == "retrieval")
    assert retrieval["evidence"][0]["doc"] == "handbook.md"
    session_id = events[0][1]["session_id"]
    assert Conversation.objects.get(session_id=session_id).messages.filter(role="assistant").count() == 1


def test_it_answers_as_one_json_object(alice_client, ready_kb):
    response = post_json(alice_client, JSON_API, {"message": QUESTION, "kb": "alice-kb"})
    assert response.status_code == 200
    body = response.json()
    assert "incident review" in body["answer"]
    assert body["citations"] and {"n", "doc", "chunk_id", "quote", "verified", "status"} <= set(body["citations"][0])
    # `status` says more than `verified` (a quote found may still not answer), never the opposite.
    for entry in [*body["citations"], *body["verification"]]:
        assert entry["status"] in {"verified", "may_not_answer", "unverified"}
        assert entry["verified"] is (entry["status"] == "verified")
    assert body["intent"]["intents"][0]["name"] == "KB"
    assert body["route"]["kb_prefix"] == "alice-kb"
    assert body["shortcut"] is None and body["error"] is None
    assert body["trace_id"] and body["session_id"]
    assert [stage["name"] for stage in body["stages"]][-1] == "generate"
    assert all(stage["status"] for stage in body["stages"])
    assert list(body) == list(ChatResult().as_json())  # the one result shape `ask --json` prints too


def test_it_takes_form_data_too(alice_client, ready_kb):
    response = alice_client.post(JSON_API, {"message": QUESTION, "kb": "alice-kb"})
    assert response.status_code == 200 and response.json()["answer"]


def test_it_continues_a_session(alice_client, ready_kb):
    first = post_json(alice_client, JSON_API, {"message": QUESTION, "kb": "alice-kb"}).json()
    second = post_json(
        alice_client,
        JSON_API,
        {"message": "And backups?", "kb": "alice-kb", "session_id": first["session_id"]},
    ).json()
    assert second["session_id"] == first["session_id"]
    assert Message.objects.filter(conversation__session_id=first["session_id"]).count() == 4


def test_it_keeps_sessions_apart_between_users(alice_client, bob, ready_kb):
    alice_session = post_json(alice_client, JSON_API, {"message": QUESTION, "kb": "alice-kb"}).json()[
        "session_id"
    ]
    bob_client = Client()
    bob_client.force_login(bob)
    post_json(bob_client, JSON_API, {"message": "Hello there", "session_id": alice_session})
    assert Conversation.objects.filter(session_id=alice_session).count() == 2
    alice_messages = Message.objects.filter(conversation__user__username="alice")
    assert not alice_messages.filter(content="Hello there").exists()


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"message": "   "}, "The message is empty."),
        ({}, "The message is empty."),
        ({"message": "x" * 50}, "longer than 40 characters"),
        ({"message": "hi", "session_id": "../etc"}, "session_id"),
    ],
)
@pytest.mark.parametrize("url", [STREAM, JSON_API])
def test_it_refuses_bad_input_with_a_clear_400(alice_client, settings, url, payload, message):
    settings.CHAT_MAX_MESSAGE_CHARS = 40
    response = post_json(alice_client, url, payload)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert message in response.json()["error"]["message"]
    assert not Conversation.objects.exists()


@pytest.mark.parametrize("url", [STREAM, JSON_API])
@pytest.mark.parametrize("body", ["{not json", "[1, 2]", '"text"'])
def test_it_refuses_a_body_that_is_not_a_json_object(alice_client, url, body):
    response = alice_client.post(url, body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_json"


@pytest.mark.parametrize("url", [STREAM, JSON_API])
def test_it_answers_404_alike_for_unknown_and_unreadable_kbs(alice_client, bob, url):
    KnowledgeBase.objects.create(slug="bob-secret", name="Bob's secret", owner=bob)
    unknown = post_json(alice_client, url, {"message": "hi", "kb": "no-such-kb"})
    private = post_json(alice_client, url, {"message": "hi", "kb": "bob-secret"})
    assert unknown.status_code == private.status_code == 404
    assert unknown.content == private.content
    assert "bob" not in private.content.decode().lower()


@pytest.mark.parametrize("url", [STREAM, JSON_API])
def test_it_rejects_other_methods(alice_client, url):
    assert alice_client.get(url).status_code == 405


@pytest.mark.parametrize("url", [STREAM, JSON_API])
def test_it_requires_a_session_or_a_token(client, url):
    response = post_json(client, url, {"message": "hi"})
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] == "unauthorized"


def test_it_accepts_a_bearer_token_without_csrf(ready_kb, alice, token_key):
    client = Client(enforce_csrf_checks=True)
    response = post_json(
        client,
        JSON_API,
        {"message": QUESTION, "kb": "alice-kb"},
        headers={"Authorization": f"Bearer {token_key}"},
    )
    assert response.status_code == 200
    assert Conversation.objects.get(session_id=response.json()["session_id"]).user == alice
    assert ApiToken.objects.get().last_used_at is not None


@pytest.mark.parametrize("header", ["Bearer arag_wrong", "Bearer ", "Basic YWxpY2U6eA==", "Token x"])
def test_it_refuses_a_wrong_token(alice, token_key, header):
    response = post_json(Client(), JSON_API, {"message": "hi"}, headers={"Authorization": header})
    assert response.status_code == 401


def test_it_refuses_a_revoked_token(alice, token_key):
    ApiToken.objects.get().revoke()
    response = post_json(
        Client(), JSON_API, {"message": "hi"}, headers={"Authorization": f"Bearer {token_key}"}
    )
    assert response.status_code == 401
    assert not Conversation.objects.exists()


def test_it_refuses_the_token_of_a_deactivated_user(alice, token_key):
    alice.is_active = False
    alice.save()
    response = post_json(
        Client(), JSON_API, {"message": "hi"}, headers={"Authorization": f"Bearer {token_key}"}
    )
    assert response.status_code == 401


def test_it_enforces_csrf_for_session_posts(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = post_json(client, JSON_API, {"message": "hi"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "csrf"
    assert not Conversation.objects.exists()


def test_it_accepts_session_posts_with_the_csrf_header(alice, ready_kb):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    client.get(reverse("chat"))  # sets the CSRF cookie, as the page does for the browser
    token = client.cookies["csrftoken"].value
    response = post_json(client, JSON_API, {"message": QUESTION}, headers={"X-CSRFToken": token})
    assert response.status_code == 200


def test_it_ends_a_failed_stream_with_an_error_event(alice_client, monkeypatch):
    from chat import api

    def failing(request):
        yield PipelineEvent("session", data={"session_id": "x"})
        raise RuntimeError("the index is on fire")

    monkeypatch.setattr(api, "iter_chat", failing)
    response = post_json(alice_client, STREAM, {"message": "hi"})
    events = parse_sse(response.streaming_content)
    assert [kind for kind, _ in events] == ["session", "error"]
    assert events[-1][1]["code"] == "internal"
    assert "fire" not in events[-1][1]["message"]  # internals stay in the log


def test_it_cancels_the_run_and_keeps_a_partial_answer_when_the_client_leaves(
    alice_client, ready_kb, slow_llm
):
    response = post_json(alice_client, STREAM, {"message": QUESTION, "kb": "alice-kb"})
    stream = iter(response.streaming_content)
    received = b""
    while b"event: token" not in received:
        received += next(stream)
    response.close()  # what the server does when the client disconnects
    answer = wait_for_answer()
    assert answer.partial
    assert "word0" in answer.content and "word199" not in answer.content
    assert answer.trace.status == "cancelled"


async def test_it_streams_under_asgi_with_an_async_iterator(alice, ready_kb):
    client = AsyncClient()
    await client.aforce_login(alice)
    response = await client.post(
        STREAM, json.dumps({"message": QUESTION, "kb": "alice-kb"}), content_type="application/json"
    )
    assert response.status_code == 200 and response.is_async
    chunks = [chunk async for chunk in response.streaming_content]
    events = parse_sse(chunks)
    assert events[0][0] == "session" and events[-1][0] == "final"
    assert any(kind == "token" for kind, _ in events)


@pytest.mark.parametrize("agent", ["alice-kb:plan_execute_agent:retrieve_only", "alice-kb:plan_execute_agent"])
def test_the_agent_field_takes_a_worker_name_with_its_kb(alice_client, ready_kb, agent):
    response = post_json(alice_client, "/api/chat", {"message": QUESTION, "agent": agent})

    data = response.json()
    assert response.status_code == 200 and data["route"]["kb_prefix"] == "alice-kb"
    assert [step["type"] for step in data["agent_steps"]][0] == "plan"


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [({"agent": "alice-kb:teleport_agent"}, 400, "No such agent type: teleport_agent"),
     ({"agent": "alice-kb:hybrid_agent:generate"}, 400, "unsupported agent_mode"),
     ({"agent": "a:b:c:d"}, 400, "invalid worker_name"),
     ({"agent": "alice-kb:hybrid_agent", "kb": "other"}, 400, "different knowledge bases"),
     ({"agent": "bob-private:hybrid_agent"}, 404, "No such knowledge base")],
)  # fmt: skip
def test_a_bad_worker_name_is_refused_clearly(alice_client, kb, bob, body, status, says):
    KnowledgeBase.objects.create(name="Bob's", slug="bob-private", owner=bob)
    KnowledgeBase.objects.create(name="Other", slug="other", owner=kb.owner)

    response = post_json(alice_client, "/api/chat", {"message": "hi there", **body})

    assert response.status_code == status and says in response.json()["error"]["message"]
