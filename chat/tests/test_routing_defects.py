"""Routing defects found by probing: greetings with a clause, written-out arithmetic, and
tools that took document questions on a shared word."""

from __future__ import annotations

import pytest

from chat.pipeline.intent import rule_intents
from chat.tests.conftest import ingest_docs
from chat.tests.test_pipeline import ask

ALL_TOOLS = frozenset({"weather", "currency", "calculator", "datetime", "system_metrics"})


@pytest.mark.parametrize(
    ("message", "topic"),
    [("hello, who are you?", "about"), ("你好，你是谁", "about"), ("hi there, what can you do?", "help"),
     ("Hey! thanks", "thanks"), ("您好，帮助", "help")],
)  # fmt: skip
def test_a_greeting_followed_by_a_system_clause_is_system(message, topic):
    result = rule_intents(message, tools=ALL_TOOLS)
    assert [(i.name, i.topic) for i in result.intents] == [("SYSTEM", topic)]


def test_a_greeting_followed_by_a_question_is_a_kb_question():
    result = rule_intents("hello, what is the RRF constant?", tools=ALL_TOOLS)
    assert [i.name for i in result.intents] == ["KB"]


@pytest.mark.parametrize("message", ["sqrt(144) + 2**3", "log(100)", "3^2", "abs(-5)*2", "pow(2, 10)"])
def test_function_calls_and_powers_reach_the_calculator(message):
    assert rule_intents(message, tools=ALL_TOOLS).tools == ("calculator",)


@pytest.mark.parametrize(
    "message",
    ["what is the global rate limit in QPS?", "限流的 QPS 是多少？", "What latency does the chat pipeline aim for?",
     "What temperature is used for creative tasks?", "内存索引占多少内存？"],
)  # fmt: skip
def test_a_document_question_sharing_a_tool_word_stays_with_the_kb(message):
    result = rule_intents(message, tools=ALL_TOOLS)
    assert result.tools == () and result.wants_kb


@pytest.mark.parametrize(
    ("message", "tool"),
    [("what is the current QPS?", "system_metrics"), ("当前系统负载", "system_metrics"),
     ("how much memory is this server using right now?", "system_metrics"),
     ("What is the temperature in Paris today?", "weather"), ("北京天气怎么样", "weather"), ("明天上海气温", "weather")],
)  # fmt: skip
def test_a_question_for_live_data_still_reaches_its_tool(message, tool):
    assert rule_intents(message, tools=ALL_TOOLS).tools == (tool,)


@pytest.mark.django_db
def test_the_pipeline_answers_a_greeting_with_a_clause_and_a_written_expression(kb, alice, extractive, events):
    ingest_docs(kb)

    greeting = ask(alice, "hello, who are you?", emit=events, llm=extractive)
    arithmetic = ask(alice, "sqrt(144) + 2**3", emit=events, llm=extractive)

    assert greeting.shortcut == "B" and "no words to search for" not in greeting.answer
    assert arithmetic.tools == ("calculator",) and "= 20" in arithmetic.answer
