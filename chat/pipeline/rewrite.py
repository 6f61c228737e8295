"""S2 rewrite: make the message a standalone query and split compound questions.

Rules, always available: strip fillers ("请问", "can you tell me"), resolve a pronoun or
an ellipsis ("那 X 呢?", "what about X?") with the topic of the user's recent turns, and
split "A 和/与/vs B" into one query each. With a language model configured, the model
rewrites instead (cached by message + history hash for an hour); rules are the fallback.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentic_rag.llm import CompletionOptions, LLMError, Message

from .collaborators import Cache, model_json
from .state import Turn, user_turns

logger = logging.getLogger(__name__)

MAX_QUERIES = 3


@dataclass(frozen=True)
class Rewrite:
    query: str  # the message as a standalone question
    queries: tuple[str, ...]  # what to search for: the query first, then its parts
    method: str  # "rules" | "llm" | "cache" | "off" | "fallback"
    changes: tuple[str, ...] = ()  # which rules fired, for the trace

    def as_dict(self) -> dict[str, Any]:
        return {"query": self.query, "queries": list(self.queries), "method": self.method, "changes": list(self.changes)}


def unchanged(message: str, method: str = "off") -> Rewrite:
    return Rewrite(message, (message,), method)


# --- fillers -----------------------------------------------------------------------------

_FILLER_PREFIXES = re.compile(
    r"^(?:(?:你好|您好|嗨|hi|hello|hey|um+|uh+|ok(?:ay)?|so|well)[\s,，!！.。~]+"
    r"|请问一下|请问|麻烦问一下|麻烦你|麻烦|我想问一下|我想问|我想知道|想问一下|想知道|能不能告诉我|能否告诉我|"
    r"可以告诉我|你能告诉我|告诉我|帮我看看|请你|"
    r"(?:can|could|would|will) you (?:please )?(?:tell me|let me know)\s*|"
    r"(?:can|could|would|will) you (?:please )?(?=explain|describe|summari[sz]e|list|show)|"
    r"i (?:want|would like|'d like) to know\s*|i(?: was)? wonder(?:ing)?\s*|please\s+)+",
    re.IGNORECASE,
)
# A run of spaces (or of 。，) is read from its first character only: "(?<!…)|(?!…)" refuses
# to start inside one, where a try from each character would read to the run's end again.
# The run's first character starts the same match, so what matches is unchanged.
_FILLER_ANYWHERE = re.compile(r"一下|\bplease\b,?\s*|,?(?:(?<!\s)|(?!\s))\s*+\bthanks?\b(?: you)?", re.IGNORECASE)
_FILLER_SUFFIX = re.compile(r"(?:(?<![\s,，])|(?![\s,，]))[\s,，]*+(?:啊|呀|吧|哈|嘛|呗)(?=[?？!！。.]*$)")


def strip_fillers(message: str) -> str:
    text = _FILLER_PREFIXES.sub("", message.strip())
    text = _FILLER_ANYWHERE.sub("", text)
    text = _FILLER_SUFFIX.sub("", text)
    text = " ".join(text.split())
    return text[:1].upper() + text[1:] if text[:1].islower() and message[:1].isupper() else text


# --- topics, pronouns and ellipsis ---------------------------------------------------------

# Verbs that end the subject of "how does X …"; words that are often nouns too ("search") are left out.
_VERBS = (
    "work|works|run|runs|rank|ranks|handle|handles|use|uses|store|stores|scale|scales|compare|differ|fail|fails|"
    "mean|fuse|fuses|combine|combines|choose|chooses|pick|picks|select|selects|embed|embeds|detect|detects|"
    "compute|computes|retry|retries|decide|decides|cite|cites|verify|verifies|build|builds|create|creates|"
    "load|loads|save|saves|parse|parses|get|gets|make|makes|do|support|supports|affect|affects|work"
)
_TOPIC_PATTERNS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"^(?:what|who)\s+(?:is|are|was|were)\s+(?:an?\s+|the\s+)?(?P<t>.+?)$",
        r"^(?:tell me about|explain|describe|define|introduce)\s+(?:an?\s+|the\s+)?(?P<t>.+?)$",
        r"^(?:how|why|when|where)\s+(?:does|do|did|can|should|would|is|are)\s+(?:an?\s+|the\s+)?"
        rf"(?P<t>[\w.+#-]+(?:\s+(?!(?:{_VERBS})\b)[\w.+#-]+){{0,2}}?)\s+(?:{_VERBS})\b.*$",
        r"^什么是(?P<t>.+)$",
        r"^(?P<t>.+?)(?:是什么|是啥|指什么|是指什么|的定义|什么意思)",
        r"^(?:介绍|解释|说明|讲讲|讲解|说说)(?P<t>.+)$",
        r"^(?:为什么|如何|怎么|怎样)?(?P<t>.{2,20}?)(?:怎么|如何|怎样|为什么|有什么|有哪些|有没有|是否|能否|能不能|可以|支持|需要|的作用|的原理|的优点|的缺点|的用途)",
        r"^(?P<t>[^的它这那，,。？?\s][^的，,。？?]{1,11})的",
    )
)
_TRAILING_PUNCT = re.compile(r"(?<![\s?？!！.。])[\s?？!！.。]+$")  # from a run's start only (above)
_PRONOUN_EN = re.compile(r"\b(?:it|they|them)\b(?!')", re.IGNORECASE)
_POSSESSIVE_EN = re.compile(r"\b(?:its|their)\b", re.IGNORECASE)
_DEMONSTRATIVE_EN = re.compile(
    r"\b(?:this|that|these|those)\b(?=\s*(?:[?？]|$|\b(?:is|are|was|were|does|do|did|work|works|mean|means|support|supports|cost|costs)\b))",
    re.IGNORECASE,
)
_PRONOUN_ZH = re.compile(r"它们|它|(?:^|(?<=[，,。]))(?:这个|那个|这|那)(?=是|有|怎么|如何|能|可以|会|的|呢|吗|要|需要|支持|用)")
_ELLIPSIS = (
    re.compile(r"^(?:那么?|还有|另外)?(?P<x>[^，,。？?\s][^，,。？?]{0,19}?)(?:呢|怎么样|又如何|又是怎样)[？?]?$"),
    re.compile(r"^(?:and\s+)?(?:what|how)\s+about\s+(?:the\s+)?(?P<x>.+?)\??$", re.IGNORECASE),
)


def topic_of(question: str) -> str:
    """The subject a question asks about ("" when no pattern finds one)."""
    text = _TRAILING_PUNCT.sub("", strip_fillers(question))
    for pattern in _TOPIC_PATTERNS:
        match = pattern.match(text)
        if match and len(match.group("t").strip()) >= 2:
            return match.group("t").strip()
    return ""


def resolve_references(text: str, history: Sequence[Turn], turns: int = 3) -> tuple[str, str]:
    """Resolve an ellipsis or pronouns with the recent user turns; return (text, rule or "")."""
    previous = [turn.standalone for turn in user_turns(tuple(history), turns)]
    if not previous:
        return text, ""
    last = previous[-1]
    topic = next((t for t in (topic_of(q) for q in reversed(previous)) if t), "")
    for pattern in _ELLIPSIS:
        match = pattern.match(text)
        if match:
            subject = _replace_pronouns(match.group("x").strip(), topic) if topic else match.group("x").strip()
            last_topic = topic_of(last)
            if last_topic and last_topic in last:
                return _TRAILING_PUNCT.sub("", last.replace(last_topic, subject, 1)) + _end_mark(text), "ellipsis"
            return f"{subject} {_TRAILING_PUNCT.sub('', last)}", "ellipsis"
    if not topic:
        return text, ""
    resolved = _replace_pronouns(text, topic)
    return resolved, ("coreference" if resolved != text else "")


def _replace_pronouns(text: str, topic: str) -> str:
    text = _PRONOUN_ZH.sub(topic, text)
    text = _PRONOUN_EN.sub(topic, text)
    text = _POSSESSIVE_EN.sub(f"{topic}'s", text)
    return _DEMONSTRATIVE_EN.sub(topic, text)


def _end_mark(text: str) -> str:
    return "？" if re.search(r"[\u3400-\u9fff]", text) else "?"


# --- compound questions --------------------------------------------------------------------

_CLAUSE_SPLIT = re.compile(
    # "(?:\s*[,;])?\s+", not "\s*[,;]?\s+" (two runs of spaces side by side), and not from
    # inside a run of spaces: either would read a long run again and again.
    r"(?:(?<!\s)|(?!\s))(?:\s*+[,;])?\s++(?:and|vs\.?|versus)\s++"
    r"(?=(?:what|how|why|when|where|which|who|is|are|does|do|can|should)\b)",
    re.IGNORECASE,
)
_CONJUNCTION_EN = re.compile(r"\s+(?:and|vs\.?|versus)\s+", re.IGNORECASE)
_NOT_IN_NOUN = frozenset(
    {"between", "of", "the", "a", "an", "is", "are", "was", "were", "do", "does", "did", "to", "in", "on", "for",
     "with", "about", "compare"}
)
_NOUN_SPLIT_ZH = re.compile(
    r"^(?P<pre>比较|对比|介绍|解释|说明|请比较)?(?P<a>[A-Za-z0-9\u4e00-\u9fff.+#-]{2,12}?)(?:和|与|跟|以及|vs|VS|对比)"
    r"(?P<b>(?![的有是])[A-Za-z0-9\u4e00-\u9fff.+#-]{2,12}?)"
    r"(?P<post>(?:的|有|是|分别|各|怎么|如何|在|之间|区别|相比|哪个|谁|[？?]).*|)$"
)


# "the difference between A and B" asks about A and about B: the parts drop the comparison.
_COMPARISON_PRE = re.compile(
    r"(?:\bthe\s+)?\b(?:differences?|comparison|compare|contrast)\s+(?:between\s+|of\s+)?$|^(?:比较|对比|请比较)$",
    re.IGNORECASE,
)
_COMPARISON_POST = re.compile(r"^(?:有什么|有啥|有何|的)?(?:区别|不同|差异|差别|异同|优劣)|^之间|^哪个")


def split_compound(text: str) -> list[str]:
    """The parts of a compound question (empty when it is not one)."""
    clauses = [c.strip() for c in _CLAUSE_SPLIT.split(text) if c.strip()]
    if len(clauses) > 1:
        return clauses
    match = _NOUN_SPLIT_ZH.match(text)
    if match:
        pre = _COMPARISON_PRE.sub("", match.group("pre") or "")
        post = "" if _COMPARISON_POST.match(match.group("post") or "") else match.group("post")
        return [f"{pre}{match.group(side)}{post}".strip() for side in ("a", "b")]
    return _split_nouns_en(text)


def _split_nouns_en(text: str) -> list[str]:
    """ "… A and B?" with B at the end: A has as many words as B (parallel nouns)."""
    parts = _CONJUNCTION_EN.split(text)
    if len(parts) != 2:
        return []
    head, tail = parts
    mark = "?" if tail.rstrip().endswith("?") else ""
    b_words = tail.rstrip(" ?").split()
    head_words = head.split()
    if not 1 <= len(b_words) <= 3 or not head_words:
        return []
    a_words = head_words[-min(len(b_words), len(head_words)) :]
    if any(word.lower() in _NOT_IN_NOUN for word in a_words):
        a_words = [w for w in a_words if w.lower() not in _NOT_IN_NOUN][-1:]
    if not a_words:
        return []
    pre = _COMPARISON_PRE.sub("", " ".join(head_words[: len(head_words) - len(a_words)]) + " ").lstrip()
    return [f"{pre}{' '.join(words)}{mark}".strip() for words in (a_words, b_words)]


# --- the stage ---------------------------------------------------------------------------


def rewrite_rules(message: str, history: Sequence[Turn] = (), *, turns: int = 3) -> Rewrite:
    """Rewrite by rules alone."""
    changes = []
    text = strip_fillers(message) or message.strip()
    if text != message.strip():
        changes.append("fillers")
    text, rule = resolve_references(text, history, turns)
    if rule:
        changes.append(rule)
    parts = split_compound(text)
    if parts:
        changes.append("split")
    queries = _unique([text, *parts])[:MAX_QUERIES]
    return Rewrite(text, tuple(queries), "rules", tuple(changes))


def rewrite_query(
    message: str,
    history: Sequence[Turn],
    *,
    llm: Any,
    cache: Cache,
    turns: int = 3,
    ttl: float = 3600,
    memory: str = "",
) -> Rewrite:
    """Rewrite with the LLM when one is configured (cached), else (or when it fails) by rules.

    `memory` (the summary of older turns, recalled exchanges) is context for the LLM only.
    """
    if not getattr(llm, "has_model", False):
        return rewrite_rules(message, history, turns=turns)
    recent = tuple(history[-2 * turns :]) if turns > 0 else ()
    key = _cache_key(message, recent, memory)
    cached = cache.get(key)
    if cached is not None:
        return Rewrite(cached["query"], tuple(cached["queries"]), "cache")
    try:
        rewrite = _llm_rewrite(message, recent, llm, memory)
    except (LLMError, ValueError, TypeError, KeyError) as error:
        logger.warning("query rewrite by LLM failed, using the rules: %s", error)
        ruled = rewrite_rules(message, history, turns=turns)
        return Rewrite(ruled.query, ruled.queries, "fallback", (*ruled.changes, f"llm failed: {error}"))
    cache.set(key, {"query": rewrite.query, "queries": list(rewrite.queries)}, ttl)
    return rewrite


def _llm_rewrite(message: str, recent: Sequence[Turn], llm: Any, memory: str = "") -> Rewrite:
    system = (
        "Rewrite the user's last message as a standalone, formal search query in the same language: "
        "replace pronouns and ellipses with what they refer to in the conversation, drop filler words. "
        "If it asks several things, also list each as its own query in sub_queries (else an empty list)."
    )
    context = "\n".join(f"{turn.role}: {turn.content[:500]}" for turn in recent)
    earlier = f"Earlier context:\n{memory}\n\n" if memory else ""
    user = f"{earlier}Conversation so far:\n{context or '(none)'}\n\nLast message: {message}"
    reply = model_json(
        llm,
        [Message("system", system), Message("user", user)],
        CompletionOptions(temperature=0.0, max_tokens=300),
        '{"query": "the standalone query", "sub_queries": ["...", "..."]}',
        field="query",
    )
    query = str(reply.get("query") or "").strip()
    if not query:
        raise ValueError(f"no query in {reply!r:.200}")
    parts = [str(part).strip() for part in reply.get("sub_queries") or [] if str(part).strip()]
    return Rewrite(query, tuple(_unique([query, *parts])[:MAX_QUERIES]), "llm")


def _unique(items: list[str]) -> list[str]:
    seen: set[str] = set()
    return [item for item in items if item and not (item.lower() in seen or seen.add(item.lower()))]


def _cache_key(message: str, recent: Sequence[Turn], memory: str = "") -> str:
    lines = [f"{t.role}:{t.content}" for t in recent] + ([f"memory:{memory}"] if memory else [])
    history = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return "chat:rewrite:" + hashlib.sha256(f"{message.strip().lower()}::{history}".encode()).hexdigest()
