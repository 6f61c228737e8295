"""Input the API and the chat socket refuse before use: text no database stores, JSON the
parser cannot walk, fields of the wrong type. Each answers 400 in the API's error shape (an
error fragment on the socket) and stores nothing, on SQLite as on PostgreSQL."""

from __future__ import annotations

import json

import pytest
from channels.testing import WebsocketCommunicator
from django.urls import reverse

from agentic_rag.asgi import application
from chat.models import Conversation, DocumentChatTurn, Message, Trace

from .web_factories import ingest, make_exchange, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = reverse("api-chat")
STREAM = reverse("api-chat-stream")
DOC_CHAT = reverse("api-document-chat")
FEEDBACK = reverse("api-feedback")
DEEP = "[" * 100_000 + "]" * 100_000


def post_raw(client, url, body: str):
    return client.post(url, body, content_type="application/json")


def error_of(response) -> tuple[int, str, str]:
    body = response.json()
    return response.status_code, body["error"]["code"], body["error"]["message"]


@pytest.fixture
def document(kb, alice):
    ingest(kb, alice)
    return kb.documents.get()


@pytest.mark.parametrize("url", [CHAT, STREAM, DOC_CHAT])
def test_a_lone_surrogate_in_a_message_is_refused_and_nothing_is_stored(alice_client, url):
    response = post_raw(alice_client, url, '{"message": "why \\ud800?"}')

    status, code, message = error_of(response)
    assert (status, code) == (400, "bad_text") and message.startswith("message:") and "surrogate" in message
    assert not Conversation.objects.exists() and not Trace.objects.exists()


@pytest.mark.parametrize("url", [CHAT, STREAM, DOC_CHAT, FEEDBACK])
def test_json_nested_past_the_bound_is_refused_without_recursing(alice_client, url):
    for body in (DEEP, '{"message": "hi", "x": ' + DEEP + "}", "{" * 50_000):
        status, code, _ = error_of(post_raw(alice_client, url, body))
        assert (status, code) == (400, "too_deep"), body[:20]


def test_json_at_the_depth_bound_is_read(alice_client, settings):
    settings.JSON_MAX_DEPTH = 4
    nested = '{"message": "hi", "project_info": {"a": [[1]]}}'  # depth 4

    assert post_raw(alice_client, DOC_CHAT, nested).status_code == 200
    assert error_of(post_raw(alice_client, DOC_CHAT, nested.replace("[[1]]", "[[[1]]]")))[1] == "too_deep"


@pytest.mark.parametrize(
    ("field", "body"),
    [
        ("message", {"message": "why\u0000?"}),
        ("selected_section.content", {"message": "why?", "selected_section": {"content": "a\u0000b"}}),
        ("conversation_id", {"message": "why?", "conversation_id": "c\u00001"}),
        ("project_info.k\\x00", {"message": "why?", "project_info": {"k\u0000": 1}}),
    ],
)
def test_a_nul_in_a_document_chat_field_is_refused_naming_the_field(alice_client, field, body):
    status, code, message = error_of(post_raw(alice_client, DOC_CHAT, json.dumps(body)))

    assert (status, code) == (400, "bad_text") and message.startswith(f"{field}: ") and "NUL" in message
    assert not DocumentChatTurn.objects.exists()


def test_a_nul_in_a_section_of_a_document_is_refused(alice_client, document):
    body = {"message": "why?", "document_id": document.pk, "selected_section": {"position": 0, "content": "\u0000"}}

    assert error_of(post_raw(alice_client, DOC_CHAT, json.dumps(body)))[:2] == (400, "bad_text")


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        (CHAT, {"message": 123}, "message"),
        (CHAT, {"message": "hi", "kb": ["alice-kb"]}, "kb"),
        (STREAM, {"message": "hi", "session_id": {"id": 1}}, "session_id"),
        (DOC_CHAT, {"message": "hi", "conversation_history": "earlier"}, "conversation_history"),
        (DOC_CHAT, {"message": "hi", "project_info": "x"}, "project_info"),
        (DOC_CHAT, {"message": "hi", "selected_section": {"content": 5}}, "selected_section.content"),
        (DOC_CHAT, {"message": "hi", "document_id": True}, "document_id"),
        (FEEDBACK, {"message_id": 1, "is_positive": True, "comment": 5}, "comment"),
        (FEEDBACK, {"message_id": 1, "is_positive": 1}, "is_positive"),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_naming_it(alice_client, url, body, field):
    status, code, message = error_of(post_raw(alice_client, url, json.dumps(body)))

    assert (status, code) == (400, "bad_input") and message.startswith(f"{field}: send ")


