"""Compound questions: a message that asks two (or more) things, cut into questions of their own.

Two shapes are cut, both conservatively, as a wrong cut answers a question nobody asked:

- Clauses: "熔断器的失败率是多少？限流用什么算法？", "What is X, and how does Y work?" — the
  message is cut at question marks, semicolons and conjunctions (以及, 还有, 并且, 和, and …),
  and the cut stands only when every piece is a question on its own: it has an asking word
  (什么, 多少, how, which, explain …), at least two terms to search for, and does not open by
  pointing back ("它的超时呢？" needs the clause before it).
- A shared asking word over a list, made explicit: "X 和 Y 分别是多少" → "X 是多少", "Y 是多少";
  "What are the timeouts of A and B respectively?", "the timeout of A and of B", "对比 A 和 B 的 X",
  "Compare the X of A and B".

"What are the benefits and drawbacks of caching?", "熔断器和限流器是什么" or "How do A and B
interact?" ask about one list or one relation: they are not cut.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .state import language_of

MAX_PARTS = 4
MIN_TERMS = 2
# A list that shares one asking word is said in a sentence; its patterns read a longer message
# in more than linear time, so it is not looked for there.
MAX_DISTRIBUTED_CHARS = 300

Tokenize = Callable[[str], list[str]]

# Where clauses meet: after a question mark or semicolon, and before a conjunction that can
# open a second question. "和"/"and" are cut too: the pieces' test below rejects a cut of a list.
_CLAUSE_CUT = re.compile(
    # Possessive runs of spaces, and a run entered only at its start ((?<!\s)|(?!\s)): a long
    # run of spaces is read once, not once from each of its characters.
    r"(?<=[?？;；])\s*+"
    r"|(?:(?<!\s)|(?!\s))\s*+[，,]?+\s*+(?:以及|还有|并且|而且|另外|同时|此外)\s*+"
    r"|(?:(?<!\s)|(?!\s))\s*+[，,]\s*+(?:并|和|及)\s*+"
    r"|(?<=[什么多少几哪样何吗呢])\s*+(?:和|及)\s*+"
    r"|(?:(?<!\s)|(?!\s))(?:\s*+,\s*+|\s++)(?:and also|and|also|plus)\s++"
    r"(?=(?:what|which|who|whom|whose|when|where|why|how|is|are|was|were|does|do|did|can|could|should|will|would|has|have|explain|describe|list)\b)",
    re.IGNORECASE,
)
# "请说明原因" asks, but of the clause before it: a Chinese request is no question of its own.
# "开没开", "是不是", "有没有": a verb, 没/不, the verb again, asks yes or no.
_ASKS_ZH = re.compile(r"什么|多少|几[个种条次类项层步级秒分]?|哪|如何|怎么|怎样|为什么|为何|是否|吗|呢|谁|何时|何种|多久|多长|多大|多高|多快"
                      r"|([\u4e00-\u9fff])[没不]\1")
# "文档对话用的是哪个大模型，开没开思考模式？": a Chinese comma also parts two questions, when
# both halves ask on their own ("同一个问题问第二遍时，哪些步骤…" does not: its first half asks nothing).
_COMMA_ZH = re.compile(r"\s*+，\s*+")
_ASKS_EN = re.compile(
    r"\b(?:what|which|who|whom|whose|when|where|why|how)\b"
    r"|^(?:is|are|was|were|does|do|did|can|could|should|will|would|has|have|explain|describe|list|tell me)\b",
    re.IGNORECASE,
)
_POINTS_BACK = re.compile(r"^(?:它|其|这|该|此|那|他们|它们|上述|以上)|^(?:it|its|they|their|this|that|these|those|them)\b",
                          re.IGNORECASE)
# A later clause that names what the clause before it asked about ("how many of them …", "does
# that default …", "which alternative …", "各自的用途", "应用自身又做了什么") does not stand alone
# either, wherever the word is.
_REFERS_BACK = re.compile(
    r"它|他们|其中|其他|其余|另一|上述|以上|前者|后者|这些|那些|同样|各自|两边|两者|二者|双方"
    r"|\b(?:it|its|they|them|their|this|that|those|these|former|latter|alternatives?|other|others|another|else|instead"
    r"|rest|remaining|same)\b|\bthere\b(?!\s+(?:is|are|was|were|be)\b)",
    re.IGNORECASE,
)
# "又"/"也" ("in turn", "too") lean on the clause before unless the clause names its own subject
# first: "应用自身又做了什么" needs the deployment it answers, "RAG Agent 架构设计里的新 Agent 又基于
# 什么框架" does not.
_ALSO_ZH = re.compile(r"又|也")
OWN_SUBJECT_TERMS = 3
# "If I …, what …, and what …?": the condition holds for every clause, which is not a question alone.
# "After how many turns …" asks: its "after" opens the question, not a condition.
_CONDITION = re.compile(
    r"^(?:if|once|(?:after|before)(?!\s+(?:how|what|which|whose)\b)|suppose|unless|when(?!\s+(?:is|are|was|were|does|do|did|can|could|should|will|would|has|have)\b)"
    r"|如果|假如|假设|若|当)\b",
    re.IGNORECASE,
)
_LEADING_JOIN = re.compile(r"^(?:and|also|plus|then)\s+|^(?:并且|而且|并|和|及|以及|还有|另外|同时|此外)", re.IGNORECASE)
_TRIM = " \t\n,，、。."

# "X 和 Y 分别是多少": the items before 分别/各自 share what follows.
_DISTRIBUTED_ZH = re.compile(r"^(?P<head>.+?)\s*(?:分别|各自|各)\s*(?P<rest>(?:的|是|有|为|用|在|需要|要|多|怎么|如何|采用|使用|依赖|支持|设置|默认).*)$")
_SENTENCE_END = re.compile(r"[？?。；;!！]")
_SHARED_LEAD_ZH = re.compile(r"^.+?(?<![存现正所实])在(?=.)")
_LIST_ZH = re.compile(r"\s*(?:以及|和|与|跟|及|、)\s*")
# "对比 A 和 B 的 X", "A 和 B 的 X 有什么区别": the attribute X of each side.
_COMPARE_ZH = re.compile(r"^(?:请)?(?:对比|比较)(?:一下)?\s*(?P<a>.{1,20}?)\s*(?:和|与|跟)\s*(?P<b>.{1,20}?)\s*的\s*(?P<x>[^，,？?。]{2,20}?)[？?。]?$")
_DIFFERENCE_ZH = re.compile(r"^(?P<a>[^，,和与跟]{1,20}?)\s*(?:和|与|跟)\s*(?P<b>[^，,和与跟]{1,20}?)\s*的\s*(?P<x>[^，,？?。的]{2,20}?)\s*"
                            r"(?:有什么|有何|有哪些)?(?:区别|不同|差异|差别|异同)(?:是什么|吗)?[？?。]?$")
_RESPECTIVELY_EN = re.compile(
    r"^(?P<before>.+?),?\s+and\s+(?P<b>.+?),?\s+(?:respectively|each)\b\s*(?P<tail>[^?]*?)\s*(?P<mark>\?)?$",
    re.IGNORECASE,
)
# The last word before the first item that the items share: "… timeouts of | A and B respectively".
_ITEM_START_EN = re.compile(r"^(?P<head>.*\b(?:of|for|in|on|by|do|does|did|are|is|were|was))\s+(?P<a>.+)$", re.IGNORECASE)
_REPEATED_PREPOSITION_EN = re.compile(
    r"^(?P<head>.*?\b(?P<prep>of|for|in|on|by|from|at))\s+(?P<a>.+?),?\s+and\s+(?P=prep)\s+(?P<b>.+?)\s*(?P<mark>\?)?$",
    re.IGNORECASE,
)
_COMPARES_EN = re.compile(r"\b(?:differ|differs|different|difference|compare[sd]?|comparison|versus|vs|between)\b", re.IGNORECASE)
MAX_ITEM_WORDS = 5
# A list that shares an asking word is said in one clause: no commas or semicolons in it.
_CLAUSE_MARK = re.compile(r"[,;，；]")
_COMPARE_EN = re.compile(
    r"^(?:compare|contrast)\s+(?P<head>.+?\b(?:of|for|in))\s+(?P<a>.+?)\s+(?:and|with|vs\.?|versus)\s+(?P<b>.+?)\s*[.?]?$",
    re.IGNORECASE,
)


def split_question(text: str, tokenize: Tokenize) -> list[str]:
    """The questions a compound message asks, each standing alone; [] when it asks one thing.

    `tokenize` gives a text's search terms (knowledge.analysis.analyze): a piece needs its own.
    """
    text = text.strip()
    if not text:
        return []
    for cut in (_distributed, _clauses):
        parts = cut(text, tokenize)
        if len(parts) >= 2:
            return parts[:MAX_PARTS]
    return []


def _clauses(text: str, tokenize: Tokenize) -> list[str]:
    pieces = [_clean(piece) for piece in _CLAUSE_CUT.split(text)]
    pieces = [part for piece in pieces if piece.strip(" ?？;；") for part in _at_commas(piece, tokenize)]
    if len(pieces) < 2:
        return []
    if any(_refers_back(piece, tokenize) for piece in pieces[1:]) or _CONDITION.match(pieces[0]):
        return []
    return pieces if all(_stands_alone(piece, tokenize) for piece in pieces) else []


def _at_commas(piece: str, tokenize: Tokenize) -> list[str]:
    """piece cut at its Chinese commas when every half is a question of its own, else [piece]."""
    halves = [_clean(half) for half in _COMMA_ZH.split(piece)]
    if len(halves) < 2 or not all(halves) or any(_refers_back(half, tokenize) for half in halves[1:]):
        return [piece]
    return halves if all(_stands_alone(half, tokenize) for half in halves) else [piece]


def _refers_back(piece: str, tokenize: Tokenize) -> bool:
    """Whether a later clause needs the one before it: it points back, or says 又/也 before naming
    a subject of its own."""
    if _REFERS_BACK.search(piece):
        return True
    also = _ALSO_ZH.search(piece)
    return bool(also) and len(set(tokenize(piece[: also.start()]))) < OWN_SUBJECT_TERMS


def _stands_alone(piece: str, tokenize: Tokenize) -> bool:
    asks = _ASKS_ZH.search(piece) or _ASKS_EN.search(piece)
    return bool(asks) and not _POINTS_BACK.match(piece) and len(set(tokenize(piece))) >= MIN_TERMS


def _distributed(text: str, tokenize: Tokenize) -> list[str]:
    if len(text) > MAX_DISTRIBUTED_CHARS:
        return []
    for build in (_distributed_zh, _compared_zh, _respectively_en, _repeated_preposition_en, _compared_en):
        parts = build(text)
        if len(parts) >= 2 and all(len(set(tokenize(part))) >= 1 for part in parts) and len(set(parts)) == len(parts):
            return parts
    return []


def _distributed_zh(text: str) -> list[str]:
    match = _DISTRIBUTED_ZH.match(text)
    if not match:
        return []
    head, rest = match.group("head"), match.group("rest")
    if not _ASKS_ZH.search(rest) or _SENTENCE_END.search(head + rest.rstrip("？?。；;!！ ")):
        # "A 和 B 分别介绍一下" gives no question to each; "…分别…？两边…吗？" is two sentences.
        return []
    shared = ""
    if "，" in head or "," in head:  # "在文档中，A 和 B 分别…": the lead-in belongs to every item
        shared, head = re.split(r"[，,](?=[^，,]*$)", head)
        shared += "，"
    items = [_clean(item) for item in _LIST_ZH.split(head)]
    if len(items) < 2 or not all(items):
        return []
    lead = _SHARED_LEAD_ZH.match(items[0])
    if lead and not any(_SHARED_LEAD_ZH.match(item) for item in items[1:]):
        # "Jaccard 相似度在重排打分和实体消歧里分别…": the subject before 在 is every item's.
        items = [items[0], *(lead.group() + item for item in items[1:])]
    attribute = re.search(r"\s*的[^的]+$", items[-1])
    if attribute and not any("的" in item for item in items[:-1]):
        # "向量和 BM25 的权重分别是多少": the weight of each, not "向量是多少".
        items = [*(item + attribute.group().strip() for item in items[:-1]), items[-1]]
    return [f"{shared}{item}{' ' if _ends_in_word(item) and not rest.startswith('的') else ''}{rest}" for item in items]


def _ends_in_word(text: str) -> bool:
    """Whether text ends in a Latin word or number, which a following word must not touch."""
    return text[-1].isascii() and text[-1].isalnum()


def _compared_zh(text: str) -> list[str]:
    match = _COMPARE_ZH.match(text) or _DIFFERENCE_ZH.match(text)
    if not match:
        return []
    return [f"{match.group(side).strip()}的{match.group('x').strip()}" for side in ("a", "b")]


def _respectively_en(text: str) -> list[str]:
    match = None if _CLAUSE_MARK.search(text) else _RESPECTIVELY_EN.match(text)
    start = _ITEM_START_EN.match(match.group("before")) if match else None
    if not (match and start and _ASKS_EN.search(start.group("head"))):
        return []
    if max(len(start.group("a").split()), len(match.group("b").split())) > MAX_ITEM_WORDS:
        return []
    tail = f" {match.group('tail')}" if match.group("tail") else ""
    mark = match.group("mark") or ""
    return [f"{start.group('head')} {item}{tail}{mark}" for item in (start.group("a"), match.group("b"))]


def _repeated_preposition_en(text: str) -> list[str]:
    match = None if _CLAUSE_MARK.search(text) else _REPEATED_PREPOSITION_EN.match(text)
    # "… of A and of B differ in …": B must end the question, and a comparison is one question.
    if not match or not _ASKS_EN.search(match.group("head")) or _COMPARES_EN.search(text):
        return []
    if len(match.group("b").split()) > MAX_ITEM_WORDS:
        return []
    mark = match.group("mark") or ""
    return [f"{match.group('head')} {match.group(side)}{mark}" for side in ("a", "b")]


def _compared_en(text: str) -> list[str]:
    match = _COMPARE_EN.match(text)
    if not match:
        return []
    head = match.group("head")
    return [f"{head[0].upper()}{head[1:]} {match.group(side)}" for side in ("a", "b")]


def _clean(piece: str) -> str:
    return _LEADING_JOIN.sub("", piece.strip(_TRIM)).strip(_TRIM)


def part_heading(n: int, part: str) -> str:
    """The line that opens one part's answer."""
    return f"**{n}. {part.strip()}**"


def answer_parts(answer: str, questions: list[str]) -> list[tuple[str, str]]:
    """(question, its answer) for each part of an answer written under part_heading lines; []
    when the answer does not have them all (it was cut short). Text before the first heading
    belongs to the first part."""
    starts: list[int] = []
    for n, question in enumerate(questions, 1):
        at = answer.find(part_heading(n, question), starts[-1] if starts else 0)
        if at < 0:
            return []
        starts.append(at)
    ends = [*starts[1:], len(answer)]
    return [(question, answer[(0 if i == 0 else start):end])
            for i, (question, start, end) in enumerate(zip(questions, starts, ends, strict=True))]


def part_not_found(part: str, question: str) -> str:
    """What the answer says of a part nothing in the knowledge base answers, in the question's language."""
    if language_of(question) == "zh":
        return f"知识库中没有找到这一部分的答案：{part.strip()}"
    return f"Nothing in the knowledge base answers this part: {part.strip()}"
