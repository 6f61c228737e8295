"""The stages of the chat pipeline as small functions of their inputs and collaborators.

S2 (rewrite.py), S3 (intent.py) and S7 (prompt.py) have modules of their own; the runner
wires all of them to the declared graph.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.urls import reverse

from agentic_rag.llm import CompletionOptions, ModelRouter
from agentic_rag.llm.coverage import asked_names
from agentic_rag.llm.reader import UNTRANSLATED_SHARE
from agentic_rag.llm.units import has_cjk, text_language
from knowledge.candidates import Candidate
from knowledge.crosslingual import CROSSLINGUAL_SOURCE
from knowledge.models import Document
from knowledge.retrieval import RetrievalParams, RetrievalResult, params_for_kb

from .intent import Intent, IntentResult
from .options import ChatOptions
from .prompt import Prompt
from .state import EvidenceItem, Turn
from .tools import ToolResult

Retriever = Callable[..., RetrievalResult]  # retrieve(query, kb, params)

NO_REFERENCE = "no passage passed the quality gate"
NO_MATCH = "nothing in the knowledge base matches the query"
WEAK_EVIDENCE = "no passage holds enough of the question's words"
NEVER_MENTIONED = "the knowledge base never mentions"  # followed by the name
MAX_NAMES_CHECKED = 8
RERANK_WARNING = "rerank skipped"


# --- S1 memory -----------------------------------------------------------------------------


def recent_turns(turns: Sequence[Turn], limit: int) -> tuple[Turn, ...]:
    """The last `limit` exchanges (a user turn and its answer each)."""
    return tuple(turns[-2 * limit :]) if limit > 0 else ()


# --- S4 ambiguity guide ----------------------------------------------------------------------


@dataclass(frozen=True)
class Ambiguity:
    reason: str
    candidates: tuple[Intent, ...]


def find_ambiguity(
    intent: IntentResult, *, min_confidence: float, min_gap: float, floor: float = 0.0
) -> Ambiguity | None:
    """Shortcut A's test: a weak top intent, or a rival (at least `floor`) too close to it.

    Tools the rules found each by its own keyword ("weather in Paris and the USD rate")
    are not rivals: the message asks for all of them, and the tool channel runs them together.
    """
    top = intent.top
    requested_together = intent.method == "rules" and top.name == "TOOL"
    rivals = tuple(
        i for i in intent.intents[1:] if i.confidence >= floor and not (requested_together and i.name == "TOOL")
    )
    candidates = (top, *rivals[:1])
    if top.confidence < min_confidence:
        return Ambiguity(f"top confidence {top.confidence:.2f} < {min_confidence:.2f}", candidates)
    if rivals and top.confidence - rivals[0].confidence < min_gap:
        gap = top.confidence - rivals[0].confidence
        return Ambiguity(f"top-2 gap {gap:.2f} < {min_gap:.2f}", candidates)
    return None


# --- S6 KB ∥ tools ---------------------------------------------------------------------------


@dataclass
class KbSearch:
    references: list[Candidate] = field(default_factory=list)
    results: list[RetrievalResult] = field(default_factory=list)
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)  # the tools an agent called while searching
    incomplete: list[str] = field(default_factory=list)  # why an agent stopped short
    parts: list[Any] = field(default_factory=list)  # chat.workers.PartFound: what each part of a compound question found

    @property
    def is_rerank_degraded(self) -> bool:
        return any(warning.startswith(RERANK_WARNING) for warning in self.warnings)


def retrieval_params(kb: Any, options: ChatOptions) -> RetrievalParams:
    """The KB's stored retrieval settings (tuned per KB) with the request's switches on top."""
    overrides: dict[str, Any] = {"top_k": options.top_k}
    if options.search_mode:
        overrides["mode"] = options.search_mode
    if options.enable_rerank is not None:
        overrides["rerank"] = options.enable_rerank
    return params_for_kb(kb, **overrides)


def collect_search(results: Sequence[RetrievalResult]) -> KbSearch:
    """Merge retrieval results: each chunk once, in the order they found them."""
    search = KbSearch(results=list(results))
    seen: set[int] = set()
    for result in search.results:
        search.warnings.extend(result.warnings)
        for reference in result.references:
            if reference.chunk_id not in seen:
                seen.add(reference.chunk_id)
                search.references.append(reference)
    if not search.references:
        reasons = [result.reason for result in search.results if result.reason]
        has_candidates = any(result.candidates for result in search.results)
        search.reason = reasons[0] if reasons else (NO_REFERENCE if has_candidates else NO_MATCH)
    return search


# The cross-language leg's cosine at which a passage in the other language counts as evidence
# whatever words it shares (held_across_languages); chosen on the seeds dev set's tuning half
# (seeds_eval --half tune).
CROSSLINGUAL_EVIDENCE_MIN = 0.25


# "…集合叫什么名字？", "又称为什么": words that ask what a thing is called. The passage that
# names it ("集合名 | t_kngs_…_child") does not repeat them, so they are not counted as terms it lacks.
_ASKS_WHAT_CALLED = re.compile(r"[又也还]?(?:叫做|叫|称为|称作|名为)什么(?:名字|名称)?")


def evidence_coverage(
    question: str, references: Sequence[Candidate], *, tokenize: Callable[[str], list[str]],
    expand: Callable[[str], list[str]] = lambda q: [q], titles: Mapping[int, str] | None = None,
) -> float:
    """The largest share of the question's terms one reference holds, in its text or the headings
    it stands under: its section, its chapters and its document's title (`titles`, by document id).

    A question names the document or chapter it asks about as often as the passage's own words,
    and a passage of a small section holds its headings only above it. Each cross-language variant
    of the question counts, as it did in retrieval, so an English question about a Chinese passage
    is measured against its translated terms. Words that ask what a thing is called (叫什么名字) are
    not its terms.
    """
    variants = [set(tokenize(q)) for q in expand(_ASKS_WHAT_CALLED.sub(" ", question))]
    variants = [terms for terms in variants if terms]
    if not variants:
        return 1.0  # nothing to measure: leave the decision to retrieval
    best = 0.0
    for reference in references:
        headings = ((titles or {}).get(reference.doc_id, ""), reference.chapter_level_1, reference.chapter_level_2)
        text = " ".join(part for part in (*headings, reference.section, reference.text) if part)
        held = set(tokenize(text))
        weigh = _share_across_languages if has_cjk(question) and not has_cjk(text) else _share
        best = max(best, *(weigh(terms, held) for terms in variants))
    return best


def held_across_languages(question: str, references: Sequence[Candidate]) -> bool:
    """Whether a reference in another language than the question means what it asks though it
    shares too few of its words: "How much traffic do the three shortcuts save?" and "3 条短路
    (A/B/C) 跳过不必要的阶段,节省 15-25% 流量" share none. The cross-language leg's cosine (its
    best sentence's, under the reader's multilingual encoder) stands in for the words."""
    language = text_language(question)
    return any(
        reference.scores.get(CROSSLINGUAL_SOURCE, 0.0) >= CROSSLINGUAL_EVIDENCE_MIN
        and text_language(reference.text) != language
        for reference in references
    )


def _share(terms: set[str], held: set[str]) -> float:
    return len(terms & held) / len(terms)


def _share_across_languages(terms: set[str], held: set[str]) -> float:
    """The share of terms a passage with no Chinese holds, where a Chinese term the term map
    left untranslated counts UNTRANSLATED_SHARE (as in the reader): the passage could not hold
    it in any wording. Two terms held at least, or one shared glossary word would pass any
    Chinese question."""
    found = terms & held
    if len(found) < 2:
        return _share(terms, held)
    untranslated = sum(1 for term in terms if has_cjk(term))
    return len(found) / (len(terms) - untranslated * (1 - UNTRANSLATED_SHARE))


@dataclass(frozen=True)
class PartEvidence:
    """One part of a compound question: the evidence numbers that answer it, or why none does."""

    question: str
    numbers: tuple[int, ...] = ()
    reason: str = ""
    agent_type: str = ""

    def as_event(self, n: int, evidence: Sequence[EvidenceItem]) -> dict[str, Any]:
        by_n = {item.n: item for item in evidence}
        docs = list(dict.fromkeys(by_n[number].doc for number in self.numbers if number in by_n))
        return {"n": n, "question": self.question, "agent_type": self.agent_type, "evidence": list(self.numbers),
                "docs": docs, "found": bool(self.numbers), "reason": self.reason}


def unmentioned(question: str, mentions: Callable[[str], bool]) -> str:
    """Why no passage can answer question when it names, in Latin letters, something the KB
    never mentions ("Kafka", "PDF", "p99"): the passages found are about something near it, and
    would read as its answer. "" when the KB mentions every name it asks about.

    Only its first MAX_NAMES_CHECKED names are looked up, and the lookups stop at the first
    missing one: a question of pasted code names hundreds, each a query when the passages
    found do not hold it."""
    for name in asked_names(question)[:MAX_NAMES_CHECKED]:
        if not mentions(name):
            return f"{NEVER_MENTIONED} {name}"
    return ""


def mentioned(references: Sequence[Candidate], in_kb: Callable[[str], bool]) -> Callable[[str], bool]:
    """Whether a name is mentioned: in the references found (read first: no query), else in_kb.
    The references' text is joined on the first call only: most questions name nothing."""

    @cache
    def found() -> str:
        return " ".join(f"{c.doc_name} {c.section_title} {c.text}" for c in references).lower()

    return lambda name: name.lower() in found() or in_kb(name)


