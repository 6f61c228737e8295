"""Which names in a question a KB never mentions anywhere.

A question about "p99 latency" or "GPUs" over a KB that never says p99 or GPU cannot be
answered from it, however close its neighbouring sentences look. Only name-like tokens
count: an English question about Chinese documents is normal, and its ordinary words
("latency", "traffic") are absent from a Chinese KB while the question is still answered.

A name counts as mentioned when, case-insensitively, it starts or ends some word of the KB,
or a part of one: "Postgres" is mentioned by POSTGRES_DSN and PostgreSQL, "SQL" by
PostgreSQL, "GPUs" by "GPU" (the plural's "s" dropped). The KB's words are read once per
content_version, and a question costs one regex pass and a binary search per name.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from .languages import kb_languages
from .models import Chunk, KnowledgeBase
from .search import live_entries

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
# A Latin token with its inner joins ("Qwen3.5-122B", "POSTGRES_DSN", "next-show").
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*")
_PIECE = re.compile(r"[A-Za-z0-9]+")
_FULL_WIDTH = re.compile(r"[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]")
# The parts of a camel-case or acronym word: "PostgreSQL" → Postgre, SQL; "LangGraph" → Lang, Graph.
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_SENTENCE_END = frozenset(".?!。？！；;:：")
_GAP = frozenset(" \t\n\"'“‘(（")
_DIGIT = re.compile(r"[0-9]")
MIN_NAME_CHARS = 2
KB_WORDS_CACHED = 16  # a KB's words can be megabytes: keep the recently asked KBs only


@dataclass(frozen=True)
class KbWords:
    """The lowercase Latin words of a KB and their parts, sorted forwards and reversed."""

    forwards: tuple[str, ...]
    backwards: tuple[str, ...]  # each word reversed, so a suffix is a prefix here
    # False for a KB holding Chinese text: it writes "Chinese" as 中文 and "Beijing" as 北京, so an
    # English question's capitalised words are no names it would write as asked (question_names).
    capitalised_are_names: bool = True

    def mentions(self, name: str) -> bool:
        """Whether the KB mentions name (case-insensitive), whole or by each of its parts."""
        name = _half_width(name).lower()
        squashed = "".join(_PIECE.findall(name))
        if self._holds(squashed):
            return True
        # "Qwen3.5 122B" against a KB's "shutian_qwen3_5_122b": every lettered part is there.
        parts = [part for part in _PIECE.findall(name) if not part.isdigit()]
        return len(parts) > 1 and all(self._holds(part) for part in parts)

    def _holds(self, word: str) -> bool:
        if not word:
            return True
        if _starts_one(self.forwards, word) or _starts_one(self.backwards, word[::-1]):
            return True
        singular = word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else ""
        return bool(singular) and self._holds(singular)


def _half_width(text: str) -> str:
    """text with full-width letters and digits (ＧＰＵ) as ASCII; normalised only when it has some,
    as normalising every passage costs more than reading its words."""
    return unicodedata.normalize("NFKC", text) if _FULL_WIDTH.search(text) else text


def _starts_one(words: Sequence[str], prefix: str) -> bool:
    at = bisect_left(words, prefix)
    return at < len(words) and words[at].startswith(prefix)


def read_words(texts: Iterable[str]) -> KbWords:
    """The KbWords of texts: each Latin token lowercased whole (joins dropped), by part and by camel-case part."""
    words: set[str] = set()
    for text in texts:
        for token in _TOKEN.findall(_half_width(text)):
            pieces = _PIECE.findall(token)
            words.add("".join(pieces).lower())
            for piece in pieces:
                words.add(piece.lower())
                words.update(part.lower() for part in _CAMEL.findall(piece))
    return KbWords(tuple(sorted(words)), tuple(sorted(word[::-1] for word in words)))


def question_names(question: str, *, capitalised: bool = True) -> list[str]:
    """The name-like tokens of question, as written, in order and without repeats.

    A name is a Latin token with a letter and a digit (p99, GPT4), an acronym or a mixed-case
    word (GPUs, LangGraph), a capitalised word that does not open its sentence (unless not
    `capitalised`), or any Latin word in a Chinese question. A token opening with a digit is a
    value (4K, 30s, 3rd).

    A KB written in Chinese translates capitalised English words ("Chinese" is 中文 there,
    "Beijing" 北京), so over such a KB an English question's capitalised words are no names.
    """
    question = _half_width(question)
    matches = list(_TOKEN.finditer(question))
    # Chinese when its characters are at least as many as its Latin words: "请问 How does hybrid
    # search work?" is an English sentence, its words are not names.
    in_chinese = len(_CJK.findall(question)) >= len(matches) > 0
    names = (
        match.group() for match in matches
        if _is_name(match.group(), opens_sentence=not capitalised or _opens_sentence(question, match.start()),
                    in_chinese=in_chinese)
    )
    return list(dict.fromkeys(names))


def _opens_sentence(text: str, start: int) -> bool:
    """Whether the token at start is its sentence's first word: only spaces and quotes, after a
    sentence's end, a Chinese character or nothing, come before it."""
    # Back over the gap before this token only: each gap is read once, for the token after it.
    at = start - 1
    while at >= 0 and text[at] in _GAP:
        at -= 1
    return at < 0 or text[at] in _SENTENCE_END or bool(_CJK.match(text[at]))


def _is_name(token: str, *, opens_sentence: bool, in_chinese: bool) -> bool:
    letters = [c for c in token if c.isalpha()]
    if len(token) < MIN_NAME_CHARS or not letters or token[0].isdigit():
        return False
    if in_chinese or _DIGIT.search(token):
        return True
    upper = sum(c.isupper() for c in letters)
    if upper >= 2 or any(c.isupper() for c in token[1:]):
        return True
    return token[0].isupper() and not opens_sentence


def unmentioned_names(question: str, words: KbWords) -> tuple[str, ...]:
    """The names of question (question_names) that words never mention."""
    names = question_names(question, capitalised=words.capitalised_are_names)
    return tuple(name for name in names if not words.mentions(name))


def kb_words(kb: KnowledgeBase) -> KbWords:
    """The words of the KB's live text, its section titles and document names."""
    if kb.pk is None:
        return KbWords((), ())
    return replace(_kb_words(kb.pk, kb.content_version), capitalised_are_names="zh" not in kb_languages(kb))


@lru_cache(maxsize=KB_WORDS_CACHED)
def _kb_words(kb_id: int, content_version: int) -> KbWords:
    # Keyed by content_version: any change to the KB's documents reads its words again.
    rows = live_entries(KnowledgeBase(pk=kb_id)).filter(level=Chunk.CHILD).values_list(
        "chunk__text", "chunk__section_title", "chunk__chapter_level_1", "chunk__chapter_level_2",
        "chunk__document__name",
    )
    return read_words(" ".join(row) for row in rows.iterator())
