"""A question naming something its KB never mentions is answered "not found", naming it."""

from __future__ import annotations

import re

import pytest

from agentic_rag.llm.testing import FakeReply
from chat.pipeline import ChatOptions, ChatRequest, run_chat
from chat.tests.conftest import Events, ingest_docs, model_router
from knowledge.models import KnowledgeBase

pytestmark = pytest.mark.django_db(transaction=True)

P99 = "What p99 latency does hybrid search target?"
NEVER_P99 = "Not found in the knowledge base “Alice's KB”: it never mentions p99."


def ask(user, message, llm, kb="alice-kb", **options):
    events = Events()
    return run_chat(ChatRequest(user, None, message, ChatOptions(kb_slug=kb, **options)), emit=events, llm=llm), events


def test_a_name_the_kb_never_mentions_is_not_found_and_named(docs_kb, alice, extractive):
    result, events = ask(alice, P99, extractive)

    assert result.shortcut is None and result.evidence, "the search found passages: the reader decided"
    assert NEVER_P99 in result.answer
    assert "The closest passages: hybrid.md" in result.answer
    assert not result.citations
    assert "never in the KB: p99" in events.stage_end("prompt")["detail"]


def test_a_chinese_question_is_told_in_chinese(docs_kb, alice, extractive):
    result, _ = ask(alice, "架桥机进场前的 p99 延迟是多少？", extractive)

    assert "知识库「Alice's KB」中没有找到：资料中没有提到 p99。" in result.answer and not result.citations


@pytest.mark.parametrize("written", ["P99", "P99_LATENCY_MS", "tp99"])
def test_the_same_question_is_answered_where_the_kb_mentions_the_name(kb, alice, extractive, written):
    ingest_docs(kb, {"hybrid.md": "# 1 Hybrid search\n\nHybrid search fuses the BM25 ranking and the vector ranking. "
                                  f"Its {written} latency target for hybrid search is 300 ms."})

    result, _ = ask(alice, P99, extractive)

    assert "never mentions" not in result.answer
    assert "300 ms" in result.answer and result.citations


def test_only_the_kb_the_user_searches_is_read(docs_kb, alice, bob, extractive):
    bobs = KnowledgeBase.objects.create(slug="bobs", name="Bob's", owner=bob, visibility="public")
    ingest_docs(bobs, {"slo.md": "# 1 Hybrid search\n\nThe p99 latency target of hybrid search is 300 ms."})

    mine, _ = ask(alice, P99, extractive)
    bobs_answer, _ = ask(alice, P99, extractive, kb="bobs")

    assert NEVER_P99 in mine.answer
    assert "never mentions" not in bobs_answer.answer and "300 ms" in bobs_answer.answer


def test_an_english_question_in_ordinary_words_over_a_chinese_kb_is_answered(kb, alice, extractive):
    ingest_docs(kb, {"熔断.md": "# 1 熔断器\n\n熔断器在失败率超过10%时打开，五分钟后进入半开状态。"})

    # The gate off, so the passage reaches the reader whatever the cross-language search makes of it.
    result, events = ask(alice, "When does the circuit breaker open, at what failure rate?", extractive,
                         min_evidence_coverage=0.0)

    assert result.evidence and "never in the KB" not in events.stage_end("prompt")["detail"]
    assert "never mentions" not in result.answer


def test_in_a_compound_question_only_the_part_naming_it_is_not_found(docs_kb, alice, extractive):
    result, _ = ask(alice, "When does the circuit breaker open, and what p99 latency does hybrid search target?",
                    extractive)

    first, second = re.split(r"\*\*\d+\. [^*]+\*\*", result.answer)[1:]
    assert "10%" in first and re.search(r"\[\d+\]", first) and "never mentions" not in first
    assert "it never mentions p99" in second and not re.search(r"\[\d+\]", second)


def test_a_model_is_told_which_names_the_kb_never_mentions(docs_kb, alice, fake_server):
    fake_server.default = FakeReply(text="The knowledge base does not mention p99.")

    ask(alice, P99, model_router(fake_server), enable_query_rewrite=False)
    told = _answer_prompt(fake_server)
    ask(alice, "How does hybrid search fuse the rankings?", model_router(fake_server), enable_query_rewrite=False)
    untold = _answer_prompt(fake_server)

    assert '<unmentioned_names kb="Alice\'s KB"><name>p99</name></unmentioned_names>' in told[-1]["content"]
    assert "never mentions" in told[0]["content"]
    assert all("unmentioned_names" not in m["content"] for m in untold)


def _answer_prompt(server) -> list[dict[str, str]]:
    """The messages of the last request that asked for the answer (not a rewrite or an intent)."""
    return next(r.messages for r in reversed(server.chat_requests) if any("<question>" in m["content"] for m in r.messages))