def gate_part(
    question: str, references: Sequence[Candidate], *, minimum: float, limit: int,
    tokenize: Callable[[str], list[str]], expand: Callable[[str], list[str]], titles: Mapping[int, str] | None = None,
    mentions: Callable[[str], bool] | None = None,
) -> tuple[list[Candidate], str]:
    """A part's references through the evidence gate on its own: none when none holds enough of
    it, or when it names what the KB never mentions (see unmentioned)."""
    never = unmentioned(question, mentions) if mentions is not None and references else ""
    if never:
        return [], never
    kept = list(references[:limit])
    if (kept and minimum > 0 and not held_across_languages(question, kept)
            and evidence_coverage(question, kept, tokenize=tokenize, expand=expand, titles=titles) < minimum):
        return [], WEAK_EVIDENCE
    return kept, ""


def document_titles(references: Sequence[Candidate]) -> dict[int, str]:
    """The titles of the references' documents (their Markdown heading or the parser's), by id:
    as the search loaded them with their chunks, else from the database."""
    titles = {r.doc_id: r.doc_title for r in references if r.doc_title is not None}
    missing = {r.doc_id for r in references} - titles.keys()
    rows = Document.objects.filter(pk__in=missing).values_list("pk", "metadata") if missing else []
    return titles | {pk: str((metadata or {}).get("title") or "") for pk, metadata in rows}


