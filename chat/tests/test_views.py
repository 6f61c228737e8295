"""The chat pages: the chat screen, sessions, feedback and the trace viewer."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from chat.models import Conversation, Feedback, Message
from chat.pipeline import export_graph
from knowledge.models import KnowledgeBase

from .web_factories import ingest, make_exchange

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@pytest.fixture
def answer(alice, kb):
    return make_exchange(alice, kb=kb)


def page_urls(answer: Message) -> dict[str, str]:
    session_id = answer.conversation.session_id
    return {
        "home": reverse("chat"),
        "session": reverse("chat-session", args=[session_id]),
        "delete": reverse("chat-delete", args=[session_id]),
        "trace": reverse("trace-detail", args=[answer.trace.trace_id]),
    }


def post_urls(answer: Message) -> dict[str, str]:
    session_id = answer.conversation.session_id
    return {
        "send": reverse("chat-send"),
        "rename": reverse("chat-rename", args=[session_id]),
        "delete": reverse("chat-delete", args=[session_id]),
        "feedback": reverse("message-feedback", args=[answer.pk]),
    }


def test_it_serves_chat_at_the_root_and_knowledge_bases_under_kb():
    assert reverse("chat") == "/"
    assert reverse("knowledge-list") == "/kb/"


@pytest.mark.parametrize("name", ["home", "session", "delete", "trace"])
def test_it_requires_login_for_pages(client, answer, name):
    url = page_urls(answer)[name]
    response = client.get(url)
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


@pytest.mark.parametrize("name", ["send", "rename", "delete", "feedback"])
def test_it_requires_login_for_posts(client, answer, name):
    response = client.post(post_urls(answer)[name], {"message": "hi", "title": "x", "value": "up"})
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))
    assert Conversation.objects.filter(title="Incident reviews").exists()


@pytest.mark.parametrize("name", ["home", "session", "trace"])
def test_it_rejects_posts_to_pages(alice_client, answer, name):
    assert alice_client.post(page_urls(answer)[name]).status_code == 405


@pytest.mark.parametrize("name", ["send", "rename", "feedback"])
def test_it_rejects_gets_to_actions(alice_client, answer, name):
    assert alice_client.get(post_urls(answer)[name]).status_code == 405


def test_it_draws_the_pipeline_from_the_exported_graph(alice_client):
    response = alice_client.get(reverse("chat"))
    assert response.status_code == 200
    html = response.content.decode()
    for node in export_graph()["nodes"]:
        assert f'id="stage-{node["id"]}"' in html
        assert node["label"] in html
    # Rewrite and intent run in parallel: one lane holds both cards.
    lanes = re.findall(r'<li class="stage-lane[^"]*">(.*?)</li>', html, re.DOTALL)
    parallel = [lane for lane in lanes if 'id="stage-rewrite"' in lane]
    assert len(parallel) == 1 and 'id="stage-intent"' in parallel[0]
    assert 'ws-connect="/ws/chat/"' in html


def test_it_lists_only_readable_knowledge_bases(alice_client, kb, bob):
    KnowledgeBase.objects.create(slug="bob-secret", name="Bob's secret", owner=bob)
    html = alice_client.get(reverse("chat")).content.decode()
    assert '<option value="auto" selected>' in html
    assert 'value="alice-kb"' in html
    assert "bob-secret" not in html and "Bob&#x27;s secret" not in html


def test_it_lists_only_the_users_own_sessions(alice_client, alice, bob, answer):
    make_exchange(bob, session_id="bob-1", title="Bob's private question")
    html = alice_client.get(reverse("chat")).content.decode()
    assert "Incident reviews" in html
    assert "private question" not in html


def test_it_shows_a_session_with_its_answer_citations_and_evidence(alice_client, answer):
    response = alice_client.get(page_urls(answer)["session"])
    assert response.status_code == 200
    html = response.content.decode()
    key = f"m{answer.pk}"
    assert "How do we review incidents?" in html
    assert f'href="#ev-{key}-1"' in html and f'href="#ev-{key}-2"' in html
    assert f'id="ev-{key}-1"' in html and "3 Incident review" in html
    assert 'href="/kb/alice-kb/documents/1/#chunk-10"' in html
    assert 'ev-tool">TOOL' in html and 'ev-kb">KB' in html
    assert 'name="session_id" id="session-id" value="s1"' in html
    assert '<option value="alice-kb" selected>' in html
    assert reverse("trace-detail", args=[answer.trace.trace_id]) in html


def test_it_hides_other_users_sessions(bob_client, answer):
    assert bob_client.get(page_urls(answer)["session"]).status_code == 404
    assert bob_client.get(reverse("chat-session", args=["nope"])).status_code == 404


def test_it_renders_markdown_and_strips_unsafe_html(alice_client, alice):
    answer = make_exchange(
        alice,
        answer="**Bold** text [1]\n\n<script>alert('x')</script><img src=x onerror=alert(1)>"
        "[link](javascript:alert(1))",
    )
    html = alice_client.get(page_urls(answer)["session"]).content.decode()
    body = html.split('class="bubble answer markdown"', 1)[1].split("</div>", 1)[0]
    assert "<strong>Bold</strong>" in body
    assert "<script" not in body and "onerror" not in body and "javascript:" not in body
    assert "<img" not in body


def test_it_marks_sentences_whose_quotes_failed_verification(alice_client, alice):
    verification = [
        {"n": 1, "quote": "Write it down", "verified": True, "reason": ""},
        {"n": 2, "quote": "Two plus two is five", "verified": False, "reason": "not found"},
    ]
    answer = make_exchange(alice, verification=verification)
    html = alice_client.get(page_urls(answer)["session"]).content.decode()
    assert "1 of 2 quotes not found in their source" in html
    assert "Two plus two is five" in html
    assert "Citations verified" not in html


@pytest.mark.parametrize(
    ("status", "says", "not_says"),
    [("may_not_answer", "may not answer the question", "Citations verified"),
     ("verified", "Citations verified", "may not answer the question")],
)
def test_quotes_found_but_not_answering_are_not_shown_as_verified(alice_client, alice, status, says, not_says):
    verification = [{"n": 1, "quote": "Logs are kept.", "sentence": "Logs are kept.", "verified": status == "verified",
                     "status": status, "reason": "" if status == "verified" else "the quotes do not speak of it"}]
    answer = make_exchange(alice, verification=verification)

    html = alice_client.get(page_urls(answer)["session"]).content.decode()

    assert says in html and not_says not in html
    assert f'data-verification="{status}"' in html


def test_it_renames_a_session_over_htmx(alice_client, answer):
    url = post_urls(answer)["rename"]
    response = alice_client.post(url, {"title": "  Reviews  "}, headers=HTMX)
    assert response.status_code == 200
    assert 'id="session-s1"' in response.content.decode() and "Reviews" in response.content.decode()
    assert "<html" not in response.content.decode()
    assert Conversation.objects.get(session_id="s1").title == "Reviews"
    assert 'id="chat-title"' not in response.content.decode()  # renamed from another chat's page


def test_renaming_the_open_chat_renames_its_heading(alice_client, answer):
    html = alice_client.post(post_urls(answer)["rename"], {"title": "Incident reviews", "current": "s1"},
                             headers=HTMX).content.decode()

    heading = html[html.index('id="chat-title"'):]
    assert 'hx-swap-oob="true"' in heading[:60] and heading.split(">", 1)[1].startswith("Incident reviews")


def test_it_renames_without_javascript(alice_client, answer):
    response = alice_client.post(post_urls(answer)["rename"], {"title": "Renamed"})
    assert response.status_code == 302 and response.url == page_urls(answer)["session"]
    assert Conversation.objects.get(session_id="s1").title == "Renamed"


def test_it_hides_other_users_sessions_from_rename_and_delete(bob_client, answer):
    assert bob_client.post(post_urls(answer)["rename"], {"title": "Mine"}).status_code == 404
    assert bob_client.get(page_urls(answer)["delete"]).status_code == 404
    assert bob_client.post(post_urls(answer)["delete"]).status_code == 404
    assert Conversation.objects.get(session_id="s1").title == "Incident reviews"


def test_it_asks_before_deleting_a_session(alice_client, answer):
    response = alice_client.get(page_urls(answer)["delete"])
    assert response.status_code == 200
    assert "Delete “Incident reviews”?" in response.content.decode()
    assert Conversation.objects.filter(session_id="s1").exists()


def test_it_deletes_a_session(alice_client, answer):
    response = alice_client.post(post_urls(answer)["delete"])
    assert response.status_code == 302 and response.url == reverse("chat")
    assert not Conversation.objects.filter(session_id="s1").exists()
    assert not Message.objects.filter(pk=answer.pk).exists()


def test_it_deletes_a_session_over_htmx_with_a_client_redirect(alice_client, answer):
    response = alice_client.post(post_urls(answer)["delete"], headers=HTMX)
    assert response.headers["HX-Redirect"] == "/"
    assert not Conversation.objects.filter(session_id="s1").exists()


def test_it_stores_feedback_on_the_message(alice_client, answer):
    response = alice_client.post(post_urls(answer)["feedback"], {"value": "down"}, headers=HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert f'id="feedback-{answer.pk}"' in html
    assert re.search(r'value="down" class="[^"]*is-on', html)
    feedback = Feedback.objects.get(message=answer)
    assert not feedback.is_positive and feedback.user == answer.conversation.user


def test_it_refuses_feedback_it_does_not_know(alice_client, answer):
    response = alice_client.post(post_urls(answer)["feedback"], {"value": "meh"}, headers=HTMX)
    assert response.status_code == 400
    assert not Feedback.objects.exists()


def test_it_hides_other_users_messages_from_feedback(bob_client, answer):
    assert bob_client.post(post_urls(answer)["feedback"], {"value": "up"}).status_code == 404
    assert not Feedback.objects.exists()


def test_it_shows_a_trace_as_a_waterfall(alice_client, answer):
    response = alice_client.get(page_urls(answer)["trace"])
    assert response.status_code == 200
    html = response.content.decode()
    for name in ("memory", "retrieve", "bm25", "generate"):
        assert name in html
    # The retrieve span starts at 2 of 42 ms and lasts 30: its bar sits on the same axis.
    assert "left: 4.762%; width: 71.429%" in html
    assert "How do we review incidents?" in html


def test_it_hides_other_users_traces(bob_client, answer):
    assert bob_client.get(page_urls(answer)["trace"]).status_code == 404


def test_it_shows_another_users_trace_to_superusers_only(bob, answer):
    client = Client()
    client.force_login(bob)
    bob.is_staff = True
    bob.save()
    as_staff = client.get(page_urls(answer)["trace"]).status_code
    bob.is_superuser = True
    bob.save()
    assert (as_staff, client.get(page_urls(answer)["trace"]).status_code) == (404, 200)


def test_it_explains_a_refused_question_without_javascript(alice_client):
    response = alice_client.post(reverse("chat-send"), {"message": "   "}, follow=True)
    assert "The message is empty." in response.content.decode()
    assert not Conversation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_it_answers_without_javascript(alice, kb):
    ingest(kb, alice)
    client = Client()
    client.force_login(alice)
    response = client.post(reverse("chat-send"), {"message": "How do we review incidents?", "kb": "alice-kb"})
    conversation = Conversation.objects.get(user=alice)
    assert response.status_code == 302
    assert response.url == reverse("chat-session", args=[conversation.session_id])
    html = client.get(response.url).content.decode()
    assert "two working days" in html
    assert 'class="cite"' in html


@pytest.mark.django_db(transaction=True)
def test_a_chat_started_on_auto_stays_on_auto_after_routing_to_a_kb(alice, kb):
    ingest(kb, alice)
    client = Client()
    client.force_login(alice)
    response = client.post(reverse("chat-send"), {"message": "How do we review incidents?", "kb": "auto"})
    answer = Message.objects.get(role="assistant", conversation__user=alice)
    assert "alice-kb" in answer.trace.route  # the router chose the KB for this question
    html = client.get(response.url).content.decode()
    assert '<option value="auto" selected>' in html
    assert '<option value="alice-kb" selected>' not in html


@pytest.mark.django_db
def test_the_chat_page_says_answers_are_extractive_until_a_model_is_configured(alice_client, settings):
    from agentic_rag.llm import reset_llm

    reset_llm()
    offline = alice_client.get(reverse("chat"))
    assert b"No language model is configured: answers are extractive" in offline.content
    assert b"An administrator can add a language model" in offline.content
    alice = offline.wsgi_request.user
    alice.is_staff = True
    alice.save()
    staff = alice_client.get(reverse("chat"))
    assert reverse("model-list").encode() in staff.content and b"LLM_PROVIDERS=openai" in staff.content

    settings.LLM_PROVIDERS = ["openai"]
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    reset_llm()
    try:
        online = alice_client.get(reverse("chat"))
    finally:
        reset_llm()
    assert b"No language model is configured" not in online.content
