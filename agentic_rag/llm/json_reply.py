"""Get a JSON object out of a model's reply, whatever shape the reply took.

The fallback chain: a fenced block → the outermost `{…}` → the same with
raw control characters inside strings repaired → a regex for the main field of a
malformed object → the raw text as that field → a canned message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import Literal

from agentic_rag.llm.thinking import strip_think

CANNED_MESSAGE = "Sorry, no answer could be produced this time. Please try again."

Step = Literal["json", "fenced", "braces", "repaired", "regex", "raw", "canned"]

# "[ \t]*+(?:json[ \t]*+)?", not "[ \t]*(?:json)?[ \t]*": two runs of spaces side by side split a
# long run every way there is, each way then read to the reply's end for the closing fence.
_FENCE = re.compile(r"```[ \t]*+(?:(?:json|JSON)[ \t]*+)?\n?(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(r"^```[ \t]*(?:json|JSON)?[ \t]*\n?")


@dataclass(frozen=True)
class JsonReply:
    data: dict
    step: Step  # which link of the chain produced it, for traces
    notes: tuple[str, ...] = field(default=())


def extract_json(text: str, *, field: str = "answer", canned: str = CANNED_MESSAGE) -> dict:
    """Return the JSON object in text, or `{field: …}` built by the fallback chain."""
    return parse_json_reply(text, field=field, canned=canned).data


def parse_json_reply(text: str, *, field: str = "answer", canned: str = CANNED_MESSAGE) -> JsonReply:
    """Run the fallback chain over text and say which step succeeded."""
    original = (text or "").strip()
    text = strip_think(original).strip()
    # Then the reply as written: "<think>" inside a string of a valid object is data, and
    # stripping it as a think block cut the object short.
    for step, candidate in chain(_candidates(text), _candidates(original) if text != original else ()):
        data = _loads_object(candidate, strict=True)
        if data is not None:
            return JsonReply(data, step)
    for _, candidate in _candidates(text):
        data = _loads_object(candidate, strict=False)
        if data is not None:
            return JsonReply(data, "repaired")
    value = _regex_field(text, field)
    if value is not None:
        return JsonReply({field: value}, "regex")
    raw = _OPEN_FENCE.sub("", text).removesuffix("```").strip()
    if raw:
        return JsonReply({field: raw}, "raw")
    return JsonReply({field: canned}, "canned")


def _candidates(text: str) -> Iterator[tuple[Step, str]]:
    yield "json", text
    for match in _FENCE.finditer(text):
        yield "fenced", match.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        yield "braces", text[start : end + 1]


def _loads_object(candidate: str, *, strict: bool) -> dict | None:
    # strict=False accepts raw newlines and tabs inside strings, the usual defect of
    # model-written JSON; everything else must still be valid.
    try:
        data = json.loads(candidate, strict=strict)
    except (ValueError, RecursionError):  # ValueError: also a number past 4,300 digits
        return None
    return data if isinstance(data, dict) else None


def _regex_field(text: str, field: str) -> str | None:
    # A string value, closed or cut off at the end of the reply.
    pattern = rf'"{re.escape(field)}"\s*:\s*"((?:[^"\\]|\\.)*)(?:"|\\?$)'
    match = re.search(pattern, text, re.DOTALL)
    if match is None:
        return None
    raw = match.group(1)
    try:
        return json.loads(f'"{raw}"', strict=False)
    except json.JSONDecodeError:
        return raw.replace('\\"', '"').replace("\\n", "\n")
