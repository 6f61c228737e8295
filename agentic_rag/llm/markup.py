"""The elements of a prompt or an answer (`<document …>…</document>`, `<cite …>…</cite>`), found in
time linear in the text.

A pattern such as `<cite\\b[^>]*>.*?</cite>` tries again from every `<cite` that does not close,
reading to the text's end each time: a text of many unclosed tags costs their number times its
length, with the GIL held. Whether a `<tag` can close depends only on what follows it, and once
one cannot, no later one can; so the positions where one still can are known from the last
closing tag, and the pattern is tried only there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator


def closing_limit(text: str, tag: str, *, has_attributes: bool = True) -> int:
    """The position from which a `<tag` in text can no longer begin an element that closes.

    With attributes (`<tag\\b[^>]*>.*?</tag>`), its first ">" must come before the last
    `</tag>`; without (`<tag\\b.*?</tag>`), the last `</tag>` must come after it.
    """
    last_close = text.rfind(f"</{tag}>")
    if last_close < 0:
        return 0
    end = text.rfind(">", 0, last_close) if has_attributes else last_close
    return max(end - len(tag), 0)  # end - len("<tag") + 1


def find_elements(pattern: re.Pattern[str], text: str, tag: str, *, has_attributes: bool = True) -> Iterator[re.Match[str]]:
    """pattern.finditer(text), for a pattern of one element `<tag\\b…</tag>` (DOTALL)."""
    limit = closing_limit(text, tag, has_attributes=has_attributes)
    at = 0
    while 0 <= (opening := text.find(f"<{tag}", at)) < limit:
        match = pattern.match(text, opening)
        if match is None:  # "<tags", not "<tag"
            at = opening + 1
            continue
        yield match
        at = match.end()


def remove_elements(pattern: re.Pattern[str], text: str, tag: str, *, has_attributes: bool = True) -> str:
    """pattern.sub("", text), for a pattern of one element `<tag\\b…</tag>` (DOTALL)."""
    pieces, done = [], 0
    for match in find_elements(pattern, text, tag, has_attributes=has_attributes):
        pieces.append(text[done : match.start()])
        done = match.end()
    pieces.append(text[done:])
    return "".join(pieces)
