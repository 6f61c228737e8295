"""Answer-level evaluation: every golden question through the chat pipeline, as the API asks it.

Scores per question, then over the set:
- keyword pass: the answer holds every expected keyword (case aside);
- source pass: the answer cites a document the question's qrels call relevant;
- citation validity: the share of citations whose quote occurs in the cited chunk;
- route accuracy: the shortcut taken (none, A, B, C) is the one the question expects;
- unanswerable said so: for a question the documents cannot answer (category "unanswerable"),
  the answer says nothing was found (shortcut C, or a not-found answer quoting no passage);
  such questions count in no keyword or source figure;
- keyword pass by the question's language (en, zh) and over two-document questions (two or
  more documents at the highest grade, each holding part of the answer);
- latency p50/p95 of the whole run, after one warm-up question.
Each question runs in a fresh conversation, deleted afterwards; its trace is kept (its
conversation link set to null) so every failure links to what the pipeline did.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from django.urls import reverse

from agentic_rag.llm import get_llm
from chat.models import Conversation
from chat.pipeline import ChatOptions, ChatRequest, ChatResult, run_chat
from chat.pipeline.citations import verify_quote
from chat.pipeline.state import language_of
from knowledge.models import Chunk, KnowledgeBase

from .datasets import UNANSWERABLE
from .models import ANSWERS_MODE, EvaluationRun, GoldenQuestion, GoldenSet
from .runner import Progress, no_progress

ANSWER_METRICS = (
    "keyword_pass", "keywords_in_evidence", "source_pass", "source_recall", "citation_valid", "route_accuracy",
    "unanswerable_said_so", "keyword_pass_en", "keyword_pass_zh", "keyword_pass_two_doc",
)
# How an answer says the knowledge base does not answer: the extractive reader's "no evidence" and
# "no passage answers directly" (with or without the KB's name), a compound answer's part nothing
# answers, shortcut C's reply. Matched by their stable phrases, so rewording the rest of a
# sentence does not turn a refusal into an answer.
NOT_FOUND = re.compile(
    r"\b(?:not found|no evidence|none of (?:the|its) passages|nothing in the knowledge base)\b|没有找到|没有直接回答",
    re.IGNORECASE,
)

Ask = Callable[[str], ChatResult]


@dataclass(frozen=True)
class AnswerCase:
    qid: str
    question: str
    keywords: tuple[str | list[str], ...]  # a list: alternatives, any one will do
    relevant_docs: frozenset[int]  # documents with a positive grade
    expected_shortcut: str = ""  # "none", "A", "B", "C" or "" (not stated)
    category: str = ""
    needed_docs: frozenset[int] = frozenset()  # the highest grade: each holds part of the answer

    @property
    def unanswerable(self) -> bool:
        """The documents do not answer it: the answer should say so."""
        return self.category == UNANSWERABLE

    @property
    def language(self) -> str:
        return language_of(self.question)

    @property
    def two_doc(self) -> bool:
        """Its answer has parts in two or more documents."""
        return len(self.needed_docs) >= 2


@dataclass
class AnswerOutcome:
    qid: str
    question: str
    answer: str
    trace_id: str
    ms: float
    shortcut: str  # "none" or the letter
    keyword_pass: bool | None  # None: the question states no keyword
    # Whether the evidence the generator was given held every expected keyword: what retrieval
    # left the answer to find. keyword_pass can only be higher where a tool or memory supplied it.
    keywords_in_evidence: bool | None
    source_pass: bool | None  # None: no relevant document (a "not found" question)
    source_recall: float | None  # share of the needed documents cited
    citations: int
    citations_valid: int
    route_ok: bool | None  # None: no expected shortcut stated
    said_not_found: bool | None = None  # None: the question is answerable
    language: str = ""  # "en" or "zh": the question's
    two_doc: bool = False
    why: list[str] = field(default_factory=list)
    category: str = ""  # the golden question's ("number", "table", "unanswerable" …)

    @property
    def passed(self) -> bool:
        return not self.why


@dataclass
class AnswerEvaluation:
    outcomes: list[AnswerOutcome]
    metrics: dict[str, float | None]
    latency_ms: dict[str, float]
    config: dict[str, Any]

    def failures(self) -> list[dict[str, Any]]:
        return [
            {"qid": o.qid, "question": o.question, "trace_id": o.trace_id, "trace_url": trace_url(o.trace_id),
             "why": "; ".join(o.why), "answer": o.answer}
            for o in self.outcomes if not o.passed
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "questions": len(self.outcomes),
            "metrics": self.metrics,
            "latency_ms": self.latency_ms,
            "failures": self.failures(),
            "config": self.config,
        }


def load_answer_cases(kb: KnowledgeBase, *, golden_set: str | None = None, split: str = "all") -> list[AnswerCase]:
    """The KB's golden questions that state something an answer can be scored on."""
    sets = GoldenSet.objects.filter(kb=kb)
    if golden_set is not None:
        sets = sets.filter(name=golden_set)
    questions = GoldenQuestion.objects.filter(golden_set__in=sets).prefetch_related("qrels").order_by("pk")
    if split != "all":
        questions = questions.filter(split=split)
    cases = [
        AnswerCase(
            q.qid, q.text, tuple(q.expected_keywords or ()),
            frozenset(r.document_id for r in q.qrels.all() if r.relevance > 0),
            q.expected_shortcut, q.category, _needed(q.qrels.all()),
        )
        for q in questions
    ]
    return [c for c in cases if c.keywords or c.relevant_docs or c.expected_shortcut or c.unanswerable]


