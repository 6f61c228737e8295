"""S3 intent: a rule fast path, then LLM classification (cached) when the rules say "default".

Rules: a greeting, help request, thanks or "who are you" on its own, or after a greeting,
is SYSTEM; a tool keyword is that tool (only for tools the channel has, and for tools with
data of their own only when the message asks for that data, not about the documents); a
message with nothing to search for and no history to resolve it is a vague KB question;
anything else is the default, KB with confidence 0.7.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentic_rag.llm import CompletionOptions, LLMError, Message
from chat.tools import calculator, world_clock
from knowledge.analysis import analyze

from .collaborators import Cache, model_json
from .state import Turn

logger = logging.getLogger(__name__)

DEFAULT_KB_CONFIDENCE = 0.7
SYSTEM_CONFIDENCE = 0.95
TOOL_CONFIDENCE = 0.85
VAGUE_CONFIDENCE = 0.4
KINDS = ("KB", "SYSTEM", "TOOL")


@dataclass(frozen=True)
class Intent:
    name: str  # "KB" | "SYSTEM" | "TOOL"
    confidence: float
    tool: str = ""  # the tool, for TOOL
    topic: str = ""  # greeting | help | about | thanks | ack, for SYSTEM

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "confidence": round(self.confidence, 3), "tool": self.tool, "topic": self.topic}


@dataclass(frozen=True)
class IntentResult:
    intents: tuple[Intent, ...]  # best first
    method: str  # "rules" | "llm" | "cache" | "fallback"
    detail: str = ""

    @property
    def top(self) -> Intent:
        return self.intents[0]

    @property
    def is_all_system(self) -> bool:
        return bool(self.intents) and all(intent.name == "SYSTEM" for intent in self.intents)

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(intent.tool for intent in self.intents if intent.name == "TOOL")

    @property
    def wants_kb(self) -> bool:
        return any(intent.name == "KB" for intent in self.intents)

    def as_event(self) -> dict[str, Any]:
        return {"intents": [intent.as_dict() for intent in self.intents], "method": self.method}


DEFAULT_INTENT = IntentResult((Intent("KB", DEFAULT_KB_CONFIDENCE),), "fallback")

_SYSTEM_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (topic, re.compile(rf"^(?:{pattern})$", re.IGNORECASE))
    for topic, pattern in (
        ("greeting", r"你好|您好|嗨|哈喽|早上好|下午好|晚上好|你好吗|在吗|在不在|hi|hello|hey|hiya|"
                     r"good (?:morning|afternoon|evening)|hi there|hello there|(?:(?:hi|hello|hey)[\s,]*)?how are you(?: doing)?|"
                     r"what'?s up|how'?s it going|nice to meet you|很高兴认识你"),
        ("help", r"帮助|求助|help|帮帮我|怎么用|如何使用|使用说明|你能做什么|你可以做什么|你会什么|你能帮我(?:什么)?吗?|"
                 r"能帮我吗|what can you do|how do i use (?:this|you)|help me|(?:can|could) you help(?: me)?|"
                 r"what can you help(?: me)? with"),
        ("about", r"你是谁|你叫什么(?:名字)?|你是什么|介绍一下你自己|谁开发了你|who are you(?: exactly)?|what are you|"
                  r"what is this|about|about you|who (?:made|built) you|what'?s your name|what is your name"),
        ("thanks", r"谢谢|谢谢你|多谢|感谢|thanks|thank you|thx|thanks a lot|thank you very much"),
        ("ack", r"好的|好|嗯|嗯嗯|明白了|知道了|了解|ok|okay|got it|great|cool|nice|i see"),
    )
)
_GREETING_PREFIX = re.compile(
    r"^(?:你好|您好|嗨|哈喽|(?:hi|hello|hey)(?: there)?|good (?:morning|afternoon|evening))[\s,，!！.。~:：\-—]+",
    re.IGNORECASE,
)
# Courtesy before a system clause ("请问你是谁", "please help me") changes nothing it asks.
_POLITE_PREFIX = re.compile(r"^(?:请问|请|麻烦|please|so|um+|well)[\s,，]*", re.IGNORECASE)
# Only a run's first character may start it: else each character of a run of spaces or
# commas inside a message would read to the run's end, quadratic in the run.
_TRAILING = re.compile(r"(?<![\s,，.。!！?？~～啊呀呢吧哈嘛:：)）(（])[\s,，.。!！?？~～啊呀呢吧哈嘛:：)）(（]+$")

# Tool keywords; only tools the channel offers are matched. Whole expressions
# reach the calculator through its own extractor; the operators here find one inside words
# ("100 * 3 美元等于多少人民币"), without "-" and "/", which join numbers in standards, versions
# and dates ("GB 50204-2015", "2024/01/15") far more often than they subtract or divide.
TOOL_KEYWORDS: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.IGNORECASE)
    for name, pattern in {
        "weather": r"天气|气温|\bweather\b|\btemperature\b|\bforecast\b|下雨|下雪",
        "sales": r"销售|营业额|\bsales\b|\brevenue\b|\bQ[1-4]\b",
        "ticket": r"工单|\btickets?\b|\bTKT-\d+",
        "calculator": (
            # A number from its first digit, taken whole: from every digit of a long run it
            # would read to the run's end again.
            r"计算|算一下|等于多少|\bcalculate\b|\bcompute\b|(?<!\d)\d++(?:\.\d++)?+\s*+[+*×÷^%]\s*+\d+|\d\s*%\s*of\s*\d|"
            r"\d\s*的\s*\d+(?:\.\d+)?\s*(?:%|次方)|\d\s*(?:加上?|减去?|乘以?|除以)\s*\d|"
            r"\d\s*(?:times|plus|minus|divided by|multiplied by|to the power of)\s*\d"
        ),
        "datetime": (
            r"几点|什么时间|今天日期|今天几号|what time|what'?s the (?:current |local )?time\b|current time|"
            r"local time|today'?s date|what day is"
        ),
        "currency": r"汇率|兑换|美元|人民币|exchange rate|\b(?:usd|eur|cny|rmb|jpy|gbp)\b",
        "system_metrics": (
            r"\bQPS\b|延迟|\bCPU\b|内存|负载|请求(?:数|量)|吞吐|\blatency\b|\bmemory\b|\bload\b|\bthroughput\b|"
            r"\brequests?\b"
        ),
        "knowledge_lookup": r"查询|搜索|查找",
        "web_search": r"(?:联网|上网|网上)(?:搜|查)|\bsearch\s+(?:on\s+)?the\s+(?:web|internet)\b|\bweb\s+search\b",
    }.items()
}

# Tools whose keywords are also words the documents use ("the global rate limit in QPS", "the
# temperature for creative tasks", "what time does the job run"): a message names them only when
# it asks for live data, now or about this deployment ("what is the current QPS?", "明天北京气温");
# otherwise it is a question for the knowledge base, and the tool must not answer it with this
# server's numbers.
LIVE_ONLY: dict[str, re.Pattern[str]] = {
    "system_metrics": re.compile(
        r"当前|现在|目前|实时|此刻|这台|本机|系统(?:的)?(?:负载|延迟|内存)|\b(?:current(?:ly)?|now|right now|live|"
        r"at the moment|this (?:server|deployment|machine|instance|process))\b",
        re.IGNORECASE,
    ),
    "datetime": re.compile(
        r"现在|当前|此刻|目前|几点了|今天|\b(?:now|right now|current(?:ly)?|today|tonight|local time|time in)\b|"
        r"what time is it|what day is (?:it|today)",
        re.IGNORECASE,
    ),
    "weather": re.compile(
        # A run of Chinese is tried from its first character only (the rest match no more).
        r"天气|今天|明天|后天|现在|当前|本周|下雨|下雪|(?<![\u4e00-\u9fff])[\u4e00-\u9fff]{2,}(?:市|的)?(?:气温|温度)|"
        r"\b(?:weather|forecast|today|"
        r"tomorrow|tonight|now|current(?:ly)?|outside|this week)\b|(?-i:\bin [A-Z][a-z]+)",
        re.IGNORECASE,
    ),
}

# Tools answering with data of their own (live metrics, the clock, the rate table, demo fixtures)
# must not answer a question about what the documents say, a configured value or the tool itself:
# "what is the current QPS limit?", "How is the weather tool implemented?", "the exchange rate
# source of the currency tool" are questions for the knowledge base, even with a live cue.
DATA_TOOLS = frozenset({"system_metrics", "datetime", "weather", "currency", "sales", "ticket", "web_search"})
_ABOUT_THE_DOCS = re.compile(
    r"\b(?:limit(?:s|er|ers|ing)?|quotas?|targets?|goals?|budgets?|promised?|promises|guarantee[sd]?|aims?|SLOs?|SLAs?|"
    r"thresholds?|defaults?|config(?:ured|uration)?|settings?|documented|docs|documentation|designed|"
    r"implement(?:ed|ation)?|tool|provider|source)\b|"
    r"限流|限制|上限|配额|目标|预算|承诺|阈值|默认|配置|设置|文档|设计|实现|工具|数据源",
    re.IGNORECASE,
)
# ... unless the message asks to use the tool ("use the weather tool for Paris", "用天气工具查上海").
_USES_TOOL = re.compile(
    r"\b(?:use|using|call|run|ask)\s+(?:the\s+)?[\w-]+\s+tool\b|(?:用|使用|调用|通过)[^，。？?]{0,8}工具",
    re.IGNORECASE,
)

# Keywords that only say "work it out" or "look it up". When a message also names a more
# specific tool ("100 美元等于多少人民币", "查询北京天气"), that tool is the one meant, and
# offering both would stop the answer with a needless "which did you mean?".
GENERIC_KEYWORDS: dict[str, re.Pattern[str]] = {
    "calculator": re.compile(r"计算|算一下|等于多少|\bcalculate\b|\bcompute\b", re.IGNORECASE),
    "knowledge_lookup": re.compile(r"查询|搜索|查找"),
}

# Words that carry no subject on their own: a message of only these is vague.
_VAGUE_WORDS = re.compile(
    r"它们|它|他们|他|她|这个|那个|这些|那些|这样|那样|这里|那里|怎么样|怎么办|怎样|如何|为什么|什么|"
    r"还有|然后|继续|那么|那|这|呢|吗|啊|吧|呀|的|是|了|和|又|再|说|讲|一下|详细|更多|请问|请|"
    r"\b(?:it|its|this|that|these|those|they|them|what|about|how|why|and|so|then|more|tell|me|"
    r"please|again|continue|ok|okay|yes|no|is|are|the|a|an|of|go|on|explain|details?|elaborate)\b",
    re.IGNORECASE,
)
_DIGIT = re.compile(r"\d")
_CONTENT = re.compile(r"[\u3400-\u9fff]|[A-Za-z0-9]{2,}|\d")


def rule_intents(message: str, history: Sequence[Turn] = (), tools: frozenset[str] = frozenset()) -> IntentResult:
    """Classify by rules alone; `detail` is "default" when no rule matched."""
    text = _TRAILING.sub("", message.strip())
    topic = _system_topic(text)
    if topic:
        return _system(topic, f"system: {topic}")
    greeted = _GREETING_PREFIX.sub("", text)
    if greeted != text:  # "hello, who are you?": the clause after the greeting decides
        greeting = _greeting_clause(_TRAILING.sub("", greeted), history)
        if greeting:
            return _system(greeting, f"system: greeting, {greeting}")
    text = greeted
    # The calculator reads the message as typed: trimming ")" would break "log(100)".
    expression = _GREETING_PREFIX.sub("", message.strip())
    matched = _specific([name for name in sorted(tools) if _names_tool(name, text, expression)], text)
    if matched:
        intents = tuple(Intent("TOOL", TOOL_CONFIDENCE, tool=name) for name in matched)
        return IntentResult(intents, "rules", "tool keywords: " + ", ".join(matched))
    if is_vague(text) and not history:
        return IntentResult((Intent("KB", VAGUE_CONFIDENCE),), "rules", "vague: nothing to search for")
    return IntentResult((Intent("KB", DEFAULT_KB_CONFIDENCE),), "rules", "default")


def _system(topic: str, detail: str) -> IntentResult:
    return IntentResult((Intent("SYSTEM", SYSTEM_CONFIDENCE, topic=topic),), "rules", detail)


def _system_topic(text: str) -> str:
    """The SYSTEM topic text is, as written or less a courtesy ("请问你是谁"); "" for none."""
    for candidate in dict.fromkeys((text, _POLITE_PREFIX.sub("", text))):
        for topic, pattern in _SYSTEM_RULES:
            if pattern.match(candidate):
                return topic
    return ""


def _greeting_clause(clause: str, history: Sequence[Turn]) -> str:
    """The SYSTEM topic of what follows a greeting, or "" when it is a question to answer.

    A clause the rules know decides ("hello, who are you?" is about the assistant). A clause
    with no word the search could use ("hey there - what can you do today?") would only end in
    "no words to search for", so, with no history it might refer to, the message is a greeting.
    """
    topic = _system_topic(clause)
    if topic:
        return topic
    return "greeting" if not history and not analyze(clause) else ""


def _names_tool(name: str, text: str, expression: str) -> bool:
    """Whether text asks for the tool: its keyword (with live data where LIVE_ONLY says so, and not
    about the documents for DATA_TOOLS), or, for the calculator, an expression it can evaluate
    ("sqrt(144) + 2**3", "log(100)") or a keyword with numbers to work on."""
    if name == "calculator" and calculator.extract(expression) is not None:
        return True
    if name not in TOOL_KEYWORDS or not TOOL_KEYWORDS[name].search(text):
        return False
    if name == "calculator":
        return _has_operands(text)
    if name in LIVE_ONLY and not (LIVE_ONLY[name].search(text) or _names_a_place(name, text)):
        return False
    return name not in DATA_TOOLS or not is_about_the_docs(text)


def _has_operands(text: str) -> bool:
    """Whether a calculator keyword has something to compute: a number, or nothing but the
    keyword ("等于多少" after "3 加 4"); "RRF 分数怎么计算" asks how the documents compute it."""
    return _DIGIT.search(text) is not None or is_vague(GENERIC_KEYWORDS["calculator"].sub(" ", text))


def _names_a_place(name: str, text: str) -> bool:
    """Whether a clock or weather question names a place ("北京几点", "temperature in paris"):
    that asks for the time or the weather there, now."""
    return name in {"datetime", "weather"} and bool(world_clock.zones_in(text))


def is_about_the_docs(text: str) -> bool:
    """Whether text asks what the documents say (a limit, a default, a tool's design), not for live data."""
    return _ABOUT_THE_DOCS.search(text) is not None and _USES_TOOL.search(text) is None


def _specific(matched: list[str], text: str) -> list[str]:
    """The matched tools, less those matched only by generic words when another tool matched too."""
    if len(matched) < 2:
        return matched
    specific = [
        name for name in matched
        if name not in GENERIC_KEYWORDS or TOOL_KEYWORDS[name].search(GENERIC_KEYWORDS[name].sub(" ", text))
    ]
    return specific or matched


def is_vague(text: str) -> bool:
    """Whether text names nothing to search for once pronouns and fillers are removed."""
    return _CONTENT.search(_VAGUE_WORDS.sub(" ", text)) is None


def classify_intent(
    message: str,
    history: Sequence[Turn],
    *,
    llm: Any,
    cache: Cache,
    tools: frozenset[str] = frozenset(),
    ttl: float = 3600,
) -> IntentResult:
    """Rules first; an LLM (when one is configured) decides what the rules leave at default."""
    ruled = rule_intents(message, history, tools)
    if ruled.detail != "default" or not getattr(llm, "has_model", False):
        return ruled
    key = _cache_key(message, history, tools)
    cached = cache.get(key)
    if cached is not None:
        return IntentResult(tuple(Intent(**item) for item in cached), "cache")
    try:
        intents = _llm_intents(message, history, llm, tools)
    except (LLMError, ValueError, TypeError, KeyError) as error:
        logger.warning("intent classification by LLM failed, keeping the rules: %s", error)
        return IntentResult(ruled.intents, "rules", f"llm failed: {error}")
    cache.set(key, [_plain(intent) for intent in intents], ttl)
    return IntentResult(intents, "llm")


def _llm_intents(message: str, history: Sequence[Turn], llm: Any, tools: frozenset[str]) -> tuple[Intent, ...]:
    tool_line = ", ".join(sorted(tools)) or "none"
    system = (
        "Classify the user's message. Kinds: KB (a question the knowledge base's documents may answer), "
        "SYSTEM (greeting, thanks, help or a question about the assistant itself), "
        f"TOOL (needs one of these tools: {tool_line}). A tool only for its own data (live metrics now, the "
        "current time, a conversion, a calculation): a question about what the documents say, a configured "
        "value or a tool itself is KB, even with a tool's word (\"the documented rate limit in QPS\"). "
        "Give every plausible kind a confidence from 0 to 1."
    )
    context = _context(history)
    user = f"Conversation so far:\n{context or '(none)'}\n\nMessage: {message}"
    reply = model_json(
        llm,
        [Message("system", system), Message("user", user)],
        CompletionOptions(temperature=0.0, max_tokens=200),
        '{"intents": [{"name": "KB" | "SYSTEM" | "TOOL", "tool": "tool name or empty", "confidence": 0.0-1.0}]}',
        field="intents",
    )
    return parse_llm_intents(reply, tools)


def parse_llm_intents(reply: dict, tools: frozenset[str]) -> tuple[Intent, ...]:
    """Keep the well-formed intents of an LLM reply, best first; raise ValueError if none is."""
    intents = []
    for item in reply.get("intents") or []:
        if not isinstance(item, dict):
            continue
        name = str(item.get("name", "")).upper()
        tool = str(item.get("tool") or "")
        if name not in KINDS or (name == "TOOL" and tool not in tools):
            continue
        confidence = min(max(float(item.get("confidence", 0.0)), 0.0), 1.0)
        intents.append(Intent(name, confidence, tool=tool if name == "TOOL" else ""))
    if not intents:
        raise ValueError(f"no usable intent in {reply!r:.200}")
    return tuple(sorted(intents, key=lambda intent: -intent.confidence))


def _plain(intent: Intent) -> dict[str, Any]:
    return {"name": intent.name, "confidence": intent.confidence, "tool": intent.tool, "topic": intent.topic}


def _context(history: Sequence[Turn]) -> str:
    """The recent turns the model reads beside the message."""
    return "\n".join(f"{turn.role}: {turn.content[:300]}" for turn in history[-6:])


def _cache_key(message: str, history: Sequence[Turn], tools: frozenset[str]) -> str:
    # Everything the model reads is in the key: the cache is shared by every user, so an answer
    # given in one conversation must never be served in another.
    raw = f"{message.strip().lower()}::{','.join(sorted(tools))}::{_context(history)}"
    return "chat:intent:" + hashlib.sha256(raw.encode()).hexdigest()
