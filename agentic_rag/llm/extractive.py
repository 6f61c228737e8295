"""The offline default "model": it answers by quoting the evidence sentences that fit.

Evidence arrives in the prompt as the agreed XML block (text XML-escaped):

    <documents>
      <document id="1" source="guide.md" …>text of the passage</document>
    </documents>

anywhere in the system or user messages. The question is the last user message (its
`<question>` element if it has one, with any `<documents>` block removed). Every quoted
sentence is a verbatim substring of its document's text and is followed by `[id]`.

A document marked `source="TOOL"` is a tool's result for this very question (the intent
stage chose the tool), so it is quoted whole, first, whether or not it shares a word with
the question: "现在东京几点" shares none with "Current time Asia/Tokyo: …".
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import unescape

from agentic_rag.llm.base import Completion, CompletionOptions, Message, Usage, complete_json_with

Tokenize = Callable[[str], list[str]]

DISCLAIMER = {
    "en": "(Extractive answer: sentences quoted from the sources, no language model.)",
    "zh": "（抽取式回答：以下句子摘自资料原文，未使用语言模型。）",
}
NO_EVIDENCE = {
    "en": "I found no evidence in the knowledge base to answer this question.",
    "zh": "知识库中没有找到可以回答这个问题的资料。",
}
NO_OVERLAP = {
    "en": "The sources share no words with the question; this is how the best-ranked ones begin:",
    "zh": "资料与问题没有共同的词语，以下是排名最前的资料的开头：",
}

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_DOCUMENT = re.compile(r"<document\b([^>]*)>(.*?)</document>", re.DOTALL)
_DOCUMENTS_BLOCK = re.compile(r"<documents\b.*?</documents>", re.DOTALL)
_QUESTION = re.compile(r"<question\b[^>]*>(.*?)</question>", re.DOTALL)
_ID_ATTRIBUTE = re.compile(r"""\bid\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_TOOL_SOURCE = re.compile(r"""\bsource\s*=\s*["']TOOL["']""")
_ENTITIES = {"&quot;": '"', "&apos;": "'"}
# A sentence ends after 。！？；!? (with closing quotes), after a full stop followed by
# space or the end (so 3.5 and example.com stay whole), or at a line break.
_SENTENCE_END = re.compile(r"""[。！？；!?]+[”’」』"')\]]*|\.+[”’"')\]]*(?=\s|$)|\n""")
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


@dataclass(frozen=True)
class ExtractiveOptions:
    max_sentences: int = 3
    max_chars: int = 800
    min_relative_score: float = 0.3  # a sentence must score this share of the best one
    lead_documents: int = 2  # quoted from when no sentence shares a term with the question


DEFAULT_OPTIONS = ExtractiveOptions()


@dataclass(frozen=True)
class _Sentence:
    doc_id: str
    text: str
    doc_rank: int
    position: int
    terms: frozenset[str]


class ExtractiveProvider:
    """Deterministic answers quoted from the prompt's evidence, streamed in small pieces."""

    name = "extractive"
    model = "extractive"

    def __init__(self, tokenize: Tokenize | None = None, options: ExtractiveOptions = DEFAULT_OPTIONS):
        self._tokenize = tokenize or simple_tokenize
        self._options = options

    def answer(self, messages: Sequence[Message]) -> str:
        """Return the whole answer for the conversation."""
        question = find_question(messages)
        language = "zh" if _has_cjk(question) else "en"
        evidence = find_evidence(messages)
        if not evidence:
            return f"{DISCLAIMER[language]}\n\n{NO_EVIDENCE[language]}"
        tool_results = [s for rank, e in enumerate(evidence) if e.from_tool for s in self._sentences(e, rank)]
        sentences = [s for rank, e in enumerate(evidence) if not e.from_tool for s in self._sentences(e, rank)]
        chosen = choose_sentences(sentences, set(self._tokenize(question)), self._options)
        preface = ""
        if tool_results:
            chosen = tool_results + chosen
        elif not chosen:
            chosen = _lead_sentences(sentences, self._options.lead_documents)
            preface = NO_OVERLAP[language] + "\n\n"
        cite = "{text}[{doc_id}]" if language == "zh" else "{text} [{doc_id}]"
        body = ("" if language == "zh" else " ").join(
            cite.format(text=s.text, doc_id=s.doc_id) for s in chosen
        )
        return f"{DISCLAIMER[language]}\n\n{preface}{body}"

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

    def _sentences(self, evidence: Evidence, rank: int) -> Iterator[_Sentence]:
        for position, text in enumerate(split_sentences(evidence.text)):
            terms = frozenset(self._tokenize(text))
            yield _Sentence(evidence.doc_id, text, rank, position, terms)


def find_evidence(messages: Sequence[Message]) -> list[Evidence]:
    """Return the `<document>` elements of the messages, in prompt order."""
    found: list[Evidence] = []
    for message in messages:
        for attributes, body in _DOCUMENT.findall(message.content):
            id_match = _ID_ATTRIBUTE.search(attributes)
            doc_id = (id_match.group(1) or id_match.group(2)) if id_match else str(len(found) + 1)
            from_tool = _TOOL_SOURCE.search(attributes) is not None
            found.append(Evidence(doc_id=_unescape(doc_id), text=_unescape(body), from_tool=from_tool))
    return found


def find_question(messages: Sequence[Message]) -> str:
    """Return the last user message's question, without any evidence block."""
    for message in reversed(messages):
        if message.role == "user":
            tagged = _QUESTION.search(message.content)
            text = tagged.group(1) if tagged else _DOCUMENTS_BLOCK.sub("", message.content)
            return _unescape(text).strip()
    return ""


def split_sentences(text: str) -> list[str]:
    """Split Chinese or English text into stripped sentences, each a substring of text."""
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [sentence for sentence in sentences if sentence]


def choose_sentences(
    sentences: Sequence[_Sentence], question_terms: set[str], options: ExtractiveOptions
) -> list[_Sentence]:
    """Pick the sentences that best cover the question's terms, best first."""
    weights = _idf(sentences)
    scored = []
    for sentence in sentences:
        score = sum(weights[term] for term in sentence.terms & question_terms)
        if score > 0:
            scored.append((-score, sentence.doc_rank, sentence.position, sentence))
    scored.sort(key=lambda row: row[:3])
    if not scored:
        return []
    best = -scored[0][0]
    chosen: list[_Sentence] = []
    seen: set[str] = set()
    used = 0
    for negative_score, _, _, sentence in scored:
        if -negative_score < best * options.min_relative_score or len(chosen) == options.max_sentences:
            break
        if sentence.text in seen or (chosen and used + len(sentence.text) > options.max_chars):
            continue
        chosen.append(sentence)
        seen.add(sentence.text)
        used += len(sentence.text)
    return chosen


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
            terms.extend(_singular(word) for word in _LATIN_WORD.findall(other))
    return [t for t in terms if t not in _STOP_WORDS and (len(t) > 1 or t.isdigit() or _has_cjk(t))]


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _idf(sentences: Sequence[_Sentence]) -> Counter[str]:
    df = Counter(term for sentence in sentences for term in sentence.terms)
    total = len(sentences)
    return Counter({term: math.log(1 + total / count) for term, count in df.items()})


def _lead_sentences(sentences: Sequence[_Sentence], documents: int) -> list[_Sentence]:
    leads = [s for s in sentences if s.position == 0 and s.doc_rank < documents]
    return sorted(leads, key=lambda s: s.doc_rank)


def _has_cjk(text: str) -> bool:
    return re.search(f"[{_CJK}]", text) is not None


def _unescape(text: str) -> str:
    return unescape(text, _ENTITIES)