def _needed(qrels) -> frozenset[int]:
    grades = [r.relevance for r in qrels if r.relevance > 0]
    return frozenset(r.document_id for r in qrels if grades and r.relevance == max(grades))


def run_options(kb: KnowledgeBase, agent_type: str) -> ChatOptions:
    """The chat options of a run's questions. No recall of the asker's other conversations: a run
    measures the KB, not who started it, and its answers are shown to every reader of the KB, who
    must not get what the asker said in KBs only they may read (nor the run's earlier answers)."""
    return ChatOptions(kb_slug=kb.slug, agent_type=agent_type, recall_memory=False)


def chat_asker(
    kb: KnowledgeBase, user: Any, *, llm: Any = None, conversations: list[int], agent_type: str = "auto"
) -> Ask:
    """Ask like the API: a fresh session per question, the KB named, the options of run_options."""

    def ask(question: str) -> ChatResult:
        request = ChatRequest(user, None, question, run_options(kb, agent_type))
        result = run_chat(request, emit=lambda event: None, llm=llm)
        conversations.append(result.conversation_id)
        return result

    return ask


def ask_through_chat(
    kb: KnowledgeBase, user: Any, cases: Sequence[AnswerCase], *, agent_type: str = "auto",
    on_progress: Progress = no_progress,
) -> AnswerEvaluation:
    """Ask the cases through the chat as user, with the configured models, and score them;
    the conversations the questions opened are removed afterwards (their traces stay)."""
    llm = get_llm()
    conversations: list[int] = []
    try:
        return evaluate_answers(
            cases, chat_asker(kb, user, llm=llm, conversations=conversations, agent_type=agent_type),
            chunk_text=chunk_text_from_db, config=answer_config(kb, llm, agent_type), on_progress=on_progress,
            next_text=next_chunk_text_from_db,
        )
    finally:
        delete_conversations(conversations)


def evaluate_answers(
    cases: Sequence[AnswerCase], ask: Ask, *, chunk_text: Callable[[int], str], config: dict[str, Any],
    on_progress: Progress = no_progress, next_text: Callable[[int], str] = lambda chunk_id: "",
) -> AnswerEvaluation:
    """Ask every case (after one warm-up) and score the answers."""
    if cases:
        ask(cases[0].question)  # warm-up: indexes, dictionaries, the embedder
    outcomes = []
    for case in cases:
        started = time.perf_counter()
        result = ask(case.question)
        ms = (time.perf_counter() - started) * 1000
        outcomes.append(score_answer(case, result, ms, chunk_text, next_text))
        on_progress(len(outcomes), len(cases))
    return AnswerEvaluation(outcomes, summarise(outcomes), _latency([o.ms for o in outcomes]), config)


