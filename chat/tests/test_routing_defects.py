"""Routing defects found by probing: greetings with a clause, written-out arithmetic, and
tools that took document questions on a shared word."""

from __future__ import annotations

import builtins
import io
import json

import pytest
from django.core.management import call_command

from chat.pipeline.intent import rule_intents
from chat.pipeline.state import Turn
from chat.tests.conftest import ingest_docs
from chat.tests.test_pipeline import ask
from chat.tools import calculator
from chat.tools.calculator import evaluate, handle

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


# --- a greeting with a clause: more ways people write it --------------------------------------


@pytest.mark.parametrize(
    ("message", "topic"),
    [("Hello, can you help me?", "help"), ("你好！请问你是谁？", "about"), ("hey there - what can you do?", "help"),
     ("hello, please help", "help"), ("hi, who made you?", "about"), ("hello there, who are you exactly?", "about"),
     ("你好，请问你能做什么？", "help"), ("hey, what's up", "greeting")],
)  # fmt: skip
def test_a_greeting_with_a_courteous_or_dashed_clause_is_system(message, topic):
    result = rule_intents(message, tools=ALL_TOOLS)

    assert [(i.name, i.topic) for i in result.intents] == [("SYSTEM", topic)]


def test_a_greeting_before_words_the_search_cannot_use_is_a_greeting_unless_history_gives_them_a_subject():
    history = (Turn("user", "What is BM25?"), Turn("assistant", "A ranking function."))

    assert [(i.name, i.topic) for i in rule_intents("hello, what about it?").intents] == [("SYSTEM", "greeting")]
    assert rule_intents("hello, what about it?", history).wants_kb


@pytest.mark.parametrize(
    "message", ["hi! how does hybrid search work?", "嗨，RRF 是什么", "hello, how does the circuit breaker work?"]
)
def test_a_greeting_before_a_document_question_still_searches(message):
    result = rule_intents(message, tools=ALL_TOOLS)

    assert [i.name for i in result.intents] == ["KB"] and result.detail == "default"


# --- written expressions reach the calculator, formulas from the documents do not -------------


@pytest.mark.parametrize(
    ("expression", "value"),
    [("3^2", 9), ("2^10", 1024), ("2^3^2", 512), ("-2^2", -4), ("(1+2)^2", 9), ("sqrt(144) + 2**3", 20),
     ("abs(-5)*2", 10), ("log(100, 10)", 2)],
)  # fmt: skip
def test_a_caret_is_a_power_as_people_write_it_not_xor(expression, value):
    assert evaluate(expression) == pytest.approx(value)


def test_the_calculator_never_calls_eval_or_exec(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("eval/exec called")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)

    assert handle({"expression": "sqrt(144) + 2^3"}) == "sqrt(144) + 2**3 = 20"
    assert "Unknown function '__import__'" in handle({"expression": "__import__('os')"})


@pytest.mark.parametrize(
    ("message", "expression"),
    [("hello, what is 2+2?", "2+2"), ("hi there: what is sqrt(16)?", "sqrt(16)"), ("你好，3^2 等于多少", "3**2"),
     ("pi * 2", "pi * 2"), ("e * 2", "e * 2"), ("3的平方", "3**2"), ("5 squared", "5**2"), ("2 cubed", "2**3"),
     ("计算 10 - 3 的结果", "10 - 3")],
)  # fmt: skip
def test_it_finds_the_expression_after_a_greeting_and_reads_constants_and_squares(message, expression):
    assert calculator.extract(message) == {"expression": expression}
    assert rule_intents(message, tools=ALL_TOOLS).tools == ("calculator",)


@pytest.mark.parametrize(
    "message",
    ["what is bm25 + vector", "what is 0.7 * vector + 0.3 * bm25?", "1/(60 + rank)", "hello, 2, 3", "2 + sqrt",
     "100平方米", "3的平方根"],
)  # fmt: skip
def test_formulas_naming_things_from_the_documents_are_not_calculations(message):
    assert calculator.extract(message) is None
    assert "calculator" not in rule_intents(message, tools=ALL_TOOLS).tools


@pytest.mark.parametrize(
    "message",
    ["RRF 分数怎么计算", "how is the fusion score calculated?", "按照 GB 50204-2015 执行混凝土结构验收",
     "what changed in the 2024-01-15 release?"],
)  # fmt: skip
def test_a_calculator_word_or_a_dash_between_numbers_in_a_document_question_stays_with_the_kb(message):
    result = rule_intents(message, tools=ALL_TOOLS)

    assert result.tools == () and result.wants_kb


# --- tools with data of their own answer only for live data, never about the documents ---------


