"""Pick the high-value keywords of a chunk, stored as its tag list for LIKE matching."""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache

_STANDARD = re.compile(
    # Digits belong to the code only before "/" or a space ("DB11/T"), so GB50204 stays whole.
    r"(?<![A-Za-z0-9/])((?:T/)?[A-Z]{1,5}(?:\d{1,3}(?=[/\s]))?(?:/[A-Z]{1,4})?)"
    r"\s*(\d{1,6}(?:\.\d{1,3})*)"
    r"(?:\s*([-—–－:：])\s*((?:19|20)\d{2}))?(?![A-Za-z0-9])"
)
# Codes common enough that a bare "GB 50204" (no year) is still a standard number.
_YEARLESS_PREFIXES = re.compile(
    r"(?:GB|GB/T|GB/Z|JGJ|JGJ/T|JG/T|CJJ|CJJ/T|JTG|JTG/T|TB|TB/T|DL/T|SL|T/CECS|CECS"
    r"|ISO|IEC|ISO/IEC|EN|ASTM|DBJ\d*|DB\d{2}|DB\d{2}/T)"
)
_BOOK_TITLE = re.compile(r"《([^《》\n]{1,60})》")
_LATIN_WORD = re.compile(r"(?<![A-Za-z0-9])[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*(?![A-Za-z0-9])")
_CJK_WORD = re.compile(r"[\u4e00-\u9fff]{2,}")

# Words that are nouns to jieba but say nothing about what a chunk is about.
_GENERIC_WORDS = frozenset(
    ["验收", "合格", "标准", "要求", "进行", "相关", "工作", "规定", "规范", "方案", "措施", "工程", "施工", "质量", "安全", "管理", "内容", "方法", "情况", "问题", "方面", "部分", "过程", "单位", "人员", "项目", "技术", "系统", "时间", "结果", "数据", "文件", "范围", "条件", "情形", "原则", "目的", "依据", "作用", "影响", "效果", "方式", "形式", "程序", "阶段", "环节", "能力", "水平", "办法", "意见"]
)
# Below this jieba IDF a noun is too common to be a useful tag (问题 3.96, 项目 4.88).
_MIN_IDF = 5.0


@dataclass(frozen=True)
class _Lexicon:
    """jieba's dictionary with its part-of-speech and IDF tables."""

    freq: dict[str, int]  # word -> count; every prefix of a word is present with count 0
    log_total: float
    pos: dict[str, str]
    idf: dict[str, float]
    median_idf: float


def extract_tags(text: str, limit: int = 8) -> tuple[str, ...]:
    """Return standard numbers, 《titles》 and technical terms found in text."""
    standards = _standard_numbers(text)
    titles = [match.strip() for match in _BOOK_TITLE.findall(text)]
    rest = _BOOK_TITLE.sub(" ", _STANDARD.sub(_blank_if_standard, text))
    candidates = [*standards, *titles, *_latin_terms(rest)]
    if len(candidates) < limit:
        candidates += _chinese_terms(rest, limit)
    return _dedupe(candidates, limit)


def _standard_numbers(text: str) -> list[str]:
    found = (_normalise_standard(match) for match in _STANDARD.finditer(text))
    return [number for number in found if number]


def _normalise_standard(match: re.Match[str]) -> str:
    """Return "GB/T 50502-2009" style text, or "" when the match is not a standard."""
    prefix, number, separator, year = match.groups()
    if year:
        joiner = ":" if separator in ":：" else "-"
        return f"{prefix} {number}{joiner}{year}"
    if _YEARLESS_PREFIXES.fullmatch(prefix):
        return f"{prefix} {number}"
    return ""


def _blank_if_standard(match: re.Match[str]) -> str:
    # Keep rejected look-alikes such as BM25 for the acronym pass.
    return " " if _normalise_standard(match) else match.group(0)


def _latin_terms(text: str) -> list[str]:
    return [word for word in _LATIN_WORD.findall(text) if _is_latin_term(word)]


def _is_latin_term(word: str) -> bool:
    if "-" in word:
        return len(word) >= 4 and sum(ch.isalpha() for ch in word) >= 3
    if word.isupper():
        return sum(ch.isalpha() for ch in word) >= 2
    return re.search(r"[a-z][A-Z]", word) is not None


def _chinese_terms(text: str, limit: int) -> list[str]:
    if not _CJK_WORD.search(text):
        return []
    lexicon = _lexicon()
    words = (word for run in _CJK_WORD.findall(text) for word in _segment(run, lexicon))
    counts = Counter(word for word in words if _is_chinese_term(word, lexicon))
    # Counter keeps first-seen order, so equal scores rank by appearance.
    ranked = sorted(counts, key=lambda w: -counts[w] * lexicon.idf.get(w, lexicon.median_idf))
    return ranked[:limit]


def _segment(run: str, lexicon: _Lexicon) -> list[str]:
    """Cut a run of Chinese characters exactly as jieba.lcut(run, HMM=False) does.

    Same dictionary and most-probable-path rule in one flat loop, 2-3x faster: jieba's
    per-character generators took most of the per-chunk tagging budget. HMM stays off: it
    is slower and invents words such as 前应 from stray characters.
    """
    freq, log, log_total, size = lexicon.freq, math.log, lexicon.log_total, len(run)
    best = [0.0] * (size + 1)  # best log-probability of run[i:]
    ends = list(range(1, size + 1))
    for start in range(size - 1, -1, -1):
        score = -math.inf
        stop, fragment = start + 1, run[start]
        while fragment in freq:
            if count := freq[fragment]:
                candidate = log(count) - log_total + best[stop]
                if candidate >= score:  # on a tie jieba keeps the longer word
                    score, ends[start] = candidate, stop
            stop += 1
            if stop > size:
                break
            fragment = run[start:stop]
        # A character that is no word on its own stands alone at probability 1/total.
        best[start] = score if score > -math.inf else best[start + 1] - log_total
    words, start = [], 0
    while start < size:
        words.append(run[start : ends[start]])
        start = ends[start]
    return words


def _is_chinese_term(word: str, lexicon: _Lexicon) -> bool:
    if len(word) < 2 or word in _GENERIC_WORDS:
        return False
    tag = lexicon.pos.get(word, "n")
    is_noun = tag.startswith("n") or tag == "vn"
    return is_noun and lexicon.idf.get(word, lexicon.median_idf) >= _MIN_IDF


def _dedupe(candidates: list[str], limit: int) -> tuple[str, ...]:
    seen: dict[str, str] = {}
    for candidate in candidates:
        seen.setdefault(candidate.casefold(), candidate)
    return tuple(list(seen.values())[:limit])


@cache
def _lexicon() -> _Lexicon:
    """Load jieba once, on first use, without its start-up chatter."""
    import jieba
    import jieba.analyse
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    tokenizer, tfidf = jieba.dt, jieba.analyse.default_tfidf
    return _Lexicon(
        freq=tokenizer.FREQ,
        log_total=math.log(tokenizer.total),
        pos=jieba.posseg.dt.word_tag_tab,
        idf=tfidf.idf_freq,
        median_idf=tfidf.median_idf,
    )
