"""The <think> filter: blocks removed whatever the chunk boundaries."""

from __future__ import annotations

from itertools import combinations

import pytest

from agentic_rag.llm import ThinkFilter, strip_think

CASES = [
    ("Hello <think>secret</think> world", "Hello  world"),
    (
        "  <think>x</think> \n Leading space kept before, dropped after",
        "  Leading space kept before, dropped after",
    ),
    ("<think>\nreasoning, a < b\n</think>\n\nThe answer.", "The answer."),
    ("<think>1</think>A<think>2</think>B", "AB"),
    ("no tags here", "no tags here"),
    ("a < b and <thin> or </think> stay", "a < b and <thin> or </think> stay"),
    ("kept<think>unclosed block", "kept"),
    ("ends with a half tag <thi", "ends with a half tag <thi"),
    ("思考<think>让我想想</think>答案是42。", "思考答案是42。"),
]


def run_filter(chunks: list[str]) -> str:
    think = ThinkFilter()
    return "".join(think.feed(chunk) for chunk in chunks) + think.flush()


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_it_removes_think_blocks_at_every_two_way_split(text, expected):
    for cut in range(len(text) + 1):
        assert run_filter([text[:cut], text[cut:]]) == expected, f"split at {cut}"


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_it_removes_think_blocks_at_every_three_way_split(text, expected):
    for first, second in combinations(range(len(text) + 1), 2):
        chunks = [text[:first], text[first:second], text[second:]]
        assert run_filter(chunks) == expected, f"split at {first}, {second}"


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_it_removes_think_blocks_fed_one_character_at_a_time(text, expected):
    assert run_filter(list(text)) == expected


def test_it_emits_visible_text_before_the_stream_ends():
    think = ThinkFilter()
    assert think.feed("Hello <thi") == "Hello "
    assert think.feed("nk>hidden") == ""
    assert think.feed("</think> world") == " world"
    assert think.flush() == ""


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_it_strips_whole_texts(text, expected):
    assert strip_think(text) == expected
