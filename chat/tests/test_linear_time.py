"""The rules a chat message meets before retrieval take time linear in its length.

Python's regex engine holds the GIL while it runs: one pattern that backtracks over a long run
of digits or spaces stalls every request of the process. Each stage must read a message of the
longest size allowed, made of long runs, in a bounded CPU time and give an answer of its usual
shape; each rewritten pattern must match exactly what the pattern it replaced did.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from django.test import override_settings
from hypothesis import strategies as st

from agentic_rag.tests.linear_time_support import MESSAGE_CHARS, cpu_seconds, linear_time_settings, long_texts
from chat import memory
from chat.fact_extraction import extract_facts
from chat.pipeline import citations, intent, rewrite
from chat.pipeline.intent import IntentResult, rule_intents
from chat.pipeline.rewrite import Rewrite, rewrite_rules
from chat.pipeline.tools import get_tool_channel
from chat.routing_kb import auto_agent
from chat.tools import calculator, demo, mcp_client

MESSAGE_SECONDS = 0.25  # a linear stage takes a few ms on a 4,000-character message; a quadratic one, seconds
messages = long_texts(MESSAGE_CHARS)


# The demo tools' rules are read too: a deployment may turn them on.
@override_settings(CHAT_DEMO_TOOLS=True)
def _plan_every_tool(message: str):
    channel = get_tool_channel()
    return channel.plan(message, tuple(sorted(channel.available())))


@override_settings(CHAT_DEMO_TOOLS=True)
def _intents_of_every_tool(message: str) -> IntentResult:
    return rule_intents(message, (), get_tool_channel().available())


STAGES = {
    "rewrite": (rewrite_rules, Rewrite),
    "intent": (_intents_of_every_tool, IntentResult),
    "tools": (_plan_every_tool, list),
    "route": (auto_agent, str),
    "facts": (extract_facts, list),
}


@pytest.mark.parametrize("stage", STAGES)
@linear_time_settings(max_examples=40)
@given(message=messages)
def test_it_reads_a_long_message_in_linear_time(stage, message):
    function, shape = STAGES[stage]
    result, seconds = cpu_seconds(function, message)
    assert isinstance(result, shape)
    assert seconds < MESSAGE_SECONDS, (stage, seconds, message[:40])


@linear_time_settings(max_examples=40)
@given(message=messages)
def test_the_calculator_extracts_from_a_long_message_in_linear_time(message):
    found, seconds = cpu_seconds(calculator.extract, message)
    assert found is None or len(found["expression"]) <= len(message) * 8  # "15% of 200" grows a little
    assert seconds < MESSAGE_SECONDS / 2


# The worst cases found: each took seconds before (a 3,999-digit message stalled the server).
WORST = {
    "digits": "calculate " + "9" * 3990 + "+1",
    "all digits": "9" * MESSAGE_CHARS,
    "digit then spaces": "9" + " " * (MESSAGE_CHARS - 2) + "x",
    "spaces inside": "a" + " " * (MESSAGE_CHARS - 2) + "b",
    "commas inside": "，" * (MESSAGE_CHARS - 1) + "x",
    "tabs before a word": "\t" * (MESSAGE_CHARS - 1) + "x",
    "Chinese": "中" * MESSAGE_CHARS,
    "dashes": "-" * MESSAGE_CHARS,
    "quarter after spaces": "Q" + " " * (MESSAGE_CHARS - 2) + "x",
    "spaces before and": "a" + " " * (MESSAGE_CHARS - 6) + "and x",
}


@pytest.mark.parametrize("message", WORST.values(), ids=WORST.keys())
def test_the_worst_messages_found_pass_every_stage_quickly(message):
    total = 0.0
    for function, _ in STAGES.values():
        total += cpu_seconds(function, message)[1]
    assert total < MESSAGE_SECONDS


def test_the_calculator_reads_four_thousand_digits_in_a_tenth_of_a_second():
    found, seconds = cpu_seconds(calculator.extract, WORST["digits"])
    assert found == {"expression": "9" * 3990 + "+1"}  # found as before; evaluate() refuses its length
    assert seconds < 0.1


@pytest.mark.parametrize("message", ["1+" * 1999 + "1", "-" * 3999 + "1", "1**" * 1333 + "1"])
def test_it_reads_a_sum_too_deep_for_the_parser_without_raising(message):
    # ast.parse raises RecursionError or MemoryError on a few thousand terms, by the stack left.
    assert calculator.extract(message) in (None, {"expression": message})


# --- the rewritten patterns match what they replaced -----------------------------------------

_N = r"(\d+(?:\.\d+)?)"
OLD_SPOKEN = (
    rf"{_N}\s*%\s*of\s*{_N}", rf"{_N}\s*的\s*{_N}\s*%", rf"{_N}\s*的\s*{_N}\s*次方",
    rf"{_N}\s*的?\s*平方|{_N}\s*squared\b", rf"{_N}\s*的?\s*立方|{_N}\s*cubed\b",
)
calculations = st.lists(
    st.sampled_from(["1", "25", ".", "0.", " ", "%", "of", "的", "次方", "平方", "立方", "squared", "cubed", "x", "+", "9"]),
    max_size=12,
).map("".join)


@linear_time_settings(max_examples=400)
@given(text=calculations)
def test_the_spoken_number_patterns_rewrite_as_before(text):
    for (pattern, replacement), old in zip(calculator.SPOKEN, OLD_SPOKEN, strict=False):
        assert pattern.sub(replacement, text) == re.sub(old, replacement, text, flags=re.IGNORECASE)


OLD_CALCULATOR_KEYWORDS = (
    r"计算|算一下|等于多少|\bcalculate\b|\bcompute\b|\d+(?:\.\d+)?\s*[+*×÷^%]\s*\d+|\d\s*%\s*of\s*\d|"
    r"\d\s*的\s*\d+(?:\.\d+)?\s*(?:%|次方)|\d\s*(?:加上?|减去?|乘以?|除以)\s*\d|"
    r"\d\s*(?:times|plus|minus|divided by|multiplied by|to the power of)\s*\d"
)


@linear_time_settings(max_examples=400)
@given(text=st.lists(st.sampled_from(["1", "2.", "5", " ", "+", "^", "%", "of", "的", "次方", "x", "加"]), max_size=10).map("".join))
def test_the_calculator_keywords_find_what_they_found(text):
    found = intent.TOOL_KEYWORDS["calculator"].search(text) is not None
    assert found == (re.search(OLD_CALCULATOR_KEYWORDS, text, re.IGNORECASE) is not None)


OLD_WEATHER = (
    r"天气|今天|明天|后天|现在|当前|本周|下雨|下雪|[\u4e00-\u9fff]{2,}(?:市|的)?(?:气温|温度)|\b(?:weather|forecast|today|"
    r"tomorrow|tonight|now|current(?:ly)?|outside|this week)\b|(?-i:\bin [A-Z][a-z]+)"
)


@linear_time_settings(max_examples=400)
@given(text=st.lists(st.sampled_from(["北", "京", "市", "的", "气温", "温度", "气", "a", " ", "in Paris"]), max_size=10).map("".join))
def test_the_weather_cue_finds_what_it_found(text):
    found = intent.LIVE_ONLY["weather"].search(text) is not None
    assert found == (re.search(OLD_WEATHER, text, re.IGNORECASE) is not None)


# (new pattern, old pattern, flags, alphabet, how the code uses it)
REWRITTEN = {
    "calculator trailing": (calculator._TRAILING, r"[?？!！。:：\s]+$", 0, " ?。:a\n", "sub"),
    "intent trailing": (intent._TRAILING, r"[\s,，.。!！?？~～啊呀呢吧哈嘛:：)）(（]+$", 0, " ,，。a啊)\n", "sub"),
    "rewrite trailing": (rewrite._TRAILING_PUNCT, r"[\s?？!！.。]+$", 0, " ?。a\n", "sub"),
    "filler suffix": (rewrite._FILLER_SUFFIX, r"[\s,，]*(?:啊|呀|吧|哈|嘛|呗)(?=[?？!！。.]*$)", 0, " ,，啊吧?。x\n", "sub"),
    "quarter": (demo._QUARTER, r"\b(20\d\d)?\s*-?\s*Q([1-4])\b|第([一二三四1-4])季度", re.IGNORECASE, "2024 -Qq15x第一季度", "search"),
    "mcp pair": (mcp_client._PAIR, r"(\w+)=(\"[^\"]*\"|'[^']*'|\S+)", 0, "ab_= \"'x", "findall"),
    "memory citation": (memory._CITATION, r"\s*\[\d+\]", 0, " \t[]1a", "sub"),
    "cite attribute": (citations._ATTRIBUTE, r"""([\w-]+)\s*=\s*(?:"([^"]*)"|'([^']*)')""", 0, "a-_= \"'x", "findall"),
}


