"""The input hygiene rules on their own: depth without parsing, values no database stores, types."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rag.input_hygiene import BadInput, check_types, check_values, json_depth, loads_json

# At least 300 examples; more under `make fuzz` (its profile sets the default).
PROPERTY = settings(max_examples=max(300, settings.default.max_examples), deadline=None)

# Strings full of the characters that could fool a scan: brackets, quotes, backslashes.
tricky_text = st.text(st.sampled_from('[]{}"\\/ a\n') | st.characters(), max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=20,
)


def depth_of(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    return 0


@PROPERTY
@given(json_values, st.sampled_from([None, 2]))
def test_the_scan_finds_the_depth_of_any_json(value, indent):
    assert json_depth(json.dumps(value, indent=indent, ensure_ascii=False)) == depth_of(value)


@pytest.mark.parametrize(
    "text", ['"\\\\"', '"\\""', '"\\\\\\""', '["\\\\", "]"]', '{"a\\"[": ["\\\\[", {}]}']
)
def test_escaped_quotes_and_backslashes_do_not_open_strings(text):
    assert json_depth(text) == depth_of(json.loads(text))


@pytest.mark.parametrize("unit", ["[", "{", '"\\"', "\\", '"[', "]"])
def test_the_scan_is_linear_on_hostile_text(unit):
    text = unit * 1_000_000
    started = time.process_time()
    json_depth(text)
    assert time.process_time() - started < 2  # a scan that went back over its text would take minutes


def test_deep_json_is_refused_before_parsing(settings):
    settings.JSON_MAX_DEPTH = 3

    assert loads_json("[[[1]]]") == [[[1]]]
    with pytest.raises(BadInput) as refused:
        loads_json("[" * 200_000 + "]" * 200_000)  # json.loads would raise RecursionError
    assert refused.value.code == "too_deep"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"a": [{"b": "x\x00"}]}, "a[0].b: the text holds a NUL"),
        ({"a": {"\ud800": 1}}, "a.\\ud800: the text holds a lone surrogate"),
        (["ok", "\udfff"], "[1]: the text holds a lone surrogate"),
        ("\x00", "the JSON: the text holds a NUL"),
        ({"n": float("nan")}, "n: send a finite number."),
        ({"n": -float("inf")}, "n: send a finite number."),
        ({"n": 2**63}, "n: the number is out of range."),
        ({"k" * 500: "\x00"}, "k" * 80 + "…: the text"),
    ],
)
def test_values_no_database_stores_are_refused_by_their_path(value, says):
    with pytest.raises(BadInput) as refused:
        check_values(value)
    assert str(refused.value).startswith(says)


def test_storable_values_pass():
    check_values({"a": ["text 中文 🙂", 2**63 - 1, -(2**63), 1.5, True, None, {"b": {}}]})


def test_a_wide_object_under_a_long_key_is_checked_without_copying_the_key():
    value = {"k" * 1_000_000: {str(i): i for i in range(100_000)}}
    started = time.process_time()
    check_values(value)
    assert time.process_time() - started < 5


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"n": True}, "n: send a number, not true or false."),
        ({"n": "1"}, "n: send a number, not a string."),
        ({"s": 1}, "s: send a string, not a number."),
        ({"o": []}, "o: send an object, not an array."),
    ],
)
def test_a_field_of_another_type_is_named(data, says):
    with pytest.raises(BadInput, match=f"^{says}$".replace(".", r"\.")):
        check_types(data, {"n": int, "s": str, "o": dict})


def test_null_and_absent_fields_pass_and_bool_may_be_allowed():
    check_types({"n": None, "b": False}, {"n": int, "s": str, "b": (bool, str)})
