"""Conversation memory: the rolling summary past 20 turns, and episodic recall of one's own past."""

from __future__ import annotations

import pytest

from agentic_rag.llm.testing import FakeReply
from chat.memory import (
    PastTurn,
    extractive_summary,
    key_sentence,
    memory_retrieve,
    remember_exchange,
    split_for_summary,
    summarise_conversation,
    unsummarised_turns,
)
from chat.models import Conversation, ConversationSummary, MemoryEntry, Message, Role
from chat.pipeline import ChatOptions, ChatRequest, run_chat
from chat.tests.conftest import Events, model_router


def make_exchanges(conversation: Conversation, count: int) -> list[Message]:
    """`count` question-and-answer pairs; returns the answers."""
    answers = []
    for i in range(1, count + 1):
        Message.objects.create(conversation=conversation, role=Role.USER, content=f"Question {i} about topic{i}?")
        answers.append(Message.objects.create(
            conversation=conversation, role=Role.ASSISTANT,
            content=f"Some preamble. Topic{i} is answered by fact {i}. Closing words.",
        ))
    return answers


@pytest.fixture
def conversation(alice):
    return Conversation.objects.create(user=alice, session_id="long")


@pytest.mark.parametrize(("count", "summarised", "kept"), [(20, 0, 20), (21, 12, 9), (30, 18, 12)])
def test_it_splits_the_oldest_sixty_percent_past_twenty_turns(count, summarised, kept):
    turns = [PastTurn(f"q{i}", f"a{i}", i) for i in range(count)]
    old, recent = split_for_summary(turns, threshold=20, share=0.6)
    assert (len(old), len(recent)) == (summarised, kept)
    assert old + recent == turns


def test_the_extractive_summary_keeps_the_key_sentence_of_each_answer():
    answer = "Thanks for asking. The circuit breaker opens after 10% failures [1]. Anything else?"
    assert key_sentence(answer, "When does the circuit breaker open?") == "The circuit breaker opens after 10% failures."
    summary = extractive_summary("Earlier: greetings.", [PastTurn("When does the breaker open? Tell me.", answer, 2)])
    assert summary.splitlines() == [
        "Earlier: greetings.",
        "The user asked: When does the breaker open? Answer: The circuit breaker opens after 10% failures.",
    ]


@pytest.mark.django_db
def test_the_twenty_first_turn_triggers_the_summary(alice, conversation, docs_kb, extractive):
    answers = make_exchanges(conversation, 20)
    request = ChatRequest(alice, "long", "When does the circuit breaker open?", ChatOptions(kb_slug=docs_kb.slug))
    run_chat(request, emit=Events(), llm=extractive)

    summary = ConversationSummary.objects.get(conversation=conversation)
    assert (summary.turns, summary.method) == (12, "extractive")
    assert summary.until_message_id == answers[11].pk
    assert "Topic12 is answered by fact 12." in summary.text and "topic13" not in summary.text.lower()
    assert len(unsummarised_turns(conversation, summary.until_message_id)) == 9


@pytest.mark.django_db
def test_twenty_turns_are_not_summarised(alice, conversation, docs_kb, extractive):
    make_exchanges(conversation, 19)
    request = ChatRequest(alice, "long", "When does the circuit breaker open?", ChatOptions(kb_slug=docs_kb.slug))
    run_chat(request, emit=Events(), llm=extractive)
    assert not ConversationSummary.objects.filter(conversation=conversation).exists()


@pytest.mark.django_db
def test_the_next_turn_loads_the_summary_and_the_kept_turns(alice, conversation, docs_kb, fake_server, extractive):
    make_exchanges(conversation, 21)
    summarise_conversation(conversation, llm=extractive)
    fake_server.reply("The breaker opens at 10% failures [1].")
    events = Events()
    # Rewriting is off: the fake model's reply would become the search query, and what the
    # model is asked to answer is what this test reads.
    options = ChatOptions(kb_slug=docs_kb.slug, enable_query_rewrite=False)
    request = ChatRequest(alice, "long", "When does the circuit breaker open?", options)
    run_chat(request, emit=events, llm=model_router(fake_server))
    assert events.stage_end("memory")["detail"] == "9 earlier turns, 12 summarised"
    prompt = fake_server.chat_requests[-1].messages[-1]["content"]
    assert "<memory>Earlier in this conversation: The user asked: Question 1 about topic1?" in prompt


