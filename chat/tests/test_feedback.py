"""Feedback: from the thumbs buttons and `POST /api/feedback`, shown on the trace and in the admin."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from agentic_rag.models import ApiToken
from chat.models import Feedback

from .web_factories import make_exchange

pytestmark = pytest.mark.django_db

API = reverse("api-feedback")
HTMX = {"HX-Request": "true"}


@pytest.fixture
def answer(alice, kb):
    return make_exchange(alice, kb=kb)


def post_json(client, payload, **kwargs):
    return client.post(API, json.dumps(payload), content_type="application/json", **kwargs)


def test_it_records_feedback_with_its_question_trace_and_metadata(alice_client, alice, answer):
    payload = {"message_id": answer.pk, "is_positive": False, "comment": "wrong section",
               "agent_type": "hybrid_agent", "metadata": {"client": "tests"}}

    response = post_json(alice_client, payload)

    assert response.status_code == 201
    feedback = Feedback.objects.get()
    assert response.json() == {"id": feedback.pk, "message_id": answer.pk, "is_positive": False}
    assert (feedback.user, feedback.message, feedback.trace) == (alice, answer, answer.trace)
    assert feedback.query == "How do we review incidents?" and feedback.comment == "wrong section"
    assert feedback.agent_type == "hybrid_agent" and feedback.metadata == {"client": "tests"}


def test_it_keeps_one_verdict_per_user_and_message(alice_client, answer):
    post_json(alice_client, {"message_id": answer.pk, "is_positive": False})
    post_json(alice_client, {"message_id": answer.pk, "is_positive": True})

    assert Feedback.objects.get().is_positive


def test_it_accepts_a_bearer_token_without_csrf(alice, answer):
    key = ApiToken.issue(alice, "tests")[1]
    client = Client(enforce_csrf_checks=True)

    response = post_json(client, {"message_id": answer.pk, "is_positive": True}, headers={"Authorization": f"Bearer {key}"})

    assert response.status_code == 201 and Feedback.objects.get().user == alice


@pytest.mark.parametrize(
    ("payload", "says"),
    [({"is_positive": True}, "message_id"), ({"message_id": 1}, "is_positive"),
     ({"message_id": 1, "is_positive": True, "metadata": [1]}, "metadata")],
)
def test_it_refuses_bad_input(alice_client, answer, payload, says):
    payload = {**payload, "message_id": answer.pk} if "message_id" in payload else payload
    response = post_json(alice_client, payload)

    assert response.status_code == 400 and response.json()["error"]["code"] == "bad_input"
    assert not Feedback.objects.exists()


def test_it_refuses_the_wrong_method_and_anonymous_callers(alice_client, answer):
    assert alice_client.get(API).status_code == 405
    assert post_json(Client(), {"message_id": answer.pk, "is_positive": True}).status_code == 401


def test_it_hides_other_users_answers(bob, answer):
    client = Client()
    client.force_login(bob)

    response = post_json(client, {"message_id": answer.pk, "is_positive": True})

    assert response.status_code == 404 and not Feedback.objects.exists()


def test_the_thumbs_buttons_store_feedback_and_show_it(alice_client, answer):
    url = reverse("message-feedback", args=[answer.pk])

    response = alice_client.post(url, {"value": "up"}, headers=HTMX)

    assert response.status_code == 200 and 'value="up" class="button ghost small is-on"' in response.content.decode()
    assert Feedback.objects.get().is_positive
    page = alice_client.get(reverse("chat-session", args=[answer.conversation.session_id])).content.decode()
    assert 'value="up" class="button ghost small is-on"' in page


def test_the_trace_page_shows_feedback(alice_client, answer):
    post_json(alice_client, {"message_id": answer.pk, "is_positive": False, "comment": "cites the wrong part"})

    html = alice_client.get(reverse("trace-detail", args=[answer.trace.trace_id])).content.decode()

    assert "<h2>Feedback</h2>" in html and "not helpful" in html and "cites the wrong part" in html


def test_the_admin_lists_feedback(admin_client, alice_client, answer):
    post_json(alice_client, {"message_id": answer.pk, "is_positive": True, "agent_type": "naive_rag_agent"})

    html = admin_client.get(reverse("admin:chat_feedback_changelist")).content.decode()

    assert "naive_rag_agent" in html and "How do we review incidents?" in html