def score_answer(
    case: AnswerCase, result: ChatResult, ms: float, chunk_text: Callable[[int], str],
    next_text: Callable[[int], str] = lambda chunk_id: "",
) -> AnswerOutcome:
    """Score one answer against its golden case.

    What a passage showed is read from the database: the chunk, as much of it as the gate's
    budget let through, and, when the evidence showed more than the chunk holds (the gate's
    context window completed a chunk cut off mid-thought), the start of the next chunk.
    """
    scored = not case.unanswerable  # an unanswerable question has no keywords or sources to hold
    missing = _missing(case.keywords, result.answer) if scored else []

    def shown(evidence: dict[str, Any]) -> str:
        chunk_id, chars = int(evidence["chunk_id"]), evidence.get("chars")
        text = chunk_text(chunk_id)
        if chars and chars > len(text):
            text = f"{text}\n{next_text(chunk_id)}"
        return text[:chars]

    # The generator reads each passage under its section title, which may hold the answer.
    shown_text = "\n".join(f"{e.get('section', '')}\n{shown(e)}" for e in result.evidence if e.get("chunk_id"))
    missing_in_evidence = _missing(case.keywords, shown_text)
    cited_docs = {c.get("doc_id") for c in result.evidence if _is_cited(c, result.citations)}
    # Citations of KB chunks: a tool's output is not a chunk to look the quote up in.
    kb_citations = [c for c in result.citations if c.get("chunk_id")]
    by_n = {e.get("n"): e for e in result.evidence if e.get("chunk_id")}
    valid = sum(
        verify_quote(str(c.get("quote", "")), shown(by_n.get(c.get("n")) or c))[0] for c in kb_citations
    )
    shortcut = result.shortcut or "none"
    outcome = AnswerOutcome(
        case.qid, case.question, result.answer, result.trace_id, ms, shortcut,
        keyword_pass=(not missing) if case.keywords and scored else None,
        keywords_in_evidence=(not missing_in_evidence) if case.keywords and scored else None,
        source_pass=bool(cited_docs & case.relevant_docs) if case.relevant_docs and scored else None,
        source_recall=(
            len(cited_docs & case.needed_docs) / len(case.needed_docs) if case.needed_docs and scored else None
        ),
        citations=len(kb_citations), citations_valid=valid,
        route_ok=(shortcut == case.expected_shortcut) if case.expected_shortcut else None,
        said_not_found=says_not_found(result) if case.unanswerable else None,
        language=case.language, two_doc=case.two_doc, category=case.category,
    )
    if outcome.said_not_found is False:
        outcome.why.append("answered a question the documents do not answer")
    if missing:
        # As for sources below: retrieval never showed them, or the answer left them out.
        unseen = [k for k in missing if k in missing_in_evidence]
        outcome.why.append(f"missing keywords {missing}" + (f" ({unseen} not in the evidence)" if unseen else ""))
    if outcome.source_pass is False:
        shown = {e.get("doc_id") for e in result.evidence} & case.relevant_docs
        # Which stage to look at: retrieval found nothing relevant, or the answer left it out.
        outcome.why.append("no relevant document cited" + ("" if shown else " (none in the evidence)"))
    if outcome.route_ok is False:
        outcome.why.append(f"shortcut {shortcut}, expected {case.expected_shortcut}")
    if valid < outcome.citations:
        outcome.why.append(f"{outcome.citations - valid} citation(s) not found in their chunk")
    return outcome


def says_not_found(result: ChatResult) -> bool:
    """Whether the answer says the knowledge base does not answer the question: shortcut C (no
    passage passed the gate), or an answer that cites no passage and says nothing answers (an
    answer quoting a passage answers, whatever else it says)."""
    if result.shortcut == "C":
        return True
    if any(c.get("chunk_id") for c in result.citations):
        return False
    return NOT_FOUND.search(result.answer) is not None


def summarise(outcomes: Sequence[AnswerOutcome]) -> dict[str, float | None]:
    """The rates over the questions each applies to (None when it applies to none)."""
    citations = sum(o.citations for o in outcomes)
    return {
        "keyword_pass": _rate([o.keyword_pass for o in outcomes]),
        "keywords_in_evidence": _rate([o.keywords_in_evidence for o in outcomes]),
        "source_pass": _rate([o.source_pass for o in outcomes]),
        "source_recall": _mean([o.source_recall for o in outcomes]),
        "citation_valid": round(sum(o.citations_valid for o in outcomes) / citations, 4) if citations else None,
        "route_accuracy": _rate([o.route_ok for o in outcomes]),
        "unanswerable_said_so": _rate([o.said_not_found for o in outcomes]),
        "keyword_pass_en": _rate([o.keyword_pass for o in outcomes if o.language == "en"]),
        "keyword_pass_zh": _rate([o.keyword_pass for o in outcomes if o.language == "zh"]),
        "keyword_pass_two_doc": _rate([o.keyword_pass for o in outcomes if o.two_doc]),
    }


def by_category(outcomes: Sequence[AnswerOutcome]) -> dict[str, tuple[float | None, float | None, int]]:
    """Per question category: keyword pass, keywords in the evidence, and how many questions
    state keywords. Where the two rates part, the reader missed what retrieval found."""
    categories = sorted({o.category or "-" for o in outcomes if o.keyword_pass is not None})
    rows = {}
    for category in categories:
        mine = [o for o in outcomes if (o.category or "-") == category and o.keyword_pass is not None]
        rows[category] = (_rate([o.keyword_pass for o in mine]), _rate([o.keywords_in_evidence for o in mine]), len(mine))
    return rows


