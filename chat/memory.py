"""Conversation memory: a rolling summary of old turns and episodic recall of past answers.

Past CHAT_SUMMARY_TURNS unsummarised turns, the oldest CHAT_SUMMARY_SHARE of them are
folded into the conversation's summary (by the LLM when one is configured, else by key
sentences) and the rest stay verbatim. Every answered exchange is also embedded, so a
later question of the same user can recall it (`memory_retrieve`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings
from django.db import IntegrityError

from agentic_rag.embeddings import Embedder, embed_query_cached, get_embedder
from agentic_rag.llm import CompletionOptions, ExtractiveProvider, LLMError
from agentic_rag.llm import Message as LLMMessage
from knowledge.analysis import analyze

from .models import Conversation, ConversationSummary, MemoryEntry, Message, Role

logger = logging.getLogger("chat.memory")

_SENTENCE = re.compile(r"(?<=[.!?。！？])\s*")
# Not from inside a run of spaces: from each of its characters "\s*" would read the run again.
_CITATION = re.compile(r"(?:(?<!\s)|(?!\s))\s*+\[\d+\]")
SUMMARY_CHARS = 4000
SUMMARY_PROMPT = (
    "Summarise the earlier part of this conversation in a few sentences, in its language, "
    'as "the user asked about X; the conclusion was Y". Keep names, numbers and decisions. '
    "Fold in the earlier summary if there is one."
)


@dataclass(frozen=True)
class PastTurn:
    """One exchange: the question and its answer ("" when none was stored)."""

    question: str
    answer: str
    last_message_id: int


@dataclass(frozen=True)
class Recalled:
    question: str
    answer: str
    similarity: float


# --- summary --------------------------------------------------------------------------------


def summary_of(conversation: Conversation) -> ConversationSummary | None:
    """The conversation's summary; one whose messages were cleared is dropped with them."""
    summary = ConversationSummary.objects.filter(conversation=conversation).first()
    if summary is not None and not conversation.messages.filter(id__lte=summary.until_message_id).exists():
        summary.delete()
        return None
    return summary


def unsummarised_turns(conversation: Conversation, after_id: int = 0) -> list[PastTurn]:
    """The exchanges after message `after_id`, oldest first."""
    rows = conversation.messages.filter(id__gt=after_id).order_by("created_at", "id").values_list("id", "role", "content")
    turns: list[PastTurn] = []
    for message_id, role, content in rows:
        if role == Role.USER or not turns or turns[-1].answer:
            turns.append(PastTurn(content if role == Role.USER else "", "" if role == Role.USER else content, message_id))
        else:
            turns[-1] = PastTurn(turns[-1].question, content, message_id)
    return turns


def split_for_summary(turns: Sequence[PastTurn], *, threshold: int, share: float) -> tuple[list[PastTurn], list[PastTurn]]:
    """(the oldest `share` to summarise, the rest kept verbatim) once there are more than `threshold`."""
    if len(turns) <= threshold:
        return [], list(turns)
    cut = int(len(turns) * share)
    return list(turns[:cut]), list(turns[cut:])


def needs_summary(conversation: Conversation) -> bool:
    summary = summary_of(conversation)
    after = summary.until_message_id if summary else 0
    asked = conversation.messages.filter(id__gt=after, role=Role.USER).count()
    return asked > settings.CHAT_SUMMARY_TURNS


def summarise_conversation(conversation: Conversation, *, llm: Any) -> ConversationSummary | None:
    """Fold the oldest unsummarised turns into the summary when there are too many."""
    summary = summary_of(conversation)
    previous = summary.text if summary else ""
    turns = unsummarised_turns(conversation, summary.until_message_id if summary else 0)
    old, _ = split_for_summary(turns, threshold=settings.CHAT_SUMMARY_TURNS, share=settings.CHAT_SUMMARY_SHARE)
    if not old:
        return summary
    text, method = summarise_turns(previous, old, llm=llm)
    summary, _ = ConversationSummary.objects.update_or_create(
        conversation=conversation,
        defaults={
            "text": text[:SUMMARY_CHARS],
            "until_message_id": old[-1].last_message_id,
            "turns": (summary.turns if summary else 0) + len(old),
            "method": method,
        },
    )
    return summary


def summarise_turns(previous: str, turns: Sequence[PastTurn], *, llm: Any) -> tuple[str, str]:
    """The new summary and how it was made ("llm" or "extractive")."""
    if getattr(llm, "has_model", False):
        try:
            return _llm_summary(previous, turns, llm), "llm"
        except LLMError as error:
            logger.warning("summary by LLM failed, extracting key sentences: %s", error)
    return extractive_summary(previous, turns), "extractive"


