"""A word-level diff of a section and its proposed rewrite, for Chinese and English alike.

English splits at word boundaries, Chinese into jieba words: a character diff of Chinese
shows 会 and 议 as two changes where the reader sees one word. Whitespace and punctuation
are tokens of their own, so a reflowed line reads as the change it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Literal

import jieba

Op = Literal["equal", "insert", "delete"]

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"([{_CJK}]+)|(\s+)|([^\W_]+)|(.)", re.DOTALL)


@dataclass(frozen=True)
class DiffPart:
    op: Op
    text: str


def diff_tokens(text: str) -> list[str]:
    tokens: list[str] = []
    for match in _TOKEN.finditer(text):
        cjk = match.group(1)
        tokens.extend(jieba.lcut(cjk) if cjk else [match.group(0)])
    return tokens


def word_diff(old: str, new: str) -> list[DiffPart]:
    """The parts of old and new in reading order: kept, deleted and inserted runs of words."""
    a, b = diff_tokens(old), diff_tokens(new)
    parts: list[DiffPart] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("delete", "replace"):
            _append(parts, "delete", "".join(a[i1:i2]))
        if tag in ("insert", "replace"):
            _append(parts, "insert", "".join(b[j1:j2]))
        if tag == "equal":
            _append(parts, "equal", "".join(a[i1:i2]))
    return parts


def _append(parts: list[DiffPart], op: Op, text: str) -> None:
    if parts and parts[-1].op == op:
        parts[-1] = DiffPart(op, parts[-1].text + text)
    elif text:
        parts.append(DiffPart(op, text))


def change_counts(parts: list[DiffPart]) -> dict[str, int]:
    """Characters inserted and deleted, for the proposal's summary line."""
    return {
        "inserted": sum(len(p.text) for p in parts if p.op == "insert"),
        "deleted": sum(len(p.text) for p in parts if p.op == "delete"),
    }
