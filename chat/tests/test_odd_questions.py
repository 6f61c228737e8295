"""Questions of odd shapes asked through the API: each is answered, or refused with a reason in
the API's error shape, never a 500, and an answer never arrives empty."""

from __future__ import annotations

import pytest
from django.urls import reverse

from .web_factories import ingest

pytestmark = pytest.mark.django_db(transaction=True)  # as a request runs: no test transaction around it

CHAT = reverse("api-chat")

ODD_QUESTIONS = {
    "one character": "?",
    "one Chinese character": "库",
    "languages mixed in one sentence": "hybrid search 的 RRF 常数 is what？",
    "full-width punctuation only": "？？？！！！，。",
    "only code": "def retrieve(kb, query):\n    return hybrid(kb, query, top_k=10)\n",
    "only a table row": "| rrf_k | 60 | the RRF constant |",
    "2,000 characters": ("How are documents chunked and indexed for hybrid search? " * 40)[:2000],
    "emoji and symbols": "🔥🔥 → ∑ ≠ ∞ ??",
}


@pytest.mark.parametrize("question", list(ODD_QUESTIONS.values()), ids=list(ODD_QUESTIONS))
def test_an_odd_question_is_answered_or_refused_clearly(alice_client, kb, alice, question):
    ingest(kb, alice)

    response = alice_client.post(CHAT, {"message": question, "kb": kb.slug}, content_type="application/json")

    assert response.status_code in (200, 400), response.content[:300]
    body = response.json()
    if response.status_code == 400:
        assert body["error"]["message"].strip()
    else:
        assert body["answer"].strip(), body


def test_a_question_past_the_length_limit_is_refused_naming_the_limit(alice_client, kb, alice, settings):
    ingest(kb, alice)

    too_long = "x" * (settings.CHAT_MAX_MESSAGE_CHARS + 1)
    response = alice_client.post(CHAT, {"message": too_long, "kb": kb.slug}, content_type="application/json")

    assert response.status_code == 400
    assert str(settings.CHAT_MAX_MESSAGE_CHARS) in response.json()["error"]["message"].replace(",", "")
