"""The chat searches through the process's retrieval cache: a repeated question is a hit, a new
document makes the next search a miss, and a user the KB refuses never reaches it."""

from __future__ import annotations

import pytest

from chat.models import Trace
from chat.pipeline import ChatOptions, ChatRefused, ChatRequest, run_chat
from chat.pipeline.retrieval_cache import is_shared_cache, reset_retrieval_cache, retrieval_cache
from chat.tests.conftest import ingest_docs

pytestmark = pytest.mark.django_db

QUESTION = "How does hybrid search fuse the rankings?"


@pytest.fixture(autouse=True)
def fresh_cache():
    reset_retrieval_cache()
    yield
    reset_retrieval_cache()


def ask(user, events, llm, kb_slug="alice-kb"):
    return run_chat(ChatRequest(user, None, QUESTION, ChatOptions(kb_slug=kb_slug, enable_query_rewrite=False)),
                    emit=events, llm=llm)


def kb_spans(result) -> set[str]:
    return set(Trace.objects.get(trace_id=result.trace_id).spans.filter(name__startswith="kb.").values_list("name", flat=True))


def test_a_repeated_question_is_answered_from_the_cache_until_a_document_arrives(docs_kb, alice, extractive, events):
    first = ask(alice, events, extractive)
    again = ask(alice, events, extractive)

    assert again.answer == first.answer and again.citations == first.citations
    assert "kb.cache" in kb_spans(again) and "kb.cache" not in kb_spans(first)
    assert (retrieval_cache().stats().hits, retrieval_cache().stats().misses) == (1, 1)

    ingest_docs(docs_kb, {"rrf.md": "# 1 RRF\n\nHybrid search fuses the rankings by reciprocal rank fusion with k=60."})
    after = ask(alice, events, extractive)

    assert "kb.cache" not in kb_spans(after) and retrieval_cache().stats().misses == 2


def test_a_user_the_kb_refuses_never_reaches_its_cached_results(docs_kb, alice, bob, extractive, events):
    ask(alice, events, extractive)
    before = retrieval_cache().stats()

    with pytest.raises(ChatRefused):
        ask(bob, events, extractive)

    assert retrieval_cache().stats() == before


def test_only_a_cache_the_processes_share_backs_the_local_one():
    assert is_shared_cache("agentic_rag.redis_cache.FailSoftRedisCache")
    assert not is_shared_cache("django.core.cache.backends.locmem.LocMemCache")
    assert not is_shared_cache("django.core.cache.backends.dummy.DummyCache")
