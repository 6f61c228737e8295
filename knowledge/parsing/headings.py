"""Heading numbers: 第二章, 二、, （三）, 2.1 and their nesting ranks."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .document import Heading

_CN_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6,
              "七": 7, "八": 8, "九": 9}  # fmt: skip
_CN_NUM = "[零〇一二两三四五六七八九十百]+"
_SPACE = r"[\s\u3000]"
_CHAPTER = re.compile(
    rf"^第{_SPACE}*({_CN_NUM}|\d+){_SPACE}*(编|篇|部分|章|节|条){_SPACE}*[:：]?{_SPACE}*(.*)$"
)
_CN_ITEM = re.compile(rf"^({_CN_NUM})[、.．]{_SPACE}*(\S.*)$")
_CN_PAREN = re.compile(rf"^[（(]({_CN_NUM})[）)]{_SPACE}*(\S.*)$")
_DOTTED = re.compile(rf"^(\d{{1,2}}(?:[.．]\d{{1,3}}){{0,5}})([.．、]?)({_SPACE}*)(\S.*)$")
# Style ranks order heading kinds from outermost to innermost; dotted numbers add their depth.
_CHAPTER_RANKS = {"编": 0, "篇": 0, "部分": 0, "章": 1, "节": 2, "条": 3}
_CN_ITEM_RANK, _CN_PAREN_RANK, _DOTTED_RANK = 4, 5, 5


@dataclass(frozen=True)
class Numbered:
    number: tuple[int, ...]
    title: str
    rank: int
    is_list_like: bool  # "1." and "1、" also start list items, so plain text does not trust them


def _cn_to_int(numeral: str) -> int:
    if numeral.isdigit():
        return int(numeral)
    total, digit = 0, 0
    for char in numeral:
        if char in "十百":
            total += (digit or 1) * (10 if char == "十" else 100)
            digit = 0
        else:
            digit = _CN_DIGITS[char]
    return total + digit


def parse_numbered(line: str) -> Numbered | None:
    """Split "2.1 施工准备", "第二章 总则", "一、概述" or "（一）范围" into number and title."""
    if match := _CHAPTER.match(line):
        numeral, kind, title = match.groups()
        number = (_cn_to_int(numeral),)
        return Numbered(number, title.strip() or line, _CHAPTER_RANKS[kind], False)
    if match := _CN_PAREN.match(line):
        return Numbered((_cn_to_int(match[1]),), match[2].strip(), _CN_PAREN_RANK, False)
    if match := _CN_ITEM.match(line):
        return Numbered((_cn_to_int(match[1]),), match[2].strip(), _CN_ITEM_RANK, False)
    if match := _DOTTED.match(line):
        return _parse_dotted(match)
    return None


def _parse_dotted(match: re.Match[str]) -> Numbered | None:
    number, delimiter, space, title = match.groups()
    parts = tuple(int(part) for part in re.split("[.．]", number))
    # "3D打印" and "20年来" are words, not numbered titles; "2.1施工准备" is numbered.
    is_glued = not delimiter and not space and (len(parts) == 1 or not is_cjk(title[0]))
    if is_glued or title[0].isdigit():
        return None
    is_list_like = len(parts) == 1 and bool(delimiter)
    return Numbered(parts, title.strip(), _DOTTED_RANK + len(parts), is_list_like)


def is_cjk(char: str) -> bool:
    return "\u4e00" <= char <= "\u9fff"


def markup_heading(level: int, text: str) -> Heading | None:
    """Build a heading whose level the markup gives; its number, if any, comes from the text."""
    text = " ".join(text.split())
    if not text:
        return None
    numbered = parse_numbered(text)
    if numbered is None or not numbered.title:
        return Heading(level, text)
    return Heading(level, numbered.title, numbered.number, text)