def _llm_summary(previous: str, turns: Sequence[PastTurn], llm: Any) -> str:
    transcript = "\n".join(f"user: {t.question[:500]}\nassistant: {t.answer[:800]}" for t in turns)
    earlier = f"Earlier summary: {previous}\n\n" if previous else ""
    messages = [LLMMessage("system", SUMMARY_PROMPT), LLMMessage("user", f"{earlier}Conversation:\n{transcript}")]
    completion = llm.complete(messages, CompletionOptions(temperature=0.3, max_tokens=400))
    if completion.provider == ExtractiveProvider.name:  # the model failed: quotes are no summary
        raise LLMError(f"no model answered: {[attempt.error for attempt in completion.attempts]}")
    text = completion.text.strip()
    if not text:
        raise LLMError("empty summary")
    return text


def extractive_summary(previous: str, turns: Sequence[PastTurn]) -> str:
    """Each turn as its question and the answer's sentence sharing most terms with it."""
    lines = [previous] if previous else []
    for turn in turns:
        question = _first_sentence(turn.question)
        answer = key_sentence(turn.answer, turn.question)
        lines.append(f"The user asked: {question}" + (f" Answer: {answer}" if answer else ""))
    return "\n".join(lines)


def key_sentence(text: str, question: str) -> str:
    """The sentence of `text` that shares most terms with `question` (the first on a tie)."""
    sentences = [s.strip() for s in _SENTENCE.split(_CITATION.sub("", text)) if s.strip()]
    if not sentences:
        return ""
    asked = set(analyze(question))
    return max(sentences, key=lambda s: len(asked & set(analyze(s))))


def _first_sentence(text: str) -> str:
    return next((s.strip() for s in _SENTENCE.split(text) if s.strip()), "")[:300]


# --- episodic memory ----------------------------------------------------------------------


def remember_exchange(answer: Message, *, embedder: Embedder | None = None) -> MemoryEntry | None:
    """Store an answered exchange with its embedding; once per answer."""
    question = answer.conversation.messages.filter(role=Role.USER, id__lt=answer.pk).order_by("-id").first()
    if question is None or not answer.content.strip():
        return None
    model = embedder or get_embedder()
    vector = np.asarray(model.embed_passages([f"{question.content}\n{answer.content}"])[0], dtype=np.float32)
    try:
        entry, _ = MemoryEntry.objects.get_or_create(
            message=answer,
            defaults={
                "user_id": answer.conversation.user_id, "question": question.content, "answer": answer.content,
                "embedder": model.name, "embedding": vector,
            },
        )
    except IntegrityError:
        # The conversation was deleted while the exchange was embedded: nothing to remember.
        if Message.objects.filter(pk=answer.pk).exists():
            raise
        return None
    return entry


def memory_retrieve(
    user: Any,
    query: str,
    k: int = 3,
    *,
    min_similarity: float | None = None,
    exclude_conversation: int | None = None,
    embedder: Embedder | None = None,
) -> list[Recalled]:
    """The user's own past exchanges most similar to `query`, above the threshold, best first."""
    threshold = settings.CHAT_MEMORY_MIN_SIMILARITY if min_similarity is None else min_similarity
    model = embedder or get_embedder()
    entries = MemoryEntry.objects.for_user(user).filter(embedder=model.name)
    if exclude_conversation is not None:
        entries = entries.exclude(message__conversation_id=exclude_conversation)
    rows = list(entries.values_list("question", "answer", "embedding")[: settings.CHAT_MEMORY_SCAN])
    if not rows or k <= 0:
        return []
    query_vector = embed_query_cached(model, query)
    recalled = [Recalled(q, a, _cosine(query_vector, v)) for q, a, v in rows if v is not None]
    recalled = [r for r in recalled if r.similarity >= threshold]
    return sorted(recalled, key=lambda r: -r.similarity)[:k]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return 0.0
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b)) / norm if norm else 0.0


def memory_block(summary: str, recalled: Sequence[Recalled]) -> str:
    """The summary and the recalled exchanges as one text for rewrite and the prompt."""
    parts = [f"Earlier in this conversation: {summary}"] if summary else []
    parts += [f"From an earlier conversation: Q: {r.question[:300]} A: {r.answer[:500]}" for r in recalled]
    return "\n".join(parts)
