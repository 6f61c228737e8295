"""Map an answer's `[n]` and `<cite>` marks to evidence, and verify their quotes.

A `[n]` cites the sentence before it: that sentence is its quote. A
`<cite doc_id="n" quote="…">sentence</cite>` carries its quote. Each citation gets a status:
- "unverified": its quote does not occur in the cited evidence text (case, spacing, end
  punctuation and Markdown syntax aside; a table row may be quoted with its header, as the
  extractive reader does), or it cites no evidence;
- "may_not_answer": the quote is there, but given the question the answer may not be: the
  cited sentence does not address the question, or the document quotes, taken together, miss
  its subject or the kind of fact it asks for (agentic_rag.llm.coverage);
- "verified": the quote is there and the quotes answer the question.
A sentence quoted faithfully from a passage that does not answer the question is not shown
as verified: "verified" tells the user the answer is supported, not only copied.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any
from xml.sax.saxutils import unescape

from agentic_rag.llm.coverage import Quoted, unanswered
from agentic_rag.llm.extractive import simple_tokenize
from agentic_rag.llm.markup import find_elements
from agentic_rag.llm.reader import addresses_question
from agentic_rag.llm.units import readable_text, split_sentences

from .state import EvidenceItem

Tokenize = Callable[[str], list[str]]
_ENTITIES = {"&quot;": '"', "&apos;": "'"}
_MARK = re.compile(
    r"<cite\b(?P<attrs>[^>]*)>(?P<inner>.*?)</cite>|\[(?P<ns>\d{1,3}(?:\s*[,，]\s*\d{1,3})*)\]", re.DOTALL
)
_NUMBERS_MARK = re.compile(r"\[\d{1,3}(?:\s*[,，]\s*\d{1,3})*\]")  # _MARK's second alternative
# A name from its first character: from each character of a long name it would be read again.
_ATTRIBUTE = re.compile(r"""(?<![\w-])([\w-]++)\s*+=\s*+(?:"([^"]*)"|'([^']*)')""")
_LIST_MARK = re.compile(r"^\s*(?:[-*•>]+|\d+[.)、])\s+")
_EDGE_PUNCT = " \t\r\n.。!！?？;；:：,，、\"'“”‘’()（）*_`"
VERIFIED, MAY_NOT_ANSWER, UNVERIFIED = "verified", "may_not_answer", "unverified"
OFF_QUESTION = "the sentence does not address the question"
_ANSWERING_SOURCES = ("KB", "WEB")  # a tool's or memory's output is the answer itself


@dataclass(frozen=True)
class CitedSentence:
    n: int
    quote: str
    sentence: str


@dataclass(frozen=True)
class Citation:
    """One cited sentence; `verified` is true only with status "verified", the quote found and
    answering; status "may_not_answer" says the quote was found but may not answer."""

    n: int
    quote: str
    verified: bool
    reason: str = ""
    sentence: str = ""
    doc: str = ""
    chunk_id: int | None = None
    source: str = ""
    section: str = ""
    status: str = ""  # VERIFIED, MAY_NOT_ANSWER or UNVERIFIED; by default as `verified` says

    def __post_init__(self) -> None:
        if not self.status:
            object.__setattr__(self, "status", VERIFIED if self.verified else UNVERIFIED)

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "doc": self.doc,
            "chunk_id": self.chunk_id,
            "quote": self.quote,
            "verified": self.verified,
            "status": self.status,
            "source": self.source,
            "section": self.section,
        }

    def as_verification(self) -> dict[str, Any]:
        return {"n": self.n, "sentence": self.sentence, "quote": self.quote, "verified": self.verified,
                "status": self.status, "reason": self.reason}


def find_citations(answer: str) -> list[CitedSentence]:
    """Every cited sentence of answer, in order (one per cited number)."""
    found: list[CitedSentence] = []
    cursor, previous = 0, ""
    for match in _marks(answer):
        if match.group("attrs") is not None:
            n, quote, sentence = _cite_tag(match)
            if n is not None:
                found.append(CitedSentence(n, quote, sentence))
            cursor, previous = match.end(), sentence
            continue
        sentence = _last_sentence(answer[cursor : match.start()]) or previous
        numbers = [int(n) for n in re.findall(r"\d+", match.group("ns"))]
        found.extend(CitedSentence(n, sentence, sentence) for n in numbers if sentence)
        cursor, previous = match.end(), sentence
    return found


