"""The offline default "model": a reader that answers by quoting the evidence units that fit.

Evidence arrives in the prompt as the agreed XML block (text XML-escaped):

    <documents>
      <document id="1" doc="guide.md" title="Guide" section="2 Setup" …>text of the passage</document>
    </documents>

anywhere in the system or user messages. The question is the last user message (its
`<question>` element if it has one, with any `<documents>` block removed). The reader
(reader.py) picks one to three units: sentences, list items, or table rows written with
their header; each is quoted from its document's readable text (units.py) and followed by
`[id]`. When no unit answers, or none of the units picked speaks to the question, all are
fragments (a lead-in, a heading or a tree line), none holds the amount, version or setting's
name the question asks for (coverage.py), or the question names something of letters and digits
("p99", "H100") that no passage mentions, the answer says it
was not found in the knowledge base the `<documents kb="…">` block names, and names the
closest passages (document and section) instead of quoting unrelated sentences.

A document marked `source="TOOL"` is a tool's result for this very question (the intent
stage chose the tool), so it is quoted whole, first, whether or not it shares a word with
the question: "现在东京几点" shares none with "Current time Asia/Tokyo: …". One marked
`source="MEMORY"` is a fact the user stated earlier that recall chose for this question
("We moved to PostgreSQL 16" for "我们用的数据库是什么版本？"): quoted whole, after the sources.
"""

from __future__ import annotations

import copy
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any
from xml.sax.saxutils import unescape

from agentic_rag.llm.base import (
    Completion,
    CompletionOptions,
    LLMEmptyReply,
    LLMUnavailable,
    Message,
    Usage,
    complete_json_with,
    json_messages,
)
from agentic_rag.llm.coverage import LETTERS_DIGITS_NAME, Quoted, is_fragment, lacks_fact, speaks_of
from agentic_rag.llm.json_reply import parse_json_reply
from agentic_rag.llm.markup import find_elements, remove_elements
from agentic_rag.llm.reader import (
    Expand,
    Passage,
    Pick,
    ReaderOptions,
    Reading,
    Similarity,
    addresses_question,
    lead_in,
    read,
)
from agentic_rag.llm.units import has_cjk, split_units

Tokenize = Callable[[str], list[str]]
DEFAULT_OPTIONS = ReaderOptions()

