from __future__ import annotations

import json

import pytest

from chat.pipeline.rewrite import rewrite_query, rewrite_rules, split_compound, strip_fillers, topic_of
from chat.pipeline.state import Turn
from chat.tests.conftest import model_router
from chat.tests.test_intent import DictCache


def history(*questions: str) -> tuple[Turn, ...]:
    return tuple(turn for q in questions for turn in (Turn("user", q), Turn("assistant", "An answer.")))


@pytest.mark.parametrize(
    ("message", "expected"),
    [("请问什么是混合检索？", "什么是混合检索？"), ("我想知道架桥机进场要求", "架桥机进场要求"),
     ("Can you tell me what BM25 is?", "What BM25 is?"), ("Hello, what is the quality gate?", "What is the quality gate?"),
     ("please explain RRF, thanks", "explain RRF"), ("介绍一下混合检索吧", "介绍混合检索")],
)  # fmt: skip
def test_it_strips_fillers(message, expected):
    assert strip_fillers(message) == expected


@pytest.mark.parametrize(
    ("question", "topic"),
    [("What is BM25?", "BM25"), ("什么是混合检索？", "混合检索"), ("混合检索有什么优点？", "混合检索"),
     ("How does hybrid search fuse BM25 and vectors?", "hybrid search"), ("How do circuit breakers work?", "circuit breakers"),
     ("Tell me about the quality gate", "quality gate"), ("混合检索的权重是多少？", "混合检索"), ("Why?", "")],
)  # fmt: skip
def test_it_finds_the_topic_of_a_question(question, topic):
    assert topic_of(question) == topic


@pytest.mark.parametrize(
    ("message", "earlier", "expected", "rule"),
    [("How does it rank documents?", ("What is BM25?",), "How does BM25 rank documents?", "coreference"),
     ("它有什么优点？", ("什么是混合检索？",), "混合检索有什么优点？", "coreference"),
     ("那向量检索呢？", ("混合检索有什么优点？",), "向量检索有什么优点？", "ellipsis"),
     ("What about vector search?", ("How does BM25 rank documents?",), "How does vector search rank documents?", "ellipsis"),
     ("Does it support Chinese?", ("What is BM25?", "What is the quality gate?"), "Does quality gate support Chinese?", "coreference")],
)  # fmt: skip
def test_it_resolves_pronouns_and_ellipsis_with_the_last_turns(message, earlier, expected, rule):
    rewrite = rewrite_rules(message, history(*earlier))

    assert rewrite.query == expected and rule in rewrite.changes and rewrite.method == "rules"


def test_it_only_looks_back_three_turns():
    turns = history("What is BM25?", "Hi", "Thanks", "OK")

    assert rewrite_rules("How does it rank?", turns).query == "How does it rank?"


def test_it_leaves_a_pronoun_alone_without_history():
    assert rewrite_rules("How does it rank documents?").query == "How does it rank documents?"


@pytest.mark.parametrize(
    ("message", "parts"),
    [("BM25和向量检索有什么区别？", ["BM25", "向量检索"]), ("BM25与RRF的原理", ["BM25的原理", "RRF的原理"]),
     ("BM25 vs vector search", ["BM25", "vector search"]),
     ("What is the difference between BM25 and vector search?", ["What is BM25?", "What is vector search?"]),
     ("What is BM25 and how does RRF work?", ["What is BM25", "how does RRF work?"]),
     ("How does hybrid search fuse BM25 and vectors?", ["How does hybrid search fuse BM25?", "How does hybrid search fuse vectors?"]),
     ("数据总和是多少", []), ("What is hybrid search?", [])],
)  # fmt: skip
def test_it_splits_compound_questions_on_and_with_vs(message, parts):
    assert split_compound(message) == parts


def test_it_searches_the_whole_question_first_then_its_parts():
    rewrite = rewrite_rules("BM25和向量检索有什么区别？")

    assert rewrite.queries == ("BM25和向量检索有什么区别？", "BM25", "向量检索") and "split" in rewrite.changes


def test_it_rewrites_with_the_model_and_caches_by_message_and_history(fake_server):
    fake_server.reply(json.dumps({"query": "How does BM25 rank documents?", "sub_queries": []}))
    cache, turns = DictCache(), history("What is BM25?")

    first = rewrite_query("how does it rank stuff", turns, llm=model_router(fake_server), cache=cache)
    again = rewrite_query("how does it rank stuff", turns, llm=model_router(fake_server), cache=cache)
    other = rewrite_query("how does it rank stuff", history("What is RRF?"), llm=model_router(fake_server), cache=cache)

    assert first.method == "llm" and first.queries == ("How does BM25 rank documents?",)
    assert again.method == "cache" and again.query == first.query
    assert other.method == "llm"  # another history is another cache entry
    sent = fake_server.chat_requests[0].messages[-1]["content"]
    assert "What is BM25?" in sent and "how does it rank stuff" in sent


def test_it_falls_back_to_the_rules_when_the_model_fails(fake_server):
    fake_server.fail(401)

    rewrite = rewrite_query("请问BM25和向量检索有什么区别？", (), llm=model_router(fake_server), cache=DictCache())

    assert rewrite.method == "fallback"
    assert rewrite.queries == ("BM25和向量检索有什么区别？", "BM25", "向量检索")


def test_it_uses_the_rules_without_a_model(extractive, fake_server):
    rewrite = rewrite_query("请问什么是RRF？", (), llm=extractive, cache=DictCache())

    assert rewrite.method == "rules" and rewrite.query == "什么是RRF？"
