"""Requests the pipeline refuses, and what they leave behind: nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser

from chat.models import Conversation, Trace
from chat.pipeline import ChatOptions, ChatRefused, ChatRequest, run_chat
from knowledge.models import KnowledgeBase

pytestmark = pytest.mark.django_db


def refusal(user, message="What is hybrid search?", *, session=None, **options) -> ChatRefused:
    options.setdefault("kb_slug", "alice-kb")
    with pytest.raises(ChatRefused) as caught:
        run_chat(ChatRequest(user, session, message, ChatOptions(**options)), emit=lambda e: pytest.fail(f"emitted {e}"))
    assert not Conversation.objects.exists() and not Trace.objects.exists()
    return caught.value


@pytest.mark.parametrize("message", ["", "   \n\t "])
def test_it_refuses_an_empty_message(kb, alice, message):
    refused = refusal(alice, message)

    assert refused.code == "empty" and str(refused) == "The message is empty."


def test_it_refuses_a_message_over_the_length_limit(kb, alice, settings):
    settings.CHAT_MAX_MESSAGE_CHARS = 20

    refused = refusal(alice, "x" * 21)

    assert refused.code == "too_long" and str(refused) == "The message is longer than 20 characters."


def test_it_accepts_a_message_at_the_length_limit(kb, alice, settings):
    settings.CHAT_MAX_MESSAGE_CHARS = 20

    result = run_chat(ChatRequest(alice, None, "x" * 20, ChatOptions(kb_slug="alice-kb")), emit=lambda e: None)

    assert result.status == "done"


def test_it_refuses_an_unknown_kb(kb, alice):
    refused = refusal(alice, kb_slug="nope")

    assert refused.code == "unknown_kb" and str(refused) == "There is no knowledge base 'nope' you can read."


def test_it_refuses_another_users_private_kb_in_the_words_it_uses_for_a_missing_one(kb, bob):
    private = refusal(bob, kb_slug="alice-kb")
    KnowledgeBase.objects.filter(slug="alice-kb").delete()
    missing = refusal(bob, kb_slug="alice-kb")

    assert (private.code, str(private)) == (missing.code, str(missing))
    assert "Alice" not in str(private)


@pytest.mark.parametrize(
    ("options", "code"),
    [({"search_mode": "magic"}, "invalid_option"), ({"top_k": 0}, "invalid_option"), ({"rerank_top_k": 500}, "invalid_option")],
)
def test_it_refuses_invalid_switches(kb, alice, options, code):
    assert refusal(alice, **options).code == code


def test_it_refuses_a_malformed_session_id(kb, alice):
    assert refusal(alice, session="../../etc/passwd").code == "invalid_session"


def test_it_refuses_an_anonymous_user(kb):
    assert refusal(AnonymousUser()).code == "unauthenticated"