DISCLAIMER = {
    "en": "(Extractive answer: sentences quoted from the sources, no language model.)",
    "zh": "（抽取式回答：以下句子摘自资料原文，未使用语言模型。）",
}
# The label when a configured model was asked and failed: "no language model" would mislead.
MODEL_FAILED = {
    "en": "(Extractive answer: the language model failed, so these sentences are quoted from the sources.)",
    "zh": "（抽取式回答：语言模型调用失败，以下句子摘自资料原文。）",
}
MODEL_TIMED_OUT = {
    "en": "(Extractive answer: the language model did not answer in time, "
    "so these sentences are quoted from the sources.)",
    "zh": "（抽取式回答：语言模型未能及时回答，以下句子摘自资料原文。）",
}
# After the model's unfinished answer: what follows is not its continuation.
MODEL_STOPPED = {
    "en": "(The language model stopped mid-answer; here is what the sources say, quoted.)",
    "zh": "（语言模型回答到一半停止了；以下是资料原文的相关句子。）",
}
FAILURE_LABELS = {"failed": MODEL_FAILED, "timed_out": MODEL_TIMED_OUT, "stopped": MODEL_STOPPED}
# A tool's output (a calculation, the time) is not quoted from a source: say what it is.
TOOL_DISCLAIMER = {
    "en": "(Tool result: computed or looked up by the tool, no language model.)",
    "zh": "（工具结果：由工具计算或查询，未使用语言模型。）",
}
# Facts the user stated earlier (semantic memory) are not quoted from a source either.
MEMORY_DISCLAIMER = {
    "en": "(From what you told me earlier, quoted; no language model.)",
    "zh": "（以下摘自你之前告诉我的信息，未使用语言模型。）",
}
NO_EVIDENCE = {
    "en": "I found no evidence in the knowledge base to answer this question.",
    "zh": "知识库中没有找到可以回答这个问题的资料。",
}
NOT_ANSWERED = {
    "en": "None of the passages found answers this question directly.",
    "zh": "找到的资料中没有直接回答这个问题的内容。",
}
NOT_ANSWERED_IN = {
    "en": "Not found in the knowledge base “{kb}”: none of its passages answers this question directly.",
    "zh": "知识库「{kb}」中没有找到直接回答这个问题的内容。",
}
CLOSEST = {"en": " The closest passages: {docs}.", "zh": "最接近的段落：{docs}。"}
MAX_CLOSEST = 3
# How much of the question a lead-in must cover for the amount it holds to count as the answer's
# ("包含 28 个字段:" above the fields, for "how many fields…"); one that only opens a list
# ("配置如下:") is a fragment.
LEAD_IN_STATES = 0.5

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_DOCUMENT = re.compile(r"<document\b([^>]*)>(.*?)</document>", re.DOTALL)
_DOCUMENTS_BLOCK = re.compile(r"<documents\b.*?</documents>", re.DOTALL)
_DOCUMENTS_KB = re.compile(r"<documents\b[^>]*?\bkb=\"([^\"]*)\"")  # matched at an opening only
_QUESTION = re.compile(r"<question\b([^>]*)>(.*?)</question>", re.DOTALL)
# A name from its first word character ("\b" after any leading "-"), tried once per run of name
# characters: from each of them, "[\w-]+" would read to the run's end again.
_ATTRIBUTE = re.compile(r"""(?<![\w-])-*+\b([\w-]++)\s*+=\s*+(?:"([^"]*)"|'([^']*)')""")
_ENTITIES = {"&quot;": '"', "&apos;": "'", "&#10;": "\n", "&#13;": "\r", "&#9;": "\t"}
_PIECE = re.compile(rf"[{_CJK}]{{1,2}}|\s+|[^\s{_CJK}]+\s*")
_LATIN_WORD = re.compile(r"[a-z0-9]+(?:\.[0-9]+)*")
_RUN = re.compile(f"([{_CJK}]+)|([^{_CJK}]+)")
_STOP_WORDS = frozenset(
    re.findall(
        r"\S+",
        "a an and are as at be by can do does for from has have how i in is it its of on or that the "
        "this to was what when where which who why will with you your 什么 怎么 如何 哪些 哪个 是否 多少 为什 么是",
    )
)


@dataclass(frozen=True)
class Evidence:
    doc_id: str
    text: str
    from_tool: bool = False
    from_memory: bool = False  # a fact the user stated earlier, recalled for this question
    doc: str = ""
    section: str = ""
    title: str = ""  # the document's title


