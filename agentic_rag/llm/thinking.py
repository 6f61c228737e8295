"""Remove reasoning models' `<think>…</think>` blocks, also from a stream of chunks."""

from __future__ import annotations

import re

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"
_SPACES = re.compile(r"\s*")  # what str.lstrip() drops: \s is str.isspace()


class ThinkFilter:
    """Stateful filter: feed chunks in order, get back the text outside think blocks.

    A tag may be split over any number of chunks, so a chunk ending in a prefix of the
    tag being looked for is held back until the next chunk decides. Whitespace after a
    block that opens the reply is dropped (models put a blank line there). An unclosed
    block is dropped at `flush`; an unfinished opening tag is text after all.
    """

    def __init__(self) -> None:
        self._pending = ""
        self._inside = False
        self._after_close = False
        self._has_output = False

    def feed(self, chunk: str) -> str:
        """Return the visible text that chunk completes (maybe "")."""
        text = self._pending + chunk
        self._pending = ""
        out: list[str] = []
        at = 0  # an index, not a shorter copy of text per tag: many tags would copy it many times
        while at < len(text):
            if self._after_close:
                at = _SPACES.match(text, at).end()
                if at == len(text):
                    break
                self._after_close = False
            tag = CLOSE_TAG if self._inside else OPEN_TAG
            index = text.find(tag, at)
            if index >= 0:
                if not self._inside:
                    self._emit(out, text[at:index])
                self._inside = not self._inside
                self._after_close = not self._inside and not self._has_output
                at = index + len(tag)
                continue
            rest = text[at:]
            held = _partial_tag_suffix(rest, tag)
            if not self._inside:
                self._emit(out, rest[: len(rest) - held])
            self._pending = rest[len(rest) - held :]
            break
        return "".join(out)

    def _emit(self, out: list[str], text: str) -> None:
        out.append(text)
        self._has_output = self._has_output or bool(text.strip())

    def flush(self) -> str:
        """Return what was held back at the end of the stream."""
        pending, self._pending = self._pending, ""
        return "" if self._inside else pending


def strip_think(text: str) -> str:
    """Return text without its think blocks."""
    if OPEN_TAG not in text:
        return text
    think = ThinkFilter()
    return think.feed(text) + think.flush()


def _partial_tag_suffix(text: str, tag: str) -> int:
    """Length of the longest end of text that is a proper prefix of tag."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0