def evidence_for_part(evidence: Sequence[EvidenceItem], numbers: Sequence[int]) -> tuple[EvidenceItem, ...]:
    """The part's own passages, in the part's order, with the tool outputs and recalled facts
    every part may use where they stood.

    The part's order, not the evidence list's: its best passage may carry a later number (the
    first part's passages come first), and the reader weighs a passage by its place.
    """
    rank = {n: i for i, n in enumerate(numbers)}
    kept = [item for item in evidence if item.n in rank or item.source in ("TOOL", "MEMORY")]
    own = iter(sorted((item for item in kept if item.n in rank), key=lambda item: rank[item.n]))
    return tuple(next(own) if item.n in rank else item for item in kept)


def evidence_limit(options: ChatOptions, *, rerank: bool) -> int:
    """How many references reach the prompt: rerank_top_k of them after a rerank."""
    return min(options.top_k, options.rerank_top_k) if rerank else options.top_k


def chunk_urls(kb_slug: str) -> Callable[[Candidate], str]:
    """Links from a reference to its chunk on the document's page."""

    def url(candidate: Candidate) -> str:
        return reverse("document-detail", args=[kb_slug, candidate.doc_id]) + f"#chunk-{candidate.chunk_id}"

    return url


def number_evidence(
    references: Sequence[Candidate],
    tool_results: Sequence[ToolResult],
    *,
    limit: int,
    url_for: Callable[[Candidate], str] = lambda candidate: "",
) -> tuple[EvidenceItem, ...]:
    """Number KB references from 1, then the successful tool outputs after them.

    A reference the graph agent chose (it states a relation or sums up a community) keeps
    that label as its section, so the prompt and the reader see what it was chosen for.
    A web passage (a reference DeepSearch found on the web, or a page a tool read) is a WEB
    item linking to its page. A KB item carries its document's title, which frames every
    passage of the document for the reader.
    """
    items = [_reference_item(n, c, url_for) for n, c in enumerate(references[:limit], 1)]
    for result in (result for result in tool_results if result.ok):
        if result.sources:
            items += [
                EvidenceItem(len(items) + 1, "WEB", s.title or s.url, s.text, section=s.section, url=s.url)
                for s in result.sources
            ]
        else:
            items.append(EvidenceItem(len(items) + 1, "TOOL", result.name, result.output))
    return tuple(items)


def _reference_item(n: int, c: Candidate, url_for: Callable[[Candidate], str]) -> EvidenceItem:
    if c.metadata.get("web_url"):
        return EvidenceItem(n, "WEB", c.doc_name, c.text, section=c.section, score=float(c.score), url=c.metadata["web_url"])
    return EvidenceItem(
        n, "KB", c.doc_name, c.text, c.doc_id, c.chunk_id, c.metadata.get("graph") or c.section,
        float(c.score), url_for(c), graph=c.metadata.get("graph", ""), title=c.doc_title or "",
    )


# --- S8 streaming ----------------------------------------------------------------------------


def open_stream(prompt: Prompt, llm: Any, *, max_tokens: int) -> Any:
    """Start the model's answer (lazy: nothing is sent until it is iterated).

    The router's model providers already drop `<think>` blocks across chunks; filtering
    again here would also cut the extractive provider's verbatim quotes of documents
    that mention the tag. A router finishes an answer its model broke off with the
    extractive reader's, so the person gets an answer and not an error.
    """
    options = CompletionOptions(temperature=prompt.temperature, max_tokens=max_tokens)
    if isinstance(llm, ModelRouter):
        return llm.stream(list(prompt.messages), options, finish_with_fallback=True)
    return llm.stream(list(prompt.messages), options)


def split_reply(text: str, size: int = 24) -> list[str]:
    """Cut a ready-made reply into token-sized pieces, so it streams like an answer."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