class ExtractiveProvider:
    """Deterministic answers read from the prompt's evidence, streamed in small pieces."""

    name = "extractive"
    model = "extractive"

    def __init__(
        self,
        tokenize: Tokenize | None = None,
        options: ReaderOptions = DEFAULT_OPTIONS,
        *,
        similarity: Similarity | None = None,
        expand: Expand | None = None,
        encoder: Similarity | None = None,
    ):
        self._tokenize = tokenize or simple_tokenize
        self._options = options
        self._similarity = similarity or feature_cosine
        self._expand = expand
        self._encoder = encoder  # a multilingual sentence encoder's similarity (reader.read)
        self._disclaimer = DISCLAIMER

    def after_failure(self, how: str = "failed") -> ExtractiveProvider:
        """This reader, labelling its answers as standing in for a model that failed as `how`
        says: "failed", "timed_out", or "stopped" (mid-answer)."""
        stand_in = copy.copy(self)
        stand_in._disclaimer = FAILURE_LABELS[how]
        return stand_in

    def answer(self, messages: Sequence[Message]) -> str:
        """Return the whole answer for the conversation."""
        question = find_question(messages)
        expand = _with_terms(self._expand, find_question_terms(messages))
        language = "zh" if has_cjk(question) else "en"
        evidence = find_evidence(messages)
        if not evidence:
            return f"{self._disclaimer[language]}\n\n{NO_EVIDENCE[language]}"
        tools = [e for e in evidence if e.from_tool]
        remembered = [e for e in evidence if e.from_memory]
        documents = [e for e in evidence if not (e.from_tool or e.from_memory)]
        passages = [Passage(e.doc_id, e.text, rank, e.section, e.doc, e.title) for rank, e in enumerate(documents)]
        reading = read(question, passages, tokenize=self._tokenize, similarity=self._similarity,
                       expand=expand, options=self._options, encoder=self._encoder)
        if reading.picks and not (tools or remembered) and not self._picks_answer(question, documents, reading, expand):
            closest = _closest(documents, reading)
            return f"{self._disclaimer[language]}\n\n{_not_answered(closest, language, find_kb_name(messages))}"
        quoted = [(unit.text, e.doc_id) for e in tools for unit in split_units(e.text)]
        quoted += [(pick.unit.text, pick.doc_id) for pick in reading.picks]
        # A recalled fact was chosen for this question already (chat.facts): quoted whole, after the sources.
        quoted += [(e.text, e.doc_id) for e in remembered]
        if not quoted:
            return f"{self._disclaimer[language]}\n\n{_not_answered(documents, language, find_kb_name(messages))}"
        cite = "{text}[{doc_id}]" if language == "zh" else "{text} [{doc_id}]"
        body = ("" if language == "zh" else " ").join(cite.format(text=text, doc_id=n) for text, n in quoted)
        label = self._disclaimer if reading.picks else TOOL_DISCLAIMER if tools else self._memory_label()
        title = self._lead_in(question, documents, reading, expand) if not tools else ""
        # On a line of its own (a Markdown line break), so no citation takes it into its quote.
        heading = f"**{title}**  \n" if title else ""
        return f"{label[language]}\n\n{heading}{body}"

    def _picks_answer(self, question: str, documents: Sequence[Evidence], reading: Reading, expand: Expand | None) -> bool:
        """Whether the units the reader picked may answer question: some unit speaks to it, not
        all are fragments, they hold the amount, version or setting's name it asks for, if it
        asks for one (coverage.lacks_fact), and some passage mentions each name of letters and
        digits it names. (The stricter test of the quotes' subject and kind of fact is
        the citation check's: a sentence it doubts is still shown, marked as such.)"""
        where = {e.doc_id: e for e in documents}
        quotes = [
            Quoted(pick.unit.text, where[pick.doc_id].section if pick.doc_id in where else "",
                   where[pick.doc_id].doc if pick.doc_id in where else "")
            for pick in reading.picks
        ]
        substantive = [q for q in quotes if not is_fragment(q.text, question)]
        # A lead-in quoted with the list or table it introduces states facts as much as its items
        # ("DocumentChatState … 包含 28 个字段:" above the fields).
        stating = [q for q, pick in zip(quotes, reading.picks, strict=True) if q in substantive or _leads_quoted_block(pick, reading.picks)]
        if not substantive or lacks_fact(question, stating):
            return False
        # The amount asked for must be said where the question's subject is named.
        if lacks_fact(question, [q for q in stating if speaks_of(question, q, self._tokenize, expand)] or [Quoted("")]):
            return False
        if _names_what_no_passage_holds(question, documents):
            return False
        return any(addresses_question(question, f"{q.section} {q.text}", self._tokenize, expand) for q in quotes)

    def _memory_label(self) -> dict[str, str]:
        """An answer of recalled facts alone says so, unless it stands in for a model that failed."""
        return MEMORY_DISCLAIMER if self._disclaimer is DISCLAIMER else self._disclaimer

    def _lead_in(self, question: str, documents: Sequence[Evidence], reading: Reading, expand: Expand | None) -> str:
        if not reading.picks:
            return ""
        lead = next((e for e in documents if e.doc_id == reading.picks[0].doc_id), None)
        if lead is None:
            return ""
        return lead_in(question, lead.section, reading.picks, tokenize=self._tokenize, expand=expand)

    def complete(self, messages: Sequence[Message], options: CompletionOptions) -> Completion:
        text = self.answer(messages)
        prompt_tokens = sum(len(split_pieces(m.content)) for m in messages)
        usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=len(split_pieces(text)))
        return Completion(text=text, usage=usage, provider=self.name, model=self.model)

    def stream(self, messages: Sequence[Message], options: CompletionOptions) -> Iterator[str]:
        yield from split_pieces(self.answer(messages))

    def complete_json(
        self,
        messages: Sequence[Message],
        options: CompletionOptions,
        schema_hint: str,
        *,
        field: str = "answer",
    ) -> dict:
        return complete_json_with(self, messages, options, schema_hint, field=field)




