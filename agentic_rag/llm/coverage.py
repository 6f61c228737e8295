"""Whether quoted sentences, taken together, answer a question.

A quote copied faithfully from its source proves only that the source says it. The quotes
answer the question when
- they speak of its subject: the question's content terms (in any of its cross-language
  variants) occur in the quotes, their section titles or document names: both of two, two of
  a longer question, a third of a long one; a paraphrase shares few words, unrelated text fewer
  (quotes in another language than the question's are not judged on this: their words cannot
  be matched, and the per-sentence check and the kind of fact still apply);
- they hold the kind of fact it asks for: a number for "how many", a time for "how long",
  a version for "which version", at least two items for "which events", and for "how does
  it work" a sentence that says something (not only a lead-in, a heading or a tree line);
- at least one of them is more than a fragment: a lead-in line ("5 个处理器链式执行:")
  without its list, a bare heading or a line of a box drawing names a topic, it answers nothing.
`unanswered` returns why they fall short ("" when they answer), in English, for the API and
traces; the chat page shows its own translated words beside it. `lacks_fact` is the part of the
kind-of-fact test certain enough for the offline reader to say "not found" instead of quoting:
an amount, a version, a setting's name or a person (a role, a team) asked for and none in the quotes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .reader import _FACT_PATTERNS, ASKS_WHO, _new_text, _parts, declares_asked_name, expected_answer_types
from .units import has_cjk, text_language

Tokenize = Callable[[str], list[str]]
Expand = Callable[[str], list[str]]

# Below this many of the question's content terms, the quotes are about something else:
# "语义缓存" is not answered by a sentence about some other 缓存.
MIN_SUBJECT_TERMS = 2
MIN_SUBJECT_SHARE = 1 / 3  # of a long question, whose paraphrase keeps fewer of its words
# Words that ask how or what for, not about what: "How does the breaker work?" is about the breaker.
_ASKING_WORDS = frozenset(
    re.findall(
        r"\S+",
        "work works working happen happens done use used implement implemented mechanism explain describe "
        "工作 运作 实现 原理 机制 作用 流程 过程 处理 怎么 如何 怎样 什么 哪些 哪个 哪里 多少 为什么 解释 说明 介绍 "
        "one make may get need needs 起来 以后 之后 需要 可以 能够 时候 一下",
    )
)
_BOX_DRAWING = re.compile("[\u2500-\u257f]")
# "## 1.2 六层架构", "7.6 质量门控": a title, with no sentence in it.
_BARE_HEADING = re.compile(r"^\s*(?:#+\s*|\d+(?:\.\d+)+\s+)[^。！？!?；;，,.]{1,40}$")
# A line of code that opens a block ("async for mode, payload in graph.astream(…, stream_mode=
# ["updates", "custom"]):"): its colon ends a statement, not a lead-in waiting for its list.
_CODE_HEADER = re.compile(r"^(?:async\s+)?(?:for|if|elif|while|with)\s.+:$")
# A lone line of code that states no value: a call, a definition, brackets.
_CODE_LINE = re.compile(r"^\s*(?:[{}\[\]();,]+|(?:async\s+)?(?:def|class|import|from|return)\b.*|[\w.]+\(.*\)\s*;?)$")
# "How does it work?", "是怎么实现的？": asks for a mechanism ("会怎样？" asks what happens). The
# gap is bounded: from each "how does" of a long message the scan stops within a sentence.
_ASKS_HOW = re.compile(
    r"(?:如何|怎么|怎样)(?:工作|运作|运行|实现|做到|处理|完成|进行|判断|决定|选择|计算)|工作原理|原理是"
    r"|\bhow (?:does|do|is|are|can)\b[^?？]{0,80}?\b(?:work|works|implemented|handled|done|built|computed|decided|chosen"
    r"|calculated|determined)\b",
    re.IGNORECASE,
)
# Asks which version, not about versions ("新版本处理完之前…" is about a new version of a file).
_ASKS_VERSION = re.compile(r"(?:什么|哪个|哪一个|哪些|多少)版本|版本号|\b(?:which|what) versions?\b|\bversion number\b", re.IGNORECASE)
# Question words inside a Chinese question: cut out, so that a tokenizer of character pairs does
# not make terms across them ("熔断器什么时候打开" is about 熔断器 and 打开, not 器什 or 候打).
_QUESTION_WORDS = re.compile(
    r"什么时候|什么样|为什么|做什么|是什么|什么|怎么样|怎么|怎样|如何|哪些|哪个|哪里|多少|多久|是否|请问|有没有"
    r"|几[个种条次类项步层路级段轮]?|有|吗|呢|吧|的|是|了|[?？,，。!！]"
)
# Words that carry a "how": a step, a condition, a cause, a means.
_MECHANISM = re.compile(
    r"当|时[，,]|如果|若|则|会|先|然后|之后|通过|经过|把|将|按照|根据|基于|依次|超过|达到|触发|进入|返回|调用|使用|→|->|=>"
    r"|\b(?:when|if|then|after|before|once|until|unless|by|via|through|using|uses?|into|each|every|per|so that|because"
    r"|while|calls?|returns?|sends?|reads?|writes?|stores?|checks?|runs?|splits?|fuses?|merges?|opens?|closes?)\b",
    re.IGNORECASE,
)
# What answers "which version": the reader's "3.11" or "0.8.0", and also "v1.0" or "V2".
_HOLDS_VERSION = re.compile(r"(?<![\w.])[vV]?\d+\.\d+(?:\.\d+)*(?![\w.])|(?<![\w.])[vV]\d+(?![\w.])")
# One sentence naming several things: "A、B", "A 和 B", "FastAPI + LangGraph", "A → B", "A/B".
_NAMES_SEVERAL = re.compile(r"[、,，;；/+→和与及]|\b(?:and|or)\b", re.IGNORECASE)
# Asks how many, how much, how long or how large: a number answers it ("比例", "weights" or
# "port" name a topic that a sentence may state in words).
_ASKS_AMOUNT = re.compile(
    r"多少|(?<!哪)几[个条种次轮层步项类路级秒天周]|多大|多长|多久|\bhow (?:many|much|big|large|long|often)\b"
    r"|\bwhat (?:number|percentage)\b|\bin (?:seconds|milliseconds|minutes|bytes|tokens|characters)\b"
    r"|\b(?:vector|embedding) dimensions?\b|向量维度|维数|\bnumber of\b",
    re.IGNORECASE,
)
# Asks which port ("默认跑在哪个端口上？", "Which host port does … publish?") or a vector's dimension
# ("What embedding vector dimension…", "向量维度是多少"): each is a whole number of a few digits
# (a weight of 1.0 beside the word 向量 is no dimension).
_ASKS_PORT = re.compile(r"端口|\bports?\b", re.IGNORECASE)
_ASKS_DIMENSION = re.compile(r"\b(?:vector|embedding) dimensions?\b|向量维度|维数", re.IGNORECASE)
# Standing alone: not the "122" of "Qwen3.5-122B", nor the "35" of "35%".
_FEW_DIGITS = re.compile(r"(?<![A-Za-z0-9_.])\d{2,5}(?![A-Za-z0-9_.%])")
# Asks a rate or a share ("关键词通过率是多少？", "采样率设成多少", "what percentage…"): a percentage,
# a fraction, a ratio or a share in words answers it, not a count ("20 题").
_ASKS_RATE = re.compile(
    r"[率比](?:是|为|设成|设为|有)?多少|占比|百分比|\bwhat (?:percentage|share|fraction|ratio)\b"
    r"|\b(?:pass|hit|error|failure|sampling|compression) (?:rate|ratio)\b",
    re.IGNORECASE,
)
_HOLDS_RATE = re.compile(
    # A run of digits is read from its first digit only, and whole (possessive).
    r"(?<!\d)\d++(?:\.\d++)?+\s*+%|百分之|(?<![\d.])[01]?\.\d++(?![\d.])|(?<!\d)\d++\s*+[:：]\s*+\d"
    r"|[一二三四五六七八九]成|一半|\bhalf\b",
    re.IGNORECASE,
)
# Any word that asks: a clause without one is not a part of the question to answer.
_ASKS_SOMETHING = re.compile(
    r"什么|哪|怎|如何|多少|多大|多长|多久|几|吗|是否|为何|为什么"
    r"|\b(?:what|which|who|whom|whose|how|when|where|why|does|do|is|are|can|list|name)\b",
    re.IGNORECASE,
)
# "4K", "10MB", "5ms", "122B": the reader's numbers stand alone, these carry a unit.
# A name and its release ("networkx 3.6", "Python 3.12"): a version, not the amount a question
# asks for ("分辨率参数设为多少？" is not answered by the table row naming networkx 3.6). A
# release below 1 ("weight 0.7", "BM25 0.3") reads as the value it more often is.
_NAMED_VERSION = re.compile(r"(?<![\w.])[A-Za-z][A-Za-z0-9_+-]{0,30}[ \t]{1,3}[vV]?[1-9]\d{0,3}\.\d{1,4}(?:\.\d{1,4})?(?![\w.%])")
_NUMBER_WITH_UNIT = re.compile(r"(?<![A-Za-z_\d.])\d+(?:\.\d+)?[A-Za-z]{1,3}\b")
# Amounts written in words the reader's number pattern leaves out ("百分之四十", "三倍", "一半", "twice").
_AMOUNT_IN_WORDS = re.compile(
    # A run of numerals is tried from its first character only and read whole (possessive): from
    # every character of a long run it would be read to the run's end again.
    r"百分之|(?<![一二三四五六七八九十百千万亿两])[一二三四五六七八九十百千万亿两]++(?<=[十百千万亿])[个条次种轮项]"
    r"|(?<![一二三四五六七八九十百千万亿两])[一二三四五六七八九十百千万亿两]++[倍成]|一半|半数|无限|不限"
    r"|\b(?:once|twice|double|half|unlimited|no limit)\b",
    re.IGNORECASE,
)
# Asks for a role or a team ("Who approved …?", "由哪个团队负责…？"): a design document names
# one by its role ("作者: System Architect"). "谁" alone is left out: over prose it asks for a
# person's name ("谁创立了…"), which no pattern tells from other words.
_ASKS_ROLE = re.compile(rf"哪个(?:团队|部门|小组)|哪位负责|{ASKS_WHO}", re.I)
# A name of letters then digits: a metric ("p99"), a model or part ("H100", "GPT4"), a standard
# ("GB50204"). Each is read whole, from its first letter only.
LETTERS_DIGITS_NAME = re.compile(r"(?<![\w.-])[A-Za-z]{1,6}+\d{2,}+[A-Za-z]?(?![\w.-])")
# Names an English question writes as names: an acronym ("PDF", "GPU"; a plural's "s" left
# out) or a word with a capital inside ("RabbitMQ", "LangGraph"). A capitalised word alone
# ("Title") may be the asker's emphasis, and a Chinese text would not hold it.
# In ASCII only: "\w" would take the Chinese words around a name ("Heuco在西班牙语中").
_ACRONYM = re.compile(r"(?<![A-Za-z0-9_.-])([A-Z]{2,6}+)s?(?![A-Za-z0-9_.-])")
_INNER_CAPITAL = re.compile(r"(?<![A-Za-z0-9_.-])[A-Za-z][a-z0-9]++[A-Z][A-Za-z0-9]*+(?![A-Za-z0-9_.-])")
# Inside a Chinese question, a word in Latin letters between Chinese words names something
# ("选择 Kafka 作为", "next-show 的"); a run of several is English ("请问 How does it work?"),
# whose names are read as an English question's.
_LATIN_RUN = re.compile(r"(?<![A-Za-z0-9_.-])[A-Za-z][A-Za-z0-9_.-]*+(?:[ \t]++[A-Za-z][A-Za-z0-9_.-]*+)*+")
MIN_NEW_TERMS = 3  # a sentence that says something adds this many terms to the question's


@dataclass(frozen=True)
class Quoted:
    """A quoted sentence and where it stands: its section's title and its document's name."""

    text: str
    section: str = ""
    doc: str = ""


def unanswered(question: str, quotes: Sequence[Quoted], tokenize: Tokenize, expand: Expand | None = None) -> str:
    """Why the quotes do not answer question; "" when they do."""
    if not quotes:
        return "nothing is quoted"
    if not subject_covered(question, quotes, tokenize, expand):
        return "the quotes do not speak of what the question asks about"
    substantive = [q for q in quotes if not is_fragment(q.text, question)]
    if not substantive:
        return "the quotes only introduce a list, name a section or draw a tree"
    return _missing_kind(question, substantive, tokenize)


def subject_covered(question: str, quotes: Sequence[Quoted], tokenize: Tokenize, expand: Expand | None = None) -> bool:
    """Whether the quotes (with their sections and documents) hold enough of the question's
    content terms (see the module's docstring); true when the quotes are in another language."""
    if text_language(" ".join(q.text for q in quotes)) != text_language(question):
        return True
    said = set(tokenize(" ".join(f"{q.doc} {q.section} {q.text}" for q in quotes)))
    variants = expand(question) if expand else [question]
    return any(_holds_subject(_content_terms(variant, tokenize), said) for variant in variants or [question])


def speaks_of(question: str, quote: Quoted, tokenize: Tokenize, expand: Expand | None = None) -> bool:
    """Whether the quote, with its section and document, holds one of the question's content
    terms (or of a variant's: a translation, the question's terms): the amount a question asks
    for is stated where its subject is named, not in a line that only holds a number."""
    where = f"{quote.doc} {quote.section} {quote.text}"
    said = set(tokenize(where))
    variants = expand(question) if expand else [question]
    if any(_content_terms(variant, tokenize) & said for variant in variants or [question]):
        return True
    # A Chinese word the tokenizer splits into characters ("子块" → 子, 块) is named as written.
    return any(word in where for word in _split_words(question, tokenize))


def _split_words(question: str, tokenize: Tokenize) -> list[str]:
    """The runs of single Chinese characters the tokenizer left, joined: "子块大概多大" → 子块, 多大."""
    words, run = [], ""
    for term in tokenize(_QUESTION_WORDS.sub(" ", question)):
        if len(term) == 1 and has_cjk(term):
            run += term
            continue
        if len(run) >= 2:
            words.append(run)
        run = ""
    if len(run) >= 2:
        words.append(run)
    return [word for word in words if word not in _ASKING_WORDS]


def is_fragment(text: str, question: str = "") -> bool:
    """A lead-in without its list, a bare heading, a line of a box drawing or a lone line of code,
    unless it is the line that declares the class or function whose name question asks."""
    stripped = text.strip().strip("*_` ")
    if question and declares_asked_name(question, stripped):
        return False
    return bool(
        not stripped
        or _BOX_DRAWING.search(stripped)
        or stripped.endswith((":", "：")) and not _CODE_HEADER.match(stripped)
        or _BARE_HEADING.match(stripped)
        or _CODE_LINE.match(stripped)
    )


def _content_terms(question: str, tokenize: Tokenize) -> set[str]:
    """The question's terms that name its subject: no question words, no lone Chinese character."""
    terms = tokenize(_QUESTION_WORDS.sub(" ", question))
    return {term for term in terms if term not in _ASKING_WORDS and not (len(term) == 1 and has_cjk(term))}


def _holds_subject(terms: set[str], said: set[str]) -> bool:
    needed = min(len(terms), max(MIN_SUBJECT_TERMS, math.ceil(MIN_SUBJECT_SHARE * len(terms))))
    return len(terms & said) >= needed


def asked_names(question: str) -> list[str]:
    """The names question asks about as written in Latin letters, each once: a source that holds
    none of one of them is about something else ("为什么选择 Kafka 作为消息队列？" over a KB that
    never mentions Kafka)."""
    names = LETTERS_DIGITS_NAME.findall(question) + _ACRONYM.findall(question) + _INNER_CAPITAL.findall(question)
    if has_cjk(question):
        names += [run for run in _LATIN_RUN.findall(question) if " " not in run and "\t" not in run]
    return list(dict.fromkeys(name.strip(".-") for name in names if len(name.strip(".-")) >= 2))


def lacks_fact(question: str, quotes: Sequence[Quoted]) -> str:
    """Why the quotes cannot answer a question that asks for a count, an amount, a time, a version
    or a setting's name and holds none of it; "" when they hold one or the question asks no such
    fact. Stricter than "does not speak of it": the reader says "not found" on this alone."""
    if not quotes:
        return ""
    # Every part of a compound question must ask such a fact: quotes answering its other part
    # ("Which store is used, and how large is its pool?") are a partial answer, not none.
    # A clause with no asking word says where the question asks ("Agentic RAG 接入 Langfuse 时，
    # 采样率设成多少？"), not a part that quotes could answer instead.
    parts = [part for part in _parts(question) if _ASKS_SOMETHING.search(part)]
    whys = [_lacks_fact(part, quotes) for part in parts or [question]]
    return whys[0] if all(whys) else ""


def _lacks_fact(question: str, quotes: Sequence[Quoted]) -> str:
    new_text = " ".join(_new_text(q.text, question) for q in quotes)
    if _ASKS_VERSION.search(question) and not _HOLDS_VERSION.search(new_text):
        return "the question asks for a version and the quotes hold none"
    if _ASKS_AMOUNT.search(question) and not _holds_number(_NAMED_VERSION.sub(" ", new_text)):
        return "the question asks for a number and the quotes hold none"
    types = expected_answer_types(question)
    if "identifier" in types and not _FACT_PATTERNS["identifier"].search(new_text):
        return "the question asks for a setting's name and the quotes hold none"
    if _lacks_role(question, new_text):
        return "the question asks who and the quotes name no one"
    if _ASKS_PORT.search(question) and not _FEW_DIGITS.search(new_text):
        return "the question asks for a port and the quotes hold none"
    if _ASKS_DIMENSION.search(question) and not _FEW_DIGITS.search(new_text):
        return "the question asks for a vector's dimension and the quotes hold none"
    if _ASKS_RATE.search(question) and not _HOLDS_RATE.search(new_text):
        return "the question asks for a rate and the quotes hold none"
    return ""


def _lacks_role(question: str, new_text: str) -> bool:
    """Whether question asks for a role or a team (_ASKS_ROLE) and new_text names none."""
    return bool(_ASKS_ROLE.search(question)) and not _FACT_PATTERNS["person"].search(new_text)


def _holds_number(text: str) -> bool:
    """A number, with or without its unit, or an amount in words."""
    return bool(_FACT_PATTERNS["number"].search(text) or _NUMBER_WITH_UNIT.search(text) or _AMOUNT_IN_WORDS.search(text))


def _missing_kind(question: str, quotes: Sequence[Quoted], tokenize: Tokenize) -> str:
    """Why the quotes lack the kind of fact question asks for; "" when they hold it."""
    # "哪几种策略" asks which ones, as 哪些 does; the reader reads its 几 as a count too, which
    # only weighs units, but no number is missing from a list of them.
    types = expected_answer_types(question.replace("哪几", "哪些"))
    new_text = " ".join(_new_text(q.text, question) for q in quotes)
    if _ASKS_VERSION.search(question) and not _HOLDS_VERSION.search(new_text):
        return "the question asks for a version and the quotes hold none"
    if _lacks_role(question, new_text):
        return "the question asks who and the quotes name no one"
    if "number" in types and not _holds_number(new_text):  # "5s 超时" holds one, with its unit
        return "the question asks for a number and the quotes hold none"
    for kind, missing in (("time", "a time"), ("identifier", "a setting's name")):
        # A time may be written without its unit ("timeout=30"), and "how long" may ask a length.
        accepted = (_FACT_PATTERNS[kind], _FACT_PATTERNS["number"]) if kind == "time" else (_FACT_PATTERNS[kind],)
        if kind in types and not any(pattern.search(new_text) for pattern in accepted):
            return f"the question asks for {missing} and the quotes hold none"
    if "list" in types and len(quotes) < 2 and not _NAMES_SEVERAL.search(new_text):
        return "the question asks for several items and the quotes name one"
    if _ASKS_HOW.search(question) and not any(_explains(q.text, question, tokenize) for q in quotes):
        return "the question asks how and no quote says how"
    return ""


def _explains(text: str, question: str, tokenize: Tokenize) -> bool:
    """Whether a sentence says something of a mechanism: new terms, and a step, condition or means."""
    new_terms = set(tokenize(text)) - set(tokenize(question))
    return len(new_terms) >= MIN_NEW_TERMS and bool(_MECHANISM.search(text))