def test_null_is_an_absent_field(alice_client):
    response = post_raw(alice_client, CHAT, json.dumps({"message": "hello", "kb": None, "session_id": None}))

    assert response.status_code == 200, response.content


@pytest.mark.parametrize(
    "body",
    ['{"message_id": 1, "is_positive": true, "metadata": {"x": NaN}}',
     '{"message_id": 1, "is_positive": true, "metadata": {"x": 1e999}}',
     '{"message_id": 1, "is_positive": true, "metadata": {"x": -Infinity}}',
     '{"message_id": 100000000000000000000000000000, "is_positive": true}'],
)
def test_numbers_no_database_stores_are_refused(alice_client, alice, body):
    make_exchange(alice)  # message 1 may exist: the refusal does not depend on it

    assert error_of(post_raw(alice_client, FEEDBACK, body))[:2] == (400, "bad_number")


def test_the_document_editor_refuses_a_nul_in_its_form_and_stores_no_turn(alice_client, document):
    url = reverse("document-assist", args=[document.pk])
    response = alice_client.post(url, {"message": "why\u0000?", "section": "0"}, HTTP_HX_REQUEST="true")

    assert response.status_code == 200 and "message: the text holds a NUL" in response.content.decode()
    assert not DocumentChatTurn.objects.exists()


def test_a_huge_id_in_an_address_is_a_404(alice_client):
    url = reverse("api-document-proposal", args=[10**40, "accept"])

    assert error_of(alice_client.post(url))[:2] == (404, "unknown_proposal")


# --- the chat socket ------------------------------------------------------------------------


async def _connect(user) -> WebsocketCommunicator:
    from channels.db import database_sync_to_async

    cookie = await database_sync_to_async(session_cookie)(user)
    headers = [(b"origin", b"http://127.0.0.1"), (b"cookie", cookie.encode())]
    communicator = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
    connected, _ = await communicator.connect()
    assert connected
    return communicator


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        ('{"message": "why \\ud800?"}', "message: the text holds a lone surrogate"),
        (DEEP, "nested deeper than"),
        ('{"message": 123}', "message: send a string, not a number."),
        ('{"message": "a\\u0000b"}', "message: the text holds a NUL"),
        ("not json", "The JSON is not valid."),
        (None, "in a text frame"),
    ],
)
async def test_the_socket_answers_a_bad_frame_with_an_error_and_stays_open(alice, frame, says):
    communicator = await _connect(alice)
    if frame is None:
        await communicator.send_to(bytes_data=b"\x00\xff")
    else:
        await communicator.send_to(text_data=frame)

    fragment = await communicator.receive_from(timeout=5)
    assert says in fragment and "msg-toast" in fragment
    await communicator.send_to(text_data=json.dumps({"message": "   "}))  # the socket still reads
    assert "The message is empty." in await communicator.receive_from(timeout=5)
    await communicator.disconnect()
    assert not await _stored_messages()


async def _stored_messages() -> int:
    from channels.db import database_sync_to_async

    return await database_sync_to_async(Message.objects.count)()


async def test_the_kb_socket_answers_a_bad_frame_with_an_error_and_stays_open(alice, kb):
    from channels.db import database_sync_to_async

    cookie = await database_sync_to_async(session_cookie)(alice)
    headers = [(b"origin", b"http://127.0.0.1"), (b"cookie", cookie.encode())]
    communicator = WebsocketCommunicator(application, f"/ws/kb/{kb.slug}/", headers=headers)
    assert (await communicator.connect())[0]
    await communicator.receive_from()  # the rows and counts it sends on connecting
    await communicator.receive_from()

    await communicator.send_to(text_data='{"HEADERS": {"HX-Trigger": "\\ud800"}}')
    refusal = await communicator.receive_from(timeout=5)
    assert "HEADERS.HX-Trigger: the text holds a lone surrogate" in refusal and "#upload-result" in refusal
    await communicator.send_to(text_data='{"HEADERS": {}}')
    assert 'id="document-rows"' in await communicator.receive_from(timeout=5)
    await communicator.disconnect()