def _leads_quoted_block(pick: Pick, picks: Sequence[Pick]) -> bool:
    """Whether pick is a lead-in that holds most of the question by itself, quoted with some of
    the block it introduces."""
    unit = pick.unit
    return unit.is_lead_in and pick.coverage >= LEAD_IN_STATES and any(
        other.doc_id == pick.doc_id and other.unit.block == unit.block and other.unit.position > unit.position
        for other in picks
    )


def _names_what_no_passage_holds(question: str, documents: Sequence[Evidence]) -> bool:
    """Whether the question names something like "p99" or "H100" that no passage mentions: the
    passages are then about something near it ("What p99 latency…" over a sentence about total
    latency), and their sentences would read as its answer."""
    names = {name.lower() for name in LETTERS_DIGITS_NAME.findall(question)}
    if not names:
        return False
    text = " ".join(f"{e.doc} {e.section} {e.text}" for e in documents).lower()
    return any(name not in text for name in names)


def _why_quoted(completion: Completion) -> str:
    """Why the extractive fallback answered: the models' errors when some were tried."""
    errors = [attempt.error for attempt in completion.attempts if attempt.error]
    if errors:
        return f"the language model failed ({'; '.join(errors)})"
    return "no language model answered (the extractive fallback did)"


def _not_answered(closest: Sequence[Evidence], language: str, kb: str = "") -> str:
    """Say the question is not answered (in the KB, when its name is known) and name the closest
    passages, each as its document and section."""
    places = list(dict.fromkeys(_place(e) for e in closest if e.doc))[:MAX_CLOSEST]
    separator = "；" if language == "zh" else "; "
    named = CLOSEST[language].format(docs=separator.join(places)) if places else ""
    said = NOT_ANSWERED_IN[language].format(kb=kb) if kb else NOT_ANSWERED[language]
    return said + named


def _place(evidence: Evidence) -> str:
    return f"{evidence.doc} § {evidence.section}" if evidence.section else evidence.doc


def _closest(documents: Sequence[Evidence], reading: Reading) -> list[Evidence]:
    """The passages of the reader's picks, then the top-ranked ones."""
    by_id = {e.doc_id: e for e in documents}
    picked = [by_id[pick.doc_id] for pick in reading.picks if pick.doc_id in by_id]
    return list(dict.fromkeys([*picked, *documents[:2]]))


def find_kb_name(messages: Sequence[Message]) -> str:
    """The name of the knowledge base the prompt's `<documents kb="…">` block comes from, or ""."""
    for message in messages:
        # Tried at the first opening only: searched, a text of many "<documents" without ">" would
        # be read to its end from each of them.
        opening = message.content.find("<documents")
        found = _DOCUMENTS_KB.match(message.content, opening) if opening >= 0 else None
        if found:
            return _unescape(found.group(1))
    return ""


def feature_cosine(a: str, b: str) -> float:
    """Cosine of the hashing embedder's features (char n-grams, words), without hashing them."""
    (fa, square_a), (fb, square_b) = _features(a), _features(b)
    # Over the smaller of the two: a long question against many short units costs the units.
    small, large = (fa, fb) if len(fa) <= len(fb) else (fb, fa)
    dot = sum(count * large[f] for f, count in small.items() if f in large)
    if not dot:
        return 0.0
    return dot / math.sqrt(square_a * square_b)


# The reader compares the one question with every unit, once for the whole question and once
# per part: the question's features are counted once, not once per unit.
@lru_cache(maxsize=512)
def _features(text: str) -> tuple[Counter[str], int]:
    """text's features and the sum of their squared counts (read, never changed, by callers)."""
    from agentic_rag.embeddings import hashing_features

    features = hashing_features(text)
    return features, sum(c * c for c in features.values())


