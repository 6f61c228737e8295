"""Cut parsed sections into section-sized parents and paragraph-sized children."""

from __future__ import annotations

import hashlib
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .parsing import ParsedDocument, Section
from .tagging import extract_tags


@dataclass(frozen=True)
class ChunkingParams:
    """Sizes for parents (characters) and children (count_tokens units)."""

    child_target_zh: int = 300  # Chinese characters; children about 200–400
    child_max_zh: int = 400
    child_target_en: int = 220  # English words; children about 150–300
    child_max_en: int = 300
    overlap_sentences: int = 1  # sentences repeated at the start of the next child
    parent_max_chars: int = 4000  # longer sections become several parents


@dataclass(frozen=True)
class ChildDraft:
    """A paragraph-sized chunk, embedded and matched on its own."""

    index: int  # order in the whole document
    text: str
    token_count: int
    tags: tuple[str, ...]
    sha256: str


@dataclass(frozen=True)
class ParentDraft:
    """A section-sized chunk handed to the LLM when one of its children matches."""

    index: int  # order in the document
    text: str
    token_count: int
    section_index: str
    section_title: str
    chapter_level_1: str
    chapter_level_2: str
    tags: tuple[str, ...]
    sha256: str
    children: tuple[ChildDraft, ...]


_DEFAULT_PARAMS = ChunkingParams()
_PARENT_TAG_LIMIT = 12
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+")
_CJK_CHAR = re.compile(rf"[{_CJK}]")
_BOUNDARY = re.compile(r"[。！？；!?…]+[”’\"'）)\]】」』]*|\.[”’\"'）)\]]*(?=\s|$)|\n")
_WORD_BEFORE_DOT = re.compile(r"[A-Za-z][A-Za-z.]*$")
_ABBREVIATIONS = frozenset(
    ["e.g", "i.e", "u.s", "vs", "mr", "mrs", "ms", "dr", "prof", "fig", "figs", "no", "nos", "al", "approx", "cf", "st", "jr", "sr", "inc", "ltd", "co", "eq", "ref"]
)
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_LEAD_IN_ENDS = (":", "：")


def count_tokens(text: str) -> int:
    """Estimate tokens: each CJK character counts 1, each Latin word or number counts 1.

    An estimate, not a model tokenizer: it is fast and stable, which is what sizing needs.
    """
    return len(_TOKEN.findall(text))


def split_sentences(text: str) -> list[str]:
    """Split after 。！？；!?, after ". " (not "e.g." or "3.5") and at line breaks."""
    return [sentence for _, sentence in _sentence_pieces(text)]


def chunk_document(
    doc: ParsedDocument, params: ChunkingParams = _DEFAULT_PARAMS
) -> list[ParentDraft]:
    """Cut a document into parents (per section) holding their children."""
    parents: list[ParentDraft] = []
    next_child = 0
    for section in doc.sections:
        for body in _parent_bodies(section.text, params):
            children = _child_drafts(body, params, first_index=next_child)
            next_child += len(children)
            parents.append(_parent_draft(len(parents), section, body, children))
    return parents


# --- sentences -----------------------------------------------------------------------------


def _sentence_pieces(text: str) -> list[tuple[str, str]]:
    """Split text into (whitespace before, sentence) pairs; a line break also ends a sentence."""
    pieces: list[tuple[str, str]] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        if match[0].startswith(".") and _is_abbreviation(text, match.start()):
            continue
        end = match.start() if match[0] == "\n" else match.end()
        pieces.append(_split_leading_space(text[start:end]))
        start = end
    pieces.append(_split_leading_space(text[start:]))
    return [(space, sentence) for space, sentence in pieces if sentence]


def _is_abbreviation(text: str, dot: int) -> bool:
    word = _WORD_BEFORE_DOT.search(text, max(0, dot - 12), dot)
    # A lone capital is an initial ("J. Smith"); a lone lowercase letter is a unit ("3.5 m.").
    if word is None:
        return False
    return (len(word[0]) == 1 and word[0].isupper()) or word[0].lower() in _ABBREVIATIONS


