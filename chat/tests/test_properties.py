"""Property-based tests (hypothesis): the calculator, worker_name parsing and the model-JSON
extractor hold their contracts on any input, not only on the examples we thought of."""

from __future__ import annotations

import ast
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentic_rag.llm.json_reply import extract_json
from chat.routing_kb import AGENT_MODE, InvalidWorkerName, format_worker_name, parse_worker_name
from chat.tools.calculator import CalculatorError, evaluate

# At least 300 examples; more under `make fuzz` (its profile sets the default).
FAST = settings(max_examples=max(300, settings.default.max_examples), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.text(max_size=300))
def test_the_calculator_answers_or_refuses_any_text_quickly(text):
    try:
        value = evaluate(text)
    except CalculatorError:
        pass  # a refusal is an answer too
    else:
        assert isinstance(value, int | float) and not isinstance(value, bool)
        assert not (isinstance(value, float) and math.isnan(value))
    # The faster of two tries: a slow text is slow every time, a pause of the machine (a CI run
    # once took 0.43 s on 13 characters the calculator refuses at once) is not.
    assert min(_seconds_to_evaluate(text), _seconds_to_evaluate(text)) < 0.1


def _seconds_to_evaluate(text: str) -> float:
    started = time.perf_counter()
    try:
        evaluate(text)
    except CalculatorError:
        pass
    return time.perf_counter() - started


small_ints = st.integers(min_value=-1000, max_value=1000)


def _expression(depth: int = 3):
    leaf = small_ints.map(str)
    if depth == 0:
        return leaf
    inner = _expression(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(inner, st.sampled_from(["+", "-", "*"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
    )


@FAST
@given(_expression())
def test_integer_arithmetic_agrees_with_python(expression):
    expected = eval(compile(ast.parse(expression, mode="eval"), "<test>", "eval"))  # the test's oracle, not the product  # noqa: S307
    try:
        assert evaluate(expression) == expected
    except CalculatorError as refused:  # only for results past the magnitude limit
        assert abs(expected) > 1e300, refused


@pytest.mark.parametrize("attack", ["9**9**9**9", "2**100000000", "(" * 10_000 + "1" + ")" * 10_000,
                                    "().__class__.__bases__[0].__subclasses__()", "[].__class__"])
def test_attacks_end_within_100_ms_with_a_refusal(attack):
    started = time.perf_counter()
    with pytest.raises(CalculatorError):
        evaluate(attack)
    assert time.perf_counter() - started < 0.1


names = st.text(alphabet=st.characters(blacklist_characters=":", blacklist_categories=("Cs",)), max_size=20)


@FAST
@given(names, names)
def test_a_formatted_worker_name_parses_back(kb, agent):
    try:
        name = format_worker_name(kb, agent)
    except InvalidWorkerName:
        return
    if not name:
        return  # the general path has no worker
    spec = parse_worker_name(name)
    assert (spec.kb_prefix, spec.agent_type, spec.agent_mode) == tuple(name.split(":"))
    assert spec.agent_mode == AGENT_MODE


@FAST
@given(st.text(max_size=200))
def test_parsing_any_worker_name_gives_a_spec_or_a_clear_error(name):
    try:
        spec = parse_worker_name(name)
    except InvalidWorkerName as error:
        assert "worker_name" in str(error)
    else:
        assert spec.agent_mode == AGENT_MODE


@FAST
@given(st.text(max_size=500))
def test_the_json_extractor_always_returns_an_object(text):
    data = extract_json(text, field="answer")
    assert isinstance(data, dict)


def test_an_object_whose_strings_hold_a_think_tag_is_read_as_written():
    assert extract_json('{"<think>": 0}', field="answer") == {"<think>": 0}
    assert extract_json('```json\n{"note": "<think> is a tag"}\n```', field="answer") == {"note": "<think> is a tag"}
    assert extract_json('<think>{"draft": 1}</think>{"answer": "ok"}', field="answer") == {"answer": "ok"}


@FAST
@given(st.dictionaries(st.text(min_size=1, max_size=10), st.one_of(st.integers(), st.text(max_size=20), st.booleans()), max_size=5),
       st.text(max_size=40), st.text(max_size=40))
def test_an_object_wrapped_in_prose_or_a_fence_is_found(obj, before, after):
    import json

    encoded = json.dumps(obj, ensure_ascii=False)
    for text in (encoded, f"```json\n{encoded}\n```", f"{before.replace('{', '')}\n```json\n{encoded}\n```\n{after.replace('{', '')}"):
        assert extract_json(text, field="answer") == obj or not obj