def metric_counts(outcomes: Sequence[AnswerOutcome]) -> dict[str, int]:
    """How many questions each rate of `summarise` is taken over."""
    def scored(values) -> int:
        return sum(v is not None for v in values)

    return {
        "keyword_pass": scored(o.keyword_pass for o in outcomes),
        "keywords_in_evidence": scored(o.keywords_in_evidence for o in outcomes),
        "source_pass": scored(o.source_pass for o in outcomes),
        "source_recall": scored(o.source_recall for o in outcomes),
        "citation_valid": sum(o.citations for o in outcomes),
        "route_accuracy": scored(o.route_ok for o in outcomes),
        "unanswerable_said_so": scored(o.said_not_found for o in outcomes),
        "keyword_pass_en": scored(o.keyword_pass for o in outcomes if o.language == "en"),
        "keyword_pass_zh": scored(o.keyword_pass for o in outcomes if o.language == "zh"),
        "keyword_pass_two_doc": scored(o.keyword_pass for o in outcomes if o.two_doc),
    }


def save_answer_run(kb: KnowledgeBase, evaluation: AnswerEvaluation, *, golden_set: GoldenSet | None, split: str) -> EvaluationRun:
    """Store the run with its configuration snapshot and every question's outcome."""
    return EvaluationRun.objects.create(kb=kb, golden_set=golden_set, split=split, **answer_run_fields(evaluation))


def answer_run_fields(evaluation: AnswerEvaluation) -> dict[str, Any]:
    """The EvaluationRun fields that hold an answer evaluation's results."""
    return {
        "mode": ANSWERS_MODE, "questions": len(evaluation.outcomes),
        "params": evaluation.config,
        "metrics": {k: v for k, v in evaluation.metrics.items() if v is not None},
        "qps": round(len(evaluation.outcomes) / (sum(o.ms for o in evaluation.outcomes) / 1000), 3) if evaluation.outcomes else 0.0,
        "latency": evaluation.latency_ms,
        "per_question": {o.qid: {k: v for k, v in asdict(o).items() if k not in ("qid",)} for o in evaluation.outcomes},
    }


def delete_conversations(ids: Sequence[int]) -> None:
    """Remove the evaluation's conversations; their traces stay, for the failures' links."""
    Conversation.objects.filter(pk__in=ids).delete()


def chunk_text_from_db(chunk_id: int) -> str:
    return Chunk.objects.filter(pk=chunk_id).values_list("text", flat=True).first() or ""


def next_chunk_text_from_db(chunk_id: int) -> str:
    """The text of the chunk after this one in its document (same version and level), or ""."""
    chunk = Chunk.objects.filter(pk=chunk_id).values("document_id", "version", "level", "index").first()
    if chunk is None:
        return ""
    following = Chunk.objects.filter(
        document_id=chunk["document_id"], version=chunk["version"], level=chunk["level"], index=chunk["index"] + 1
    )
    return following.values_list("text", flat=True).first() or ""


def _missing(keywords: Sequence[str | list[str]], text: str) -> list[str | list[str]]:
    """The keywords (each a string or a list of alternatives) that text does not hold."""
    folded = text.casefold()
    return [k for k in keywords if not any(a.casefold() in folded for a in _alternatives(k))]


def _alternatives(keyword: str | list[str]) -> list[str]:
    return keyword if isinstance(keyword, list) else [keyword]


def _is_cited(evidence: dict[str, Any], citations: Sequence[dict[str, Any]]) -> bool:
    return any(c.get("chunk_id") == evidence.get("chunk_id") for c in citations if c.get("chunk_id"))


def _rate(values: Sequence[bool | None]) -> float | None:
    scored = [v for v in values if v is not None]
    return round(sum(scored) / len(scored), 4) if scored else None


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 4) if known else None


def _latency(ms: Sequence[float]) -> dict[str, float]:
    if not ms:
        return {"p50": 0.0, "p95": 0.0}
    ordered = sorted(ms)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"p50": round(statistics.median(ordered), 1), "p95": round(p95, 1)}


def trace_url(trace_id: str) -> str:
    return reverse("trace-detail", args=[trace_id]) if trace_id else ""


def answer_config(kb: KnowledgeBase, llm: Any, agent_type: str = "auto") -> dict[str, Any]:
    """What the answers depend on, stored with the run: generator, embedder, retrieval settings."""
    from knowledge.retrieval import params_for_kb

    from .runner import params_snapshot

    providers = [f"{p.name}:{getattr(p, 'model', '')}" for p in getattr(llm, "providers", ())]
    return {
        "generator": " → ".join([*providers, "extractive"]),
        "embedder": kb.embedder or "",
        "retrieval": params_snapshot(params_for_kb(kb)),
        "chat": asdict(run_options(kb, agent_type)),
    }
