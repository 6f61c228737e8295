"""ContextWindow(1) for the answer: a reference cut off mid-thought gets the rest from its next chunk.

The post-processing step (`postprocess.ContextWindowProcessor`) attaches each candidate's
neighbours as `context_before` / `context_after`. Most chunks end where a sentence, a table or
a section ends, and their neighbours would only add words the reader has to skip; a chunk
that ends mid-sentence ("… as shown in docs/03-retrieval.md,") or on a lead-in ("三种状态：")
leaves its answer in the next chunk. Only those get it: up to the next sentence end after a
mid-sentence cut, the next chunk's opening lines after a lead-in or inside a table.
"""

from __future__ import annotations

import re
from dataclasses import replace

from agentic_rag.llm.units import ends_in_comment, is_code_like

from .candidates import Candidate

SENTENCE_ENDS = ".。!！?？…;；"
# A chunk ending on a closing mark ends a parenthesis, a quote or a code span: treated as whole.
CLOSERS = ")）]】}」』\"”'’`>"
LEAD_IN_ENDS = ":："
DEFAULT_MAX_CHARS = 600
# Chunks overlap by a sentence or a few lines; looking further would cost time on a chunk of
# thousands of one-character lines, for no overlap the chunker makes.
MAX_OVERLAP_LINES = 20
_LIST_OR_HEADING = re.compile(r"^\s*(?:#{1,6}\s|[-*+]\s|\d+(?:\.\d+)*[.)、]?\s)")
_SENTENCE_END = re.compile(r"[.!?;](?=\s|$)|[。！？；…]")
_KEY_VALUE = re.compile(r"[^\s:：]{1,20}+\s*+[:：]\s*+\S")


def is_table_row(line: str) -> bool:
    # Parsed tables keep their cells as "a | b" (the outer pipes gone); Markdown ones as "| a | b |".
    return " | " in line or line.lstrip().startswith("|")


def cut_mid_thought(text: str, following: str) -> str:
    """How `text` stops short of its thought: "lead-in", "table", "sentence", or "" when whole.

    `following` is the next chunk's text: a table row at the end is cut only when the next
    chunk carries on with the same table.
    """
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines or not following.strip():
        return ""
    last = lines[-1]
    if last[-1] in LEAD_IN_ENDS:
        return "lead-in"
    if is_table_row(last):
        next_line = following.strip().splitlines()[0]
        return "table" if is_table_row(next_line) else ""
    if _is_title(lines) or _LIST_OR_HEADING.match(last) or last.startswith("```") or _is_code(last):
        return ""  # a heading, a list item or code: lines that end without punctuation when whole
    if last[-1] in SENTENCE_ENDS or last[-1] in CLOSERS:
        return ""
    return "sentence"


def _is_code(line: str) -> bool:
    """A line of code, "pipeline.add(Window(1)) # 相邻 chunk 扩展" among them: its comment ends it."""
    return ends_in_comment(line) or is_code_like(line)


def _is_title(lines: list[str]) -> bool:
    """A chunk of one short line with no clause marks: a section's title standing alone."""
    return len(lines) == 1 and len(lines[0]) < 80 and not re.search(r"[,，、;；]", lines[0])


def completion(following: str, cut: str, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The part of the next chunk that completes a cut: to its first sentence end, or its lines."""
    following = following.strip()
    if cut == "sentence":
        end = _SENTENCE_END.search(following[:max_chars])
        return following[: end.end()] if end else _by_lines(following, max_chars)
    return _by_lines(following, max_chars)


def _by_lines(text: str, max_chars: int) -> str:
    """Whole lines of `text` up to max_chars (at least its first line, cut at max_chars)."""
    kept: list[str] = []
    used = 0
    for line in text.splitlines():
        if kept and used + len(line) + 1 > max_chars:
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(kept)[:max_chars]


def with_context_window(candidate: Candidate, max_chars: int = DEFAULT_MAX_CHARS) -> Candidate:
    """The candidate with the rest of its thought appended from its next chunk, when it is cut.

    The joined text is recorded in `metadata["context_window"]` and a note says why; an
    uncut candidate, or one whose neighbours were not looked up, comes back unchanged.
    """
    following = _past_overlap(candidate.text, str(candidate.metadata.get("context_after") or ""))
    cut = cut_mid_thought(candidate.text, following)
    if not cut:
        return candidate
    addition = completion(following, cut, max_chars)
    if not addition:
        return candidate
    separator = " "
    if cut in ("lead-in", "table") or candidate.text.endswith("\n") or _opens_block(addition):
        # A table's header, a list or a heading glued to the line before would no longer be
        # read as one (its rows would lose their header).
        separator = "\n"
    elif _ends_cjk(candidate.text) and cut == "sentence":
        separator = ""
    joined = replace(
        candidate,
        text=candidate.text.rstrip() + separator + addition,
        metadata={**candidate.metadata, "context_window": addition},
        notes=[*candidate.notes, f"context window: {len(addition)} chars of the next chunk complete a cut {cut}"],
    )
    return joined


def _past_overlap(text: str, following: str) -> str:
    """following without the lines it repeats of text's end: chunks may overlap, and the lines
    both hold would be read twice (and glued into a line neither holds)."""
    ours = [line.strip() for line in text.strip().splitlines()[-MAX_OVERLAP_LINES:]]
    theirs = following.strip().splitlines()
    opening = [line.strip() for line in theirs[:MAX_OVERLAP_LINES]]
    for size in range(min(len(ours), len(opening)), 0, -1):
        if opening[:size] == ours[-size:]:
            return "\n".join(theirs[size:])
    return following


def _opens_block(text: str) -> bool:
    """Whether text opens on a line of its own kind: a table row, a list item, a heading, a fence,
    or a key and its value ("文件: app/platform/memory.py"), which no sentence runs on into."""
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    return (is_table_row(first) or bool(_LIST_OR_HEADING.match(first)) or first.startswith("```")
            or _KEY_VALUE.match(first) is not None)


def _ends_cjk(text: str) -> bool:
    stripped = text.rstrip()
    return bool(stripped) and "\u4e00" <= stripped[-1] <= "\u9fff"