@pytest.mark.parametrize(
    "message",
    ["what is the current QPS limit?", "当前限流是多少 QPS", "系统的延迟预算是多少？", "How is the weather tool implemented?",
     "does the weather tool use real data?", "what is the exchange rate source used by the currency tool?",
     "what time does the nightly job run?", "what's the time zone setting?", "任务什么时间执行？",
     "how many requests per user does the rate limiter allow right now?",
     "What temperature does the pipeline use in generation?"],
)  # fmt: skip
def test_a_question_about_a_documented_value_or_a_tool_itself_stays_with_the_kb(message):
    result = rule_intents(message, tools=ALL_TOOLS)

    assert result.tools == () and result.wants_kb


@pytest.mark.parametrize(
    ("message", "tool"),
    [("how many requests right now", "system_metrics"), ("当前 CPU 和内存", "system_metrics"),
     ("北京几点", "datetime"), ("现在什么时间", "datetime"), ("what time is it in Tokyo?", "datetime"),
     ("use the weather tool for Paris", "weather"), ("用天气工具查一下上海天气", "weather"),
     ("100 USD to CNY", "currency"), ("what is the temperature in paris", "weather")],
)  # fmt: skip
def test_a_request_for_live_data_or_to_use_the_tool_reaches_it(message, tool):
    assert rule_intents(message, tools=ALL_TOOLS).tools == (tool,)


# --- end to end --------------------------------------------------------------------------------

LIMITS_DOC = {
    "limits.md": "# 1 Rate limits\n\nThe global rate limit is 1000 QPS with a token bucket. Each user may send "
    "10 QPS and each session 5 QPS; beyond that the API answers 429.",
}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("message", "says"),
    [("Hello, can you help me?", "Pick a knowledge base"), ("你好！请问你是谁？", "我是 Agentic RAG"),
     ("hey there - what can you do?", "Pick a knowledge base")],
)  # fmt: skip
def test_the_pipeline_answers_a_greeting_with_a_clause_by_shortcut_b(kb, alice, extractive, events, message, says):
    ingest_docs(kb)

    result = ask(alice, message, emit=events, llm=extractive)

    assert result.shortcut == "B" and result.intent == "SYSTEM" and says in result.answer
    assert "retrieval" not in events.types()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("message", "says"),
    [("log(100)", "log(100) = 4.605170186"), ("3^2", "3**2 = 9"), ("abs(-5)*2", "abs(-5)*2 = 10"),
     ("hello, what is 2+2?", "2+2 = 4"), ("pi * 2", "pi * 2 = 6.283185307")],
)  # fmt: skip
def test_the_pipeline_computes_calls_powers_and_a_greeted_sum(alice, extractive, events, message, says):
    result = ask(alice, message, emit=events, kb=None, llm=extractive)

    assert result.tools == ("calculator",) and events.one("tool").data["ok"]
    assert says in result.answer


@pytest.mark.django_db
@pytest.mark.parametrize("message", ["what is the global rate limit in QPS?", "what is the current QPS limit?"])
def test_the_pipeline_answers_a_rate_limit_question_from_the_documents_not_the_live_metrics(
    kb, alice, extractive, events, message
):
    ingest_docs(kb, LIMITS_DOC)

    result = ask(alice, message, emit=events, llm=extractive)

    assert result.intent == "KB" and result.tools == () and "tool" not in events.types()
    assert "1000 QPS" in result.answer and "This deployment" not in result.answer


@pytest.mark.django_db
def test_the_pipeline_answers_a_live_qps_question_with_this_deployments_metrics(kb, alice, extractive, events):
    ingest_docs(kb, LIMITS_DOC)

    result = ask(alice, "what is the current QPS?", emit=events, llm=extractive)

    assert result.tools == ("system_metrics",) and "This deployment, last 60 s" in result.answer
    assert "1000 QPS" not in result.answer


@pytest.mark.django_db
def test_ask_routes_a_greeting_a_power_and_a_documented_limit(kb):
    ingest_docs(kb, LIMITS_DOC)

    def ask_json(message: str) -> dict:
        out = io.StringIO()
        call_command("ask", message, "--kb", "alice-kb", "--json", stdout=out)
        return json.loads(out.getvalue())

    def top_intent(data: dict) -> str:
        return data["intent"]["intents"][0]["name"]

    greeting, power, limit = (ask_json(m) for m in ("你好，你是谁", "2^10", "限流的 QPS 是多少？"))
    assert greeting["shortcut"] == "B" and top_intent(greeting) == "SYSTEM"
    assert [call["name"] for call in power["tools"]] == ["calculator"] and "2**10 = 1024" in power["answer"]
    assert top_intent(limit) == "KB" and limit["tools"] == [] and "1000 QPS" in limit["answer"]
