"""The JSON extraction fallback chain of seed 002 §8.2 / §12.1."""

from __future__ import annotations

import pytest

from agentic_rag.llm import extract_json, parse_json_reply
from agentic_rag.llm.json_reply import CANNED_MESSAGE


@pytest.mark.parametrize(
    ("text", "expected", "step"),
    [
        ('{"answer": "42", "references": [1]}', {"answer": "42", "references": [1]}, "json"),
        ('Here you go:\n```json\n{"answer": "42"}\n```\nBye.', {"answer": "42"}, "fenced"),
        (
            '```\n{"answer": "fence without a language"}\n```',
            {"answer": "fence without a language"},
            "fenced",
        ),
        (
            'Sure! {"answer": "in prose", "n": {"x": 1}} Hope it helps.',
            {"answer": "in prose", "n": {"x": 1}},
            "braces",
        ),
        ('<think>{"answer": "no"}</think>{"answer": "yes"}', {"answer": "yes"}, "json"),
        ('{"answer": "line one\nline two\ttabbed"}', {"answer": "line one\nline two\ttabbed"}, "repaired"),
        ('```json\n{"answer": "多行\n回答"}\n```', {"answer": "多行\n回答"}, "repaired"),
    ],
)
def test_it_parses_json_objects_in_every_wrapping(text, expected, step):
    reply = parse_json_reply(text)
    assert reply.data == expected
    assert reply.step == step


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"answer": "He said \\"hi\\"", "references": [1, 2,]}', 'He said "hi"'),
        ('{"answer": "cut off in the mid', "cut off in the mid"),
        ('{"warnings": [], "answer": "第一行\\n第二行", oops}', "第一行\n第二行"),
    ],
)
def test_it_falls_back_to_the_answer_field_of_malformed_json(text, expected):
    reply = parse_json_reply(text)
    assert reply.step == "regex"
    assert reply.data == {"answer": expected}


def test_it_reads_another_field_by_regex_when_asked():
    text = '{"proposed_content": "new text", "change_summary": "shorter",'
    assert extract_json(text, field="proposed_content") == {"proposed_content": "new text"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "The model ignored the format and just answered.",
            "The model ignored the format and just answered.",
        ),
        ("```json\nplain words in a fence\n```", "plain words in a fence"),
        ("[1, 2, 3]", "[1, 2, 3]"),
    ],
)
def test_it_falls_back_to_the_raw_text(text, expected):
    reply = parse_json_reply(text)
    assert reply.step == "raw"
    assert reply.data == {"answer": expected}


@pytest.mark.parametrize("text", ["", "   \n", "<think>only thoughts</think>"])
def test_it_falls_back_to_the_canned_message(text):
    assert parse_json_reply(text).step == "canned"
    assert extract_json(text) == {"answer": CANNED_MESSAGE}
    assert extract_json(text, canned="抱歉") == {"answer": "抱歉"}