@pytest.mark.django_db
def test_the_summary_uses_the_model_when_one_is_configured(conversation, fake_server):
    make_exchanges(conversation, 21)
    fake_server.reply("The user asked about twelve topics; each had one fact.")
    summary = summarise_conversation(conversation, llm=model_router(fake_server))
    assert (summary.method, summary.text) == ("llm", "The user asked about twelve topics; each had one fact.")
    assert "Question 12 about topic12?" in fake_server.chat_requests[-1].messages[-1]["content"]


@pytest.mark.django_db
def test_a_model_that_replies_only_reasoning_leaves_the_summary_to_the_rules(conversation, fake_server):
    make_exchanges(conversation, 21)
    fake_server.default = FakeReply(text="<think>Twelve topics; I should group them by")
    summary = summarise_conversation(conversation, llm=model_router(fake_server))
    assert summary.method == "extractive" and "Question 1 about topic1?" in summary.text
    assert "Extractive answer" not in summary.text and "think" not in summary.text


@pytest.mark.django_db
def test_episodic_recall_returns_only_the_users_own_memories(alice, bob):
    for user, session, answer in [(alice, "a1", "Alice's breaker opens at 10% failures."),
                                  (bob, "b1", "Bob's breaker opens at 50% failures.")]:
        conversation = Conversation.objects.create(user=user, session_id=session)
        Message.objects.create(conversation=conversation, role=Role.USER, content="When does the circuit breaker open?")
        reply = Message.objects.create(conversation=conversation, role=Role.ASSISTANT, content=answer)
        remember_exchange(reply)
    assert MemoryEntry.objects.count() == 2

    recalled = memory_retrieve(alice, "When does the circuit breaker open?", k=5)
    assert [r.answer for r in recalled] == ["Alice's breaker opens at 10% failures."]
    assert recalled[0].similarity >= 0.5
    assert [r.answer for r in memory_retrieve(bob, "When does the circuit breaker open?", k=5)] == [
        "Bob's breaker opens at 50% failures."
    ]


@pytest.mark.django_db
def test_episodic_recall_skips_unrelated_memories(alice):
    conversation = Conversation.objects.create(user=alice, session_id="s")
    Message.objects.create(conversation=conversation, role=Role.USER, content="When does the circuit breaker open?")
    reply = Message.objects.create(conversation=conversation, role=Role.ASSISTANT, content="At 10% failures.")
    remember_exchange(reply)
    assert memory_retrieve(alice, "Recommend a sourdough bread recipe with rye flour", k=3) == []


@pytest.mark.django_db
def test_a_chat_in_another_session_recalls_the_earlier_answer(alice, docs_kb, fake_server, extractive):
    first = ChatRequest(alice, "one", "When does the circuit breaker open?", ChatOptions(kb_slug=docs_kb.slug))
    run_chat(first, emit=Events(), llm=extractive)
    assert MemoryEntry.objects.filter(user=alice).count() == 1
    fake_server.reply("It opens at 10% [1].")
    events = Events()
    second = ChatRequest(alice, "two", "When does the circuit breaker open again?", ChatOptions(kb_slug=docs_kb.slug))
    run_chat(second, emit=events, llm=model_router(fake_server))
    assert events.stage_end("memory")["detail"] == "0 earlier turns, 1 recalled"
    assert "From an earlier conversation: Q: When does the circuit breaker open?" in (
        fake_server.chat_requests[-1].messages[-1]["content"]
    )


@pytest.mark.django_db
def test_clearing_the_messages_drops_the_summary(conversation, extractive):
    make_exchanges(conversation, 21)
    summarise_conversation(conversation, llm=extractive)
    conversation.messages.all().delete()
    from chat.memory import summary_of

    assert summary_of(conversation) is None
    assert not ConversationSummary.objects.exists()
