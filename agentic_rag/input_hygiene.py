"""Input hygiene: the one check every JSON body and websocket frame passes before any view reads it.

A value the database cannot store, or the parser cannot walk, is refused here as `BadInput`,
so the same rule holds on SQLite and PostgreSQL: no lone surrogate (it cannot be encoded to
UTF-8), no NUL character (PostgreSQL text refuses it), no NaN or infinity (PostgreSQL jsonb
refuses them), no integer past 64 bits (no column holds it), and no nesting deeper than
JSON_MAX_DEPTH (json.loads recurses once per level and would raise RecursionError).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from itertools import accumulate
from typing import Any

from django.conf import settings
from django.http import HttpRequest

_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")
_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_INT_LIMIT = 2**63
NAME_CHARS = 80
_Path = tuple[Any, str] | None  # (parent path, ".key" or "[index]"); None is the whole value


class BadInput(ValueError):
    """A request or frame refused before use; its message names the field when there is one."""

    def __init__(self, message: str, code: str = "bad_input") -> None:
        super().__init__(message)
        self.code = code


def json_depth(text: str) -> int:
    """Return the deepest nesting of arrays and objects in JSON text, in linear time, without parsing it.

    Escaped backslashes and quotes are dropped first, so every remaining quote opens or closes
    a string; the brackets between strings then give the depth. Wrong only for text that is
    not JSON, which json.loads refuses at the first bad character, before it nests deeper.
    """
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(unescaped.split('"')[::2])
    brackets = _BRACKETS.sub("", outside)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def loads_json(raw: bytes | str) -> Any:
    """Parse JSON text or bytes within the size and depth bounds, and check every value in it."""
    if len(raw) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        raise BadInput("The JSON is larger than this address accepts.", "body_too_large")
    try:
        text = raw.decode(json.detect_encoding(raw)) if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise BadInput("The JSON is not valid UTF-8.", "bad_json") from None
    limit = settings.JSON_MAX_DEPTH
    # Most bodies hold fewer brackets than the limit, which bounds their depth without a scan.
    if text.count("[") + text.count("{") > limit and json_depth(text) > limit:
        raise BadInput(f"The JSON is nested deeper than {limit} levels.", "too_deep")
    try:
        data = json.loads(text)
    except ValueError:  # JSONDecodeError, and an integer past Python's digit limit
        raise BadInput("The JSON is not valid.", "bad_json") from None
    check_values(data)
    return data


def loads_json_object(raw: bytes | str) -> dict[str, Any]:
    """Parse JSON as `loads_json` does, refusing anything but an object."""
    data = loads_json(raw)
    if not isinstance(data, dict):
        raise BadInput('Send a JSON object: {"message": "..."}.', "bad_json")
    return data


def loads_frame(text_data: str | None) -> dict[str, Any]:
    """Parse a websocket frame as a JSON object; a binary frame is refused."""
    if text_data is None:
        raise BadInput("Send a JSON object in a text frame.", "bad_json")
    return loads_json_object(text_data)


def request_data(request: HttpRequest) -> dict[str, Any]:
    """Return a request's fields: its JSON object, or its form data, checked either way."""
    if request.content_type == "application/json":
        return loads_json_object(request.body)
    data = request.POST.dict()
    check_values(data)
    return data


def check_values(data: Any) -> None:
    """Raise BadInput naming the first string, number or key in data the database cannot store."""
    # A stack, not recursion: data built in code has no depth bound. Paths stay linked
    # (parent, step) until an error names one, since a key may be as long as the body.
    pending: list[tuple[_Path, Any]] = [(None, data)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, str):
            _check_text(path, value)
        elif isinstance(value, float) and not math.isfinite(value):
            raise BadInput(f"{_name(path)}: send a finite number.", "bad_number")
        elif isinstance(value, int) and not isinstance(value, bool) and not -_INT_LIMIT <= value < _INT_LIMIT:
            raise BadInput(f"{_name(path)}: the number is out of range.", "bad_number")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                child = (path, f".{key}")
                _check_text(child, str(key))
                pending.append((child, item))
        elif isinstance(value, list | tuple):
            pending.extend(((path, f"[{index}]"), item) for index, item in enumerate(value))



def _check_text(path: _Path, text: str) -> None:
    found = _BAD_TEXT.search(text)
    if found is None:
        return
    name = _name(path)
    if _BAD_TEXT.search(name):  # the bad character is in a key: show it escaped
        name = name.encode("unicode_escape").decode("ascii")
    if found.group() == "\x00":
        raise BadInput(f"{name}: the text holds a NUL character (\\u0000).", "bad_text")
    raise BadInput(f"{name}: the text holds a lone surrogate ({found.group()!a}), which is not Unicode.", "bad_text")


def _name(path: _Path) -> str:
    """The field a path names, as `a.b[2]`, cut short: a key may be as long as the body."""
    steps: list[str] = []
    while path is not None:
        path, step = path
        steps.append(step[: NAME_CHARS + 2])  # its separator, and one character past the cut
    name = "".join(reversed(steps)).removeprefix(".")
    if len(name) > NAME_CHARS:
        return name[:NAME_CHARS] + "…"
    return name or "the JSON"


def check_types(data: Mapping[str, Any], types: Mapping[str, type | tuple[type, ...]], *, within: str = "") -> None:
    """Raise BadInput naming the first field whose value is not of its type; null counts as absent.

    A JSON true or false is no number here, though Python's bool is an int. `within` names
    the object that holds the fields, for the message.
    """
    for field, expected in types.items():
        value = data.get(field)
        if value is None:
            continue
        allowed = expected if isinstance(expected, tuple) else (expected,)
        if isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed):
            continue
        name = f"{within}.{field}" if within else field
        raise BadInput(f"{name}: send {_kinds(allowed)}, not {_kind(type(value))}.", "bad_input")


_KINDS = {str: "a string", int: "a number", float: "a number", bool: "true or false", dict: "an object", list: "an array"}


def _kind(kind: type) -> str:
    return _KINDS.get(kind, kind.__name__)


def _kinds(kinds: tuple[type, ...]) -> str:
    return " or ".join(dict.fromkeys(_kind(kind) for kind in kinds))
