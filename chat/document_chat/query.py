"""The retrieval query: at most 120 characters from the request's keywords.

Keywords come from five sources, in order of weight: the message, the normalised
instruction, the section's number and title, the first 500 characters of its text and the
user's last six turns. Standard numbers (GB 50204-2015) and 《titles》 are kept whole;
other text is cut into words (jieba for Chinese). The words that only say what to do with
the text (精简, rewrite, explain) are not searched for: no passage is about them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import jieba

from knowledge.analysis import ENGLISH_STOP_WORDS

MAX_QUERY_CHARS = 120
MAX_KEYWORDS = 20
QUERY_KEYWORDS = 8
CONTENT_PREFIX_CHARS = 500
HISTORY_TURNS = 6

# A code is capitals only, not [A-Za-z]{1,8}, or "than 10" would count as a standard.
_STANDARD = re.compile(r"(?<![A-Za-z])[A-Z]{1,8}(?:/[A-Z])?\s*\d{2,8}(?:[-.]\d{2,4})?")
_BOOK_TITLE = re.compile(r"《[^》]{1,40}》")
_CJK = "\u3400-\u4dbf\u4e00-\u9fff"
_RUN = re.compile(f"([{_CJK}]+)|([A-Za-z][A-Za-z0-9_+-]*)")
_INSTRUCTION_WORDS = frozenset(
    ["润色", "扩写", "改写", "精简", "缩短", "重写", "优化", "内容", "调整", "重新", "生成", "一版", "方案", "解释", "分析", "总结", "建议", "完善", "一节", "这一节", "这节", "本节", "章节", "这段", "一下", "帮我", "请", "如何", "怎么", "什么", "是否", "为什么", "哪些", "一些", "可以", "需要", "rewrite", "rephrase", "reword", "condense", "shorten", "trim", "expand", "elaborate", "polish", "explain", "summarise", "summarize", "analyse", "analyze", "section", "paragraph", "text", "please", "make", "shorter", "longer", "improve", "suggest", "regenerate", "version"]
)
# Weight of each source: the message says what is wanted, history only hints.
_SOURCE_WEIGHTS = (3.0, 2.5, 2.0, 1.0, 0.5)


def extract_terms(text: str) -> list[str]:
    """Standard numbers, book titles and content words of text, in order of appearance."""
    found: list[tuple[int, str]] = []
    taken = text
    for pattern in (_STANDARD, _BOOK_TITLE):
        for match in pattern.finditer(text):
            found.append((match.start(), re.sub(r"\s+", " ", match.group(0))))
            taken = taken[: match.start()] + " " * len(match.group(0)) + taken[match.end() :]
    for match in _RUN.finditer(taken):
        cjk, latin = match.groups()
        if cjk:
            offset = match.start()
            for word in jieba.lcut(cjk):
                if len(word) >= 2 and word not in _INSTRUCTION_WORDS:
                    found.append((offset, word))
                offset += len(word)
        elif latin and len(latin) > 2:
            word = latin.lower()
            if word not in ENGLISH_STOP_WORDS and word not in _INSTRUCTION_WORDS:
                found.append((match.start(), latin))
    return [term for _, term in sorted(found, key=lambda item: item[0])]


def build_keywords(
    message: str, instruction: str, section_heading: str, content: str, history: Sequence[str]
) -> list[str]:
    """At most 20 keywords from the five sources, the most weighted first."""
    sources = (message, instruction, section_heading, content[:CONTENT_PREFIX_CHARS], " ".join(history[-HISTORY_TURNS:]))
    scores: Counter[str] = Counter()
    surface: dict[str, str] = {}  # first spelling seen of each lowercased term, in order
    for weight, text in zip(_SOURCE_WEIGHTS, sources, strict=True):
        for term in extract_terms(text):
            scores[term.lower()] += weight
            surface.setdefault(term.lower(), term)
    order = {key: position for position, key in enumerate(surface)}
    ranked = sorted(surface, key=lambda key: (-scores[key], order[key]))
    return [surface[key] for key in ranked[:MAX_KEYWORDS]]


def build_query(message: str, instruction: str, section_heading: str, keywords: Sequence[str]) -> str:
    """The message, the instruction when it differs, the heading and the top 8 keywords, ≤ 120 chars."""
    parts: list[str] = []
    for part in (message, instruction if instruction != message else "", section_heading, *keywords[:QUERY_KEYWORDS]):
        part = part.strip()
        if part and part.lower() not in " ".join(parts).lower():
            parts.append(part)
    return " ".join(parts)[:MAX_QUERY_CHARS].strip()