def _split_leading_space(piece: str) -> tuple[str, str]:
    stripped = piece.lstrip()
    return piece[: len(piece) - len(stripped)], stripped.rstrip()


# --- packing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Measure:
    """How sizes are counted: tokens for children, characters for parents."""

    size: Callable[[str], int]
    starts: Callable[[str], list[int]]  # offsets where each counted unit begins


_TOKENS = _Measure(count_tokens, lambda text: [m.start() for m in _TOKEN.finditer(text)])
_CHARS = _Measure(len, lambda text: list(range(len(text))))


@dataclass(frozen=True)
class _Packing:
    """How one kind of chunk is sized and cut."""

    measure: _Measure
    target: int
    max: int
    overlap: int = 0  # sentences repeated from the previous chunk
    tops_up: bool = False  # may a short chunk take the first sentences of the next paragraph


@dataclass(frozen=True)
class _Unit:
    space: str  # whitespace that preceded it in the source, "\n\n" before a paragraph
    text: str
    size: int
    is_paragraph: bool


def _units(text: str, packing: _Packing) -> list[_Unit]:
    """Return whole paragraphs, or the sentences of a paragraph larger than the max."""
    units: list[_Unit] = []
    for paragraph in _with_lead_ins(_PARAGRAPH_BREAK.split(text), packing):
        paragraph = paragraph.strip()
        unit = _Unit("\n\n", paragraph, packing.measure.size(paragraph), is_paragraph=True)
        if unit.text and unit.size <= packing.max:
            units.append(unit)
        elif unit.text:
            units += _sentence_units(unit, packing)
    return units


def _with_lead_ins(paragraphs: list[str], packing: _Packing) -> list[str]:
    """paragraphs, each that ends in a colon ("输出不同字段:") joined with the one it introduces
    (a code block is a paragraph of its own) when the two fit in one chunk, so no cut parts them.

    A joined pair is not joined again: each paragraph is copied at most once.
    """
    joined: list[str] = []
    was_joined = False
    for paragraph in paragraphs:
        previous = joined[-1].strip() if joined and not was_joined else ""
        was_joined = False
        if previous.endswith(_LEAD_IN_ENDS) and paragraph.strip():
            together = f"{previous}\n\n{paragraph.strip()}"
            if packing.measure.size(together) <= packing.max:
                joined[-1], was_joined = together, True
                continue
        joined.append(paragraph)
    return joined


def _sentence_units(paragraph: _Unit, packing: _Packing) -> list[_Unit]:
    units: list[_Unit] = []
    for position, (space, sentence) in enumerate(_sentence_pieces(paragraph.text)):
        units += _hard_split(paragraph.space if position == 0 else space, sentence, packing)
    return units


def _hard_split(space: str, sentence: str, packing: _Packing) -> list[_Unit]:
    size = packing.measure.size(sentence)
    if size <= packing.max:
        return [_Unit(space, sentence, size, is_paragraph=False)]
    # A sentence over the max is cut every `target` units; nothing else may exceed the max.
    starts = packing.measure.starts(sentence)
    cuts = [0, *starts[packing.target :: packing.target], len(sentence)]
    units: list[_Unit] = []
    for left, right in zip(cuts, cuts[1:], strict=False):
        piece_space, piece = _split_leading_space(sentence[left:right])
        size = packing.measure.size(piece)
        units.append(_Unit(piece_space if units else space, piece, size, is_paragraph=False))
    return [unit for unit in units if unit.text]