def find_evidence(messages: Sequence[Message]) -> list[Evidence]:
    """Return the `<document>` elements of the messages, in prompt order."""
    found: list[Evidence] = []
    for message in messages:
        for element in find_elements(_DOCUMENT, message.content, "document"):
            attributes, body = element.groups()
            attrs = {name.lower(): _unescape(a or b) for name, a, b in _ATTRIBUTE.findall(attributes)}
            found.append(
                Evidence(
                    doc_id=attrs.get("id") or str(len(found) + 1),
                    text=_unescape(body),
                    from_tool=attrs.get("source") == "TOOL",
                    from_memory=attrs.get("source") == "MEMORY",
                    doc=attrs.get("doc", ""),
                    section=attrs.get("section", ""),
                    title=attrs.get("title", ""),
                )
            )
    return found


def find_question_terms(messages: Sequence[Message]) -> str:
    """The `terms` attribute of the last user message's `<question>`: the question's words as
    the documents write them, in their language (chat.pipeline.prompt), or ""."""
    for message in reversed(messages):
        if message.role == "user":
            tagged = next(find_elements(_QUESTION, message.content, "question"), None)
            if tagged is None:
                return ""
            attributes = {name.lower(): _unescape(a or b) for name, a, b in _ATTRIBUTE.findall(tagged.group(1))}
            return attributes.get("terms", "").strip()
    return ""


def _with_terms(expand: Expand | None, terms: str) -> Expand | None:
    """expand, plus the question followed by terms: a unit in the documents' language that
    states what the question asks shares those words with it."""
    if not terms:
        return expand

    def expanded(question: str) -> list[str]:
        return [*(expand(question) if expand else [question]), f"{question} {terms}"]

    return expanded


def find_question(messages: Sequence[Message]) -> str:
    """Return the last user message's question, without any evidence block."""
    for message in reversed(messages):
        if message.role == "user":
            tagged = next(find_elements(_QUESTION, message.content, "question"), None)
            text = tagged.group(2) if tagged else remove_elements(
                _DOCUMENTS_BLOCK, message.content, "documents", has_attributes=False
            )
            return _unescape(text).strip()
    return ""


def split_pieces(text: str) -> list[str]:
    """Cut text into stream tokens: a word and its space, or two Chinese characters."""
    return _PIECE.findall(text)


def simple_tokenize(text: str) -> list[str]:
    """Lowercase English words (a plural's "s" dropped) and Chinese character bigrams."""
    terms: list[str] = []
    for cjk, other in _RUN.findall(text.lower()):
        if cjk:
            terms.extend([cjk] if len(cjk) == 1 else [cjk[i : i + 2] for i in range(len(cjk) - 1)])
        else:
            # Stop words first: "does" is not the plural of "doe".
            terms.extend(_singular(word) for word in _LATIN_WORD.findall(other) if word not in _STOP_WORDS)
    return [t for t in terms if t not in _STOP_WORDS and (len(t) > 1 or t.isdigit() or has_cjk(t))]


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _unescape(text: str) -> str:
    return unescape(text, _ENTITIES)


def model_json(
    llm: Any, messages: Sequence[Message], options: CompletionOptions, schema_hint: str, *, field: str
) -> dict:
    """Ask the configured model for a JSON object.

    Raise LLMUnavailable when the answer came from the router's extractive fallback: it
    quotes documents, it cannot classify or rewrite, and its text would be taken for a result.
    Raise LLMEmptyReply when the reply held neither JSON nor text: the parser's canned
    apology is for showing to a person, never a value to use or cache.
    """
    completion = llm.complete(json_messages(messages, schema_hint), replace(options, json_mode=True))
    if getattr(completion, "provider", "") == ExtractiveProvider.name:
        raise LLMUnavailable(_why_quoted(completion))
    reply = parse_json_reply(completion.text, field=field)
    if reply.step == "canned":
        raise LLMEmptyReply("no answer in the reply: neither JSON nor text", provider=completion.provider)
    return reply.data
