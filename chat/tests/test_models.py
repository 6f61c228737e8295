from __future__ import annotations

import pytest
from django.db import IntegrityError
from django.urls import reverse

from chat.models import Conversation, Span, Trace
from chat.pipeline import ChatOptions, ChatRequest, run_chat

pytestmark = pytest.mark.django_db


def test_it_lists_only_a_users_own_conversations(alice, bob):
    mine = Conversation.objects.create(user=alice, session_id="a")
    Conversation.objects.create(user=bob, session_id="a")

    assert list(Conversation.objects.for_user(alice)) == [mine]


def test_it_keeps_one_conversation_per_user_and_session(alice):
    Conversation.objects.create(user=alice, session_id="same")

    with pytest.raises(IntegrityError):
        Conversation.objects.create(user=alice, session_id="same")


def test_it_names_a_conversation_opened_empty_after_its_first_question(docs_kb, alice, extractive):
    Conversation.objects.create(user=alice, session_id="new")

    run_chat(ChatRequest(alice, "new", "What is hybrid search?", ChatOptions(kb_slug="alice-kb")),
             emit=lambda e: None, llm=extractive)

    assert Conversation.objects.get(session_id="new").title == "What is hybrid search?"


def test_it_shows_traces_read_only_in_the_admin(docs_kb, admin_client, alice, extractive):
    result = run_chat(ChatRequest(alice, None, "What is hybrid search?", ChatOptions(kb_slug="alice-kb")),
                      emit=lambda e: None, llm=extractive)
    trace = Trace.objects.get(trace_id=result.trace_id)

    page = admin_client.get(reverse("admin:chat_trace_change", args=[trace.pk]))

    assert page.status_code == 200 and b"retrieve" in page.content and b"Save" not in page.content
    assert admin_client.post(reverse("admin:chat_trace_change", args=[trace.pk]), {"question": "x"}).status_code == 403
    assert admin_client.get(reverse("admin:chat_trace_add")).status_code == 403
    for model in ("conversation", "message", "trace", "span"):
        assert admin_client.get(reverse(f"admin:chat_{model}_changelist")).status_code == 200
    assert Span.objects.filter(trace=trace).count() > 8
