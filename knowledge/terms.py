"""Bilingual term pairs that a knowledge base's own documents state, for its query expansion.

Chinese technical writing names its terms in both languages side by side: "质量门控
(quality_gate.py)", "Reciprocal Rank Fusion（倒数排名融合）", "### 2.2 API 代理 (Next.js Route
Handler)". Each such pair is a translation the KB's authors chose, so an English question about
the quality gate can be searched with 质量门控 before any multilingual model has embedded the KB.

Every pattern has bounded repetitions only, so mining costs a constant per character.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache
from types import MappingProxyType

from django.db import transaction

from .analysis import CHINESE_STOP_WORDS, ENGLISH_STOP_WORDS
from .models import TermPair

_HAN = "\u4e00-\u9fff"
# A run of ideographs, then the English (a phrase or an identifier, in backticks or not) in
# parentheses of either width: "质量门控(quality_gate.py)", "流式（SSE）".
_ZH_THEN_EN = re.compile(
    rf"([{_HAN}]{{2,12}})[ \t]?[（(][ \t]?`?([A-Za-z][A-Za-z0-9_.\-]{{0,30}}(?:[ \t][A-Za-z0-9][A-Za-z0-9_.\-]{{0,30}}){{0,4}})`?[ \t]?[)）]"
)
# English words, then ideographs in parentheses: "Reciprocal Rank Fusion（倒数排名融合）".
_EN_THEN_ZH = re.compile(
    rf"(?<![A-Za-z0-9_.\-])([A-Za-z][A-Za-z0-9_\-]{{0,30}}(?:[ \t][A-Za-z][A-Za-z0-9_\-]{{0,30}}){{0,4}})[ \t]?[（(]([{_HAN}]{{2,10}})[)）]"
)
_CONSTANT = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_FILE_SUFFIX = re.compile(r"\.(?:py|ts|tsx|js|jsx|go|rs|java|md|json|ya?ml|toml|sql|sh|html|css)$", re.I)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD_SPLIT = re.compile(r"[\s_.\-]+")
# A clause's function characters, never a term's first: "的检索能力" is 检索能力.
_LEADING_PARTICLES = "的了是这那该与及或"
MAX_PAIRS_PER_TEXT = 500  # a glossary, not a dictionary: enough for any one document's terms
CHARS_PER_ENGLISH_WORD = 2  # a two-character Chinese word stands for about one English word


def mine_term_pairs(text: str) -> Counter[tuple[str, str]]:
    """Count the (Chinese, English) term pairs text states side by side."""
    pairs: Counter[tuple[str, str]] = Counter()
    for match in _ZH_THEN_EN.finditer(text):
        pair = _pair(match[1], match[2], chinese_first=True)
        if pair:
            pairs[pair] += 1
    for match in _EN_THEN_ZH.finditer(text):
        pair = _pair(match[2], match[1], chinese_first=False)
        if pair:
            pairs[pair] += 1
    return Counter(dict(pairs.most_common(MAX_PAIRS_PER_TEXT)))


def _pair(chinese: str, english: str, *, chinese_first: bool) -> tuple[str, str] | None:
    words = _english_words(english)
    if not chinese_first:
        # "uses Reciprocal Rank Fusion（倒数排名融合）": as many English words as the Chinese says.
        words = _drop_leading_stop_words(words[-max(1, len(chinese) // CHARS_PER_ENGLISH_WORD):])
    if not words or not any(len(w) >= 3 and w.isalpha() for w in words) or len(words) > 5:
        return None
    if all(w.lower() in ENGLISH_STOP_WORDS for w in words) or _CONSTANT.fullmatch(english.strip(" `")):
        return None  # a constant or environment variable (CHAT_TOOL_TIMEOUT_S) annotates, not translates
    said = sum(len(w) if w.isupper() and len(w) <= 5 else 1 for w in words)  # RAG says three words
    if chinese_first:
        # An acronym alone stands for its words (流式输出（SSE）); beside other words, for itself.
        zh = _trailing_words(chinese, said if len(words) == 1 else len(words))
        if len(words) == 1 and words[0].isupper() and len(chinese) > CHARS_PER_ENGLISH_WORD * said:
            return None  # "支持拖拽多文件上传（HTMX）": an acronym after a clause names its tool
    elif len(chinese) > CHARS_PER_ENGLISH_WORD * said:
        return None  # "AttributeError（这是刻意的强约束）" comments on the name, does not translate it
    else:
        zh = chinese
    zh = zh.lstrip(_LEADING_PARTICLES) if len(zh) > 2 else zh
    if len(zh) < 2 or zh in CHINESE_STOP_WORDS:
        return None
    return zh, " ".join(words)


def _english_words(english: str) -> list[str]:
    """"quality_gate.py" → ["quality", "gate"]; "StreamHandler" → ["Stream", "Handler"]."""
    english = _FILE_SUFFIX.sub("", english.strip())
    return [w for part in _WORD_SPLIT.split(english) for w in _CAMEL.split(part) if w]


def _drop_leading_stop_words(words: list[str]) -> list[str]:
    while words and words[0].lower() in ENGLISH_STOP_WORDS:
        words = words[1:]
    return words


def _trailing_words(chinese: str, english_words: int) -> str:
    """The end of a run of ideographs long enough for english_words words, cut at a jieba word.

    "只负责数据检索（retrieval）" pairs 数据检索, not the whole clause, with "retrieval".
    """
    want = max(2, CHARS_PER_ENGLISH_WORD * english_words)
    if len(chinese) <= want:
        return chinese
    from .analysis import _jieba

    kept = ""
    for word in reversed(_jieba().lcut(chinese, HMM=False)):
        if len(kept) >= want:
            break
        kept = word + kept
    return kept


def term_map(pair_counts: Iterable[tuple[str, str, int]], builtin: Mapping[str, str] | None = None) -> dict[str, str]:
    """Chinese → English for expand_query: the most stated English of each Chinese term.

    One Chinese term per English term (the most stated), as expand_query asks, and none that
    the built-in map already has in either language: those translations were checked by hand.
    A single lowercase word in parentheses is as often a note ("非流式生成（general）") as a
    translation, so it counts only when the KB states it twice.
    """
    builtin = builtin or {}
    best: dict[str, tuple[int, str]] = {}
    for zh, en, count in pair_counts:
        if count < 2 and en.isalpha() and en.islower():
            continue
        if zh not in best or count > best[zh][0]:
            best[zh] = (count, en)
    taken = {en.lower() for en in builtin.values()}
    by_english: dict[str, tuple[int, str]] = {}
    for zh, (count, en) in best.items():
        key = en.lower()
        if zh in builtin or key in taken:
            continue
        if key not in by_english or count > by_english[key][0]:
            by_english[key] = (count, zh)
    return {zh: best[zh][1] for _, (_, zh) in sorted(by_english.items())}


def store_term_pairs(document_id: int, kb_id: int, text: str) -> int:
    """Replace what the document states of term pairs with what text states; return how many."""
    pairs = mine_term_pairs(text)
    rows = [
        TermPair(kb_id=kb_id, document_id=document_id, chinese=zh[:64], english=en[:200], count=count)
        for (zh, en), count in pairs.items()
    ]
    with transaction.atomic():
        TermPair.objects.filter(document_id=document_id).delete()
        TermPair.objects.bulk_create(rows, batch_size=500, ignore_conflicts=True)
    return len(rows)


def kb_term_map(
    kb_id: int, builtin: Mapping[str, str], also_known: Mapping[str, str] | None = None,
) -> Mapping[str, str]:
    """builtin, then the KB's own Chinese → English terms that neither builtin nor also_known
    (the words expand_query translates one way) has (see term_map)."""
    rows = tuple(TermPair.objects.counts_for_kb(kb_id))
    return _kb_term_map(rows, tuple(builtin.items()), tuple((also_known or {}).items()))


# One small query a search; the map is built again only when the KB's pairs change.
@lru_cache(maxsize=64)
def _kb_term_map(
    rows: tuple[tuple[str, str, int], ...], builtin: tuple[tuple[str, str], ...], also_known: tuple[tuple[str, str], ...],
) -> Mapping[str, str]:
    own = term_map(rows, {**dict(also_known), **dict(builtin)})
    return MappingProxyType({**dict(builtin), **own})