def _pack(units: list[_Unit], packing: _Packing) -> list[str]:
    """Greedily fill chunks up to the target, starting each with the previous one's tail."""
    queue = deque(units)
    chunks: list[str] = []
    current: list[_Unit] = []
    used = fresh = 0  # fresh excludes the overlap, so a chunk of pure overlap is never emitted
    while queue:
        unit = queue.popleft()
        if fresh and not _fits(used, fresh, unit, packing, is_last=not queue):
            if sentences := _top_up_sentences(unit, used, packing):
                queue.extendleft(reversed(sentences))
                continue
            chunks.append(_join(current))
            current = _overlap(chunks[-1], packing, budget=packing.max - unit.size)
            used, fresh = sum(u.size for u in current), 0
        current.append(unit)
        used, fresh = used + unit.size, fresh + unit.size
    if fresh:
        chunks.append(_join(current))
    return chunks


def _fits(used: int, fresh: int, unit: _Unit, packing: _Packing, *, is_last: bool) -> bool:
    if used + unit.size <= packing.target:
        return True
    # A tiny chunk or a tiny leftover may stretch up to the max instead of standing alone.
    is_small = fresh < packing.target // 3 or (is_last and unit.size < packing.target // 3)
    return is_small and used + unit.size <= packing.max


def _top_up_sentences(unit: _Unit, used: int, packing: _Packing) -> list[_Unit]:
    """Return a paragraph's sentences when they should fill up a chunk that is still short."""
    if not (packing.tops_up and unit.is_paragraph and used < packing.target * 2 // 3):
        return []
    sentences = _sentence_units(unit, packing)
    return sentences if len(sentences) > 1 else []


def _overlap(previous: str, packing: _Packing, *, budget: int) -> list[_Unit]:
    if packing.overlap <= 0:
        return []
    pieces = _sentence_pieces(previous)[-packing.overlap :]
    tail = "".join(space + sentence for space, sentence in pieces).lstrip()
    size = packing.measure.size(tail)
    return [_Unit("", tail, size, is_paragraph=False)] if 0 < size <= budget else []


def _join(units: list[_Unit]) -> str:
    parts = [units[0].text]
    for unit in units[1:]:
        parts += [unit.space, unit.text]
    return "".join(parts)


# --- drafts ----------------------------------------------------------------------------------


def _parent_bodies(text: str, params: ChunkingParams) -> list[str]:
    text = text.strip()
    if len(text) <= params.parent_max_chars:
        return [text] if text else []
    packing = _Packing(_CHARS, params.parent_max_chars, params.parent_max_chars)
    return _pack(_units(text, packing), packing)


def _child_packing(text: str, params: ChunkingParams) -> _Packing:
    tokens = count_tokens(text)
    # Mixed text is measured in count_tokens units either way; the ratio only picks limits.
    if tokens and len(_CJK_CHAR.findall(text)) * 2 >= tokens:
        target, maximum = params.child_target_zh, params.child_max_zh
    else:
        target, maximum = params.child_target_en, params.child_max_en
    return _Packing(_TOKENS, target, maximum, params.overlap_sentences, tops_up=True)


def _child_drafts(
    body: str, params: ChunkingParams, *, first_index: int
) -> tuple[ChildDraft, ...]:
    packing = _child_packing(body, params)
    texts = _pack(_units(body, packing), packing)
    return tuple(
        ChildDraft(
            first_index + offset, text, count_tokens(text), extract_tags(text), _sha256(text)
        )
        for offset, text in enumerate(texts)
    )


def _parent_draft(
    index: int, section: Section, body: str, children: tuple[ChildDraft, ...]
) -> ParentDraft:
    text = f"{section.title}\n\n{body}" if section.title else body
    return ParentDraft(
        index=index,
        text=text,
        token_count=count_tokens(text),
        section_index=section.index,
        section_title=section.title,
        chapter_level_1=section.chapter_level_1,
        chapter_level_2=section.chapter_level_2,
        tags=_union_tags(children),
        sha256=_sha256(text),
        children=children,
    )


def _union_tags(children: tuple[ChildDraft, ...]) -> tuple[str, ...]:
    tags: dict[str, str] = {}
    for child in children:
        for tag in child.tags:
            tags.setdefault(tag.casefold(), tag)
    return tuple(tags.values())[:_PARENT_TAG_LIMIT]


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
