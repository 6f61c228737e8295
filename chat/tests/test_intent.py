from __future__ import annotations

import json

import pytest

from agentic_rag.llm.testing import FakeReply
from chat.pipeline.intent import classify_intent, is_vague, parse_llm_intents, rule_intents
from chat.pipeline.state import Turn
from chat.tests.conftest import model_router

TOOLS = frozenset({"weather", "currency", "calculator"})


class DictCache(dict):
    def get(self, key, default=None):
        return super().get(key, default)

    def set(self, key, value, timeout=None):
        self[key] = value


@pytest.mark.parametrize(
    ("message", "topic"),
    [("你好", "greeting"), ("Hello!", "greeting"), ("hi there", "greeting"), ("帮助", "help"),
     ("What can you do?", "help"), ("你是谁？", "about"), ("Who are you", "about"), ("谢谢！", "thanks"),
     ("thank you", "thanks"), ("Hello, how are you?", "greeting"), ("好的", "ack"), ("OK!", "ack")],
)  # fmt: skip
def test_it_classifies_greetings_help_and_thanks_as_system(message, topic):
    result = rule_intents(message)

    assert [(i.name, i.topic) for i in result.intents] == [("SYSTEM", topic)]
    assert result.is_all_system and result.method == "rules"


@pytest.mark.parametrize(
    ("message", "tools"),
    [("北京今天天气怎么样", ("weather",)), ("What's the USD exchange rate?", ("currency",)),
     ("计算 3 + 4 * 2", ("calculator",)), ("weather in Paris and the USD rate", ("currency", "weather"))],
)  # fmt: skip
def test_it_maps_tool_keywords_to_the_tools_the_channel_offers(message, tools):
    result = rule_intents(message, tools=TOOLS)

    assert result.tools == tools
    assert all(i.name == "TOOL" and i.confidence == 0.85 for i in result.intents)


@pytest.mark.parametrize(
    ("message", "tools"),
    [("100 美元等于多少人民币", ("currency",)), ("帮我计算一下100美元是多少欧元", ("currency",)),
     ("查询北京天气", ("weather",)), ("100 * 3 美元等于多少人民币", ("calculator", "currency")),
     ("等于多少", ("calculator",)), ("查询一下", ("knowledge_lookup",))],
)  # fmt: skip
def test_generic_words_yield_to_the_specific_tool_a_message_names(message, tools):
    offered = TOOLS | {"knowledge_lookup"}

    assert rule_intents(message, tools=offered).tools == tools


def test_it_ignores_keywords_of_tools_the_channel_does_not_offer():
    result = rule_intents("北京今天天气怎么样", tools=frozenset())

    assert [(i.name, i.confidence) for i in result.intents] == [("KB", 0.7)]


@pytest.mark.parametrize(
    "message",
    ["What is hybrid search?", "你好，什么是BM25？", "混合检索的权重是多少", "BM25呢"],
)
def test_it_defaults_to_the_kb_with_confidence_0_7(message):
    result = rule_intents(message)

    assert [(i.name, i.confidence) for i in result.intents] == [("KB", 0.7)]
    assert result.detail == "default"


@pytest.mark.parametrize(("message", "vague"), [("它呢？", True), ("what about it?", True), ("继续", True),
                                                 ("BM25呢", False), ("那向量检索呢", False), ("RRF?", False)])
def test_it_tells_vague_messages_from_ones_with_a_subject(message, vague):
    assert is_vague(message) is vague


def test_it_lowers_confidence_for_a_vague_message_only_without_history():
    history = (Turn("user", "What is BM25?"), Turn("assistant", "A ranking function."))

    assert rule_intents("它呢？").top.confidence == 0.4
    assert rule_intents("它呢？", history).top.confidence == 0.7


def test_it_keeps_the_rules_without_a_model(extractive):
    result = classify_intent("What is hybrid search?", (), llm=extractive, cache=DictCache())

    assert result.method == "rules"


def test_it_asks_the_model_when_the_rules_say_default_and_caches_the_answer(fake_server):
    reply = {"intents": [{"name": "KB", "confidence": 0.9}, {"name": "TOOL", "tool": "weather", "confidence": 0.4}]}
    fake_server.reply(json.dumps(reply))
    cache = DictCache()

    first = classify_intent("Is it raining in the docs?", (), llm=model_router(fake_server), cache=cache, tools=TOOLS)
    second = classify_intent("Is it raining in the docs?", (), llm=model_router(fake_server), cache=cache, tools=TOOLS)

    assert first.method == "llm" and [(i.name, i.tool, i.confidence) for i in first.intents] == [
        ("KB", "", 0.9), ("TOOL", "weather", 0.4)]
    assert second.method == "cache" and second.intents == first.intents
    assert len(fake_server.chat_requests) == 1


def test_a_cached_classification_is_shared_only_by_the_same_conversation(fake_server):
    # The model reads the recent turns, so what it said in one conversation is not another's answer.
    fake_server.default = FakeReply(text=json.dumps({"intents": [{"name": "KB", "confidence": 0.9}]}))
    cache, message = DictCache(), "Is it raining in the docs?"
    alices = (Turn("user", "What does the runbook say about storms?"), Turn("assistant", "It says stay in."))

    classify_intent(message, alices, llm=model_router(fake_server), cache=cache, tools=TOOLS)
    bobs = classify_intent(message, (), llm=model_router(fake_server), cache=cache, tools=TOOLS)
    again = classify_intent(message, alices, llm=model_router(fake_server), cache=cache, tools=TOOLS)

    assert bobs.method == "llm" and again.method == "cache" and len(fake_server.chat_requests) == 2


def test_a_reply_without_an_answer_keeps_the_rules_and_caches_nothing(fake_server):
    fake_server.default = FakeReply(text="<think>Is this about the weather or the documents? It")
    cache = DictCache()

    result = classify_intent("Is it raining in the docs?", (), llm=model_router(fake_server), cache=cache, tools=TOOLS)

    assert result.method == "rules" and "no answer" in result.detail and not cache


def test_it_falls_back_to_the_rules_when_the_model_fails(fake_server):
    fake_server.fail(401)  # fails fast; the router's extractive fallback cannot classify

    result = classify_intent("What is hybrid search?", (), llm=model_router(fake_server), cache=DictCache())

    assert result.method == "rules" and result.detail.startswith("llm failed")
    assert [(i.name, i.confidence) for i in result.intents] == [("KB", 0.7)]


def test_it_does_not_ask_the_model_when_a_rule_matched(fake_server):
    result = classify_intent("你好", (), llm=model_router(fake_server), cache=DictCache())

    assert result.is_all_system and fake_server.chat_requests == []


def test_it_drops_malformed_or_unknown_intents_from_a_model_reply():
    reply = {"intents": ["KB", {"name": "kb", "confidence": "0.8"}, {"name": "TOOL", "tool": "nope"},
                         {"name": "SYSTEM", "confidence": 3}]}

    intents = parse_llm_intents(reply, TOOLS)

    assert [(i.name, i.confidence) for i in intents] == [("SYSTEM", 1.0), ("KB", 0.8)]
    with pytest.raises(ValueError):
        parse_llm_intents({"intents": "KB"}, TOOLS)


def test_it_reads_a_fenced_json_reply(fake_server):
    fake_server.script(FakeReply(text='```json\n{"intents": [{"name": "SYSTEM", "confidence": 0.8}]}\n```'))

    result = classify_intent("Quick one about you", (), llm=model_router(fake_server), cache=DictCache())

    assert result.method == "llm" and result.is_all_system