def check_citations(
    answer: str,
    evidence: Sequence[EvidenceItem],
    question: str = "",
    *,
    tokenize: Tokenize | None = None,
    expand: Tokenize | None = None,
) -> list[Citation]:
    """Resolve and verify every cited sentence of answer against the numbered evidence.

    With a question, the quotes must also answer it (see the module's docstring).
    """
    tokenize = tokenize or simple_tokenize
    by_n = {item.n: item for item in evidence}
    checked: list[Citation] = []
    seen: set[tuple[int, str]] = set()
    for cited in find_citations(answer):
        if (cited.n, cited.quote) in seen:
            continue
        seen.add((cited.n, cited.quote))
        item = by_n.get(cited.n)
        if item is None:
            checked.append(Citation(cited.n, cited.quote, False, f"no evidence [{cited.n}]", cited.sentence))
            continue
        found, reason = verify_quote(cited.quote, item.text)
        status = VERIFIED if found else UNVERIFIED
        if found and question and item.source in _ANSWERING_SOURCES and not addresses_question(
            # The sentence is read in its section: an FAQ's answer sits under its question.
            question, f"{item.section} {cited.sentence}", tokenize, expand
        ):
            status, reason = MAY_NOT_ANSWER, OFF_QUESTION
        checked.append(
            Citation(cited.n, cited.quote, status == VERIFIED, reason, cited.sentence, item.doc, item.chunk_id,
                     item.source, item.section, status)
        )
    return _with_coverage(checked, question, tokenize, expand) if question else checked


def _with_coverage(citations: list[Citation], question: str, tokenize: Tokenize, expand: Tokenize | None) -> list[Citation]:
    """The citations, the verified document quotes marked "may_not_answer" when, taken together,
    they do not answer the question (a sentence off the question adds nothing to them)."""
    found = [c for c in citations if c.source in _ANSWERING_SOURCES and c.status == VERIFIED]
    why = unanswered(question, [Quoted(c.quote, c.section, c.doc) for c in found], tokenize, expand) if found else ""
    if not why:
        return citations
    return [replace(c, verified=False, status=MAY_NOT_ANSWER, reason=why) if c.status == VERIFIED and c.source
            in _ANSWERING_SOURCES else c for c in citations]


def verify_quote(quote: str, source: str) -> tuple[bool, str]:
    """Whether quote occurs in source, and why not."""
    needle = _normalise(quote)
    if not needle:
        return False, "empty quote"
    if needle in _normalise(source) or needle in _normalise(readable_text(source)):
        return True, ""
    return False, "quote not found in the cited source"


def display_answer(answer: str) -> str:
    """The answer with each `<cite …>sentence</cite>` shown as `sentence [n]`."""

    def replace(match: re.Match[str]) -> str:
        if match.group("attrs") is None:
            return match.group(0)
        n, _, sentence = _cite_tag(match)
        return f"{sentence} [{n}]" if n is not None else sentence

    pieces, done = [], 0
    for match in _marks(answer):
        pieces += [answer[done : match.start()], replace(match)]
        done = match.end()
    return "".join([*pieces, answer[done:]])


def _marks(answer: str) -> Iterator[re.Match[str]]:
    """_MARK.finditer(answer), in linear time: a `<cite` that can no longer close is not tried.

    A "[1, 2]" mark holds no "<" nor ">", so it lies inside a cite element or outside all of
    them: the marks are the cite elements and the number marks outside them, in order.
    """
    numbers = [m.start() for m in _NUMBERS_MARK.finditer(answer)]
    k = done = 0
    for cite in (*find_elements(_MARK, answer, "cite"), None):
        end = cite.start() if cite else len(answer)
        while k < len(numbers) and numbers[k] < end:
            if numbers[k] >= done:
                yield _MARK.match(answer, numbers[k])
            k += 1
        if cite:
            yield cite
            done = cite.end()


def _cite_tag(match: re.Match[str]) -> tuple[int | None, str, str]:
    attributes = {name.lower(): a if a is not None and a != "" else b for name, a, b in _ATTRIBUTE.findall(match.group("attrs"))}
    digits = re.search(r"\d+", attributes.get("doc_id", "") or attributes.get("id", "") or "")
    sentence = unescape(match.group("inner"), _ENTITIES).strip()
    quote = unescape(attributes.get("quote") or "", _ENTITIES).strip() or sentence
    return (int(digits.group()) if digits else None), quote, sentence


def _last_sentence(segment: str) -> str:
    """The last sentence of segment, cut as the reader cuts its units (never inside brackets,
    not at "；"), so a quoted unit is checked whole."""
    for line in reversed(segment.splitlines()):
        pieces = [piece for piece in split_sentences(_LIST_MARK.sub("", line)) if piece.strip(_EDGE_PUNCT)]
        if pieces:
            return pieces[-1]
    return ""


def _normalise(text: str) -> str:
    text = text.replace("**", "").replace("`", "")
    return " ".join(text.split()).casefold().strip(_EDGE_PUNCT)