def _used(pattern: re.Pattern[str], how: str, text: str):
    if how == "search":
        match = pattern.search(text)
        return match and (match.span(), match.groups())
    return pattern.findall(text) if how == "findall" else pattern.sub("", text)


@pytest.mark.parametrize("name", REWRITTEN)
@linear_time_settings(max_examples=300)
@given(data=st.data())
def test_a_rewritten_pattern_matches_what_the_old_one_did(name, data):
    new, old, flags, alphabet, how = REWRITTEN[name]
    text = data.draw(st.text(alphabet=alphabet, max_size=14))
    assert _used(new, how, text) == _used(re.compile(old, flags), how, text)


@linear_time_settings(max_examples=300)
@given(text=st.lists(st.sampled_from([" ", ",", ";", "and", "vs", ".", "versus", "what", "is", "x", "\n", "AND"]), max_size=9)
       .map("".join))
def test_compound_questions_are_split_as_before(text):
    old = r"\s*[,;]?\s+(?:and|vs\.?|versus)\s+(?=(?:what|how|why|when|where|which|who|is|are|does|do|can|should)\b)"
    assert rewrite._CLAUSE_SPLIT.split(text) == re.split(old, text, flags=re.IGNORECASE)


@linear_time_settings(max_examples=300)
@given(text=st.lists(st.sampled_from([" ", ",", "\n", "please", "thanks", "thank", " you", "一下", "x"]), max_size=8).map("".join))
def test_the_filler_words_are_removed_as_before(text):
    old = r"一下|\bplease\b,?\s*|,?\s*\bthanks?\b(?: you)?"
    assert rewrite._FILLER_ANYWHERE.sub("", text) == re.sub(old, "", text, flags=re.IGNORECASE)
