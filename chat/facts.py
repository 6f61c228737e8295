"""Semantic memory, part two: keep a user's stated facts, recall them when a question is about them.

After an exchange, a background task extracts the facts the user's message states
(chat.fact_extraction) and stores them per user: the same fact again updates its row, a
newer one about the same thing replaces it. A later question recalls the facts it shares
words with (in either language, through each fact's category words: "which database" finds
"PostgreSQL 15"), or whose embedding is close to it; they reach the prompt as data in their
own `<memory_facts>` block and are cited as MEMORY evidence. Nothing is cached between
requests: a deleted fact is never recalled again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse

from agentic_rag.embeddings import Embedder, embed_query_cached, get_embedder
from knowledge.analysis import analyze
from knowledge.fusion import expand_query

from .fact_extraction import CATEGORY_LABELS, StatedFact, extract_facts_with, relevance
from .models import MemoryEntry, Message, Role, UserFact

logger = logging.getLogger("chat.facts")

MEMORY_DOC = "memory"  # what a fact's evidence item is called in the prompt and the evidence panel


@dataclass(frozen=True)
class RecalledFact:
    fact_id: int
    text: str
    score: float
    stated_at: datetime
    about: str = ""  # its category in both languages ("database 数据库"), for the reader and the panel


# --- remember ----------------------------------------------------------------------------------


def remember_facts(answer: Message, *, llm: Any, embedder: Embedder | None = None) -> list[UserFact]:
    """Store the facts the user's message before `answer` states (safe to run twice)."""
    question = answer.conversation.messages.filter(role=Role.USER, id__lt=answer.pk).order_by("-id").first()
    if question is None:
        return []
    stated, method = extract_facts_with(question.content, llm=llm)
    if not stated:
        return []
    model = embedder or get_embedder()
    vectors = model.embed_passages([fact.text for fact in stated])
    user_id = answer.conversation.user_id
    kept = []
    for fact, vector in zip(stated, vectors, strict=True):
        saved = _store(user_id, fact, question, method=method, embedder=model.name, vector=vector)
        if saved is not None:
            kept.append(saved)
    trim_facts(user_id, settings.CHAT_FACTS_MAX)
    return kept


def _store(
    user_id: int, fact: StatedFact, source: Message, *, method: str, embedder: str, vector: Any
) -> UserFact | None:
    """Insert the fact, update the row of the same key, and drop the facts a move replaces."""
    values = {
        "text": fact.text, "category": fact.category, "terms": fact.recall_terms(), "method": method,
        "source_message": source, "embedder": embedder, "embedding": np.asarray(vector, dtype=np.float32),
    }
    try:
        with transaction.atomic():
            replaced = _drop_replaced(user_id, fact)
            existing = UserFact.objects.select_for_update().filter(user_id=user_id, key=fact.key).first()
            if existing is None:
                return UserFact.objects.create(user_id=user_id, key=fact.key, replaced=replaced[:300], **values)
            if _same(existing.text, fact.text):
                existing.times_stated += 1
            else:
                existing.replaced, existing.times_stated = existing.text, 1
            for name, value in values.items():
                setattr(existing, name, value)
            existing.save()
            return existing
    except IntegrityError:
        # The message was deleted while its facts were read, or the same fact was stored meanwhile.
        if not Message.objects.filter(pk=source.pk).exists():
            return None
        return UserFact.objects.filter(user_id=user_id, key=fact.key).first()


def _drop_replaced(user_id: int, fact: StatedFact) -> str:
    """Delete the facts a move replaces ("we moved to MySQL" replaces "we use PostgreSQL"); their text."""
    if not (fact.replaces_category and fact.category):
        return ""
    older = UserFact.objects.filter(user_id=user_id, category=fact.category, key__startswith=f"{fact.subject}|")
    older = older.exclude(key=fact.key)
    texts = list(older.values_list("text", flat=True))
    older.delete()
    return "; ".join(texts)


def _same(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def trim_facts(user_id: int, keep: int) -> int:
    """Keep the user's `keep` most recently stated facts; return how many older ones went."""
    stale = list(UserFact.objects.filter(user_id=user_id).values_list("pk", flat=True)[keep:])
    if not stale:
        return 0
    return UserFact.objects.filter(pk__in=stale).delete()[0]


# --- recall ------------------------------------------------------------------------------------


def recall_facts(
    user: Any,
    query: str,
    k: int | None = None,
    *,
    min_overlap: float | None = None,
    min_similarity: float | None = None,
    embedder: Embedder | None = None,
) -> list[RecalledFact]:
    """The user's own facts that `query` is about, best first: naming the fact's topic, sharing
    enough words with it (one of them more than a verb like "use"), or close by the embedder."""
    limit = settings.CHAT_FACT_K if k is None else k
    overlap_floor = settings.CHAT_FACT_MIN_OVERLAP if min_overlap is None else min_overlap
    cosine_floor = settings.CHAT_FACT_MIN_SIMILARITY if min_similarity is None else min_similarity
    rows = list(
        UserFact.objects.for_user(user).values_list(
            "pk", "text", "key", "category", "terms", "embedder", "embedding", "updated_at"
        )[: settings.CHAT_FACTS_MAX]
    )
    if not rows or limit <= 0:
        return []
    asked = question_terms(query)
    model = embedder or get_embedder()
    query_vector = embed_query_cached(model, query) if any(row[5] == model.name for row in rows) else None
    recalled = []
    for pk, text, key, category, terms, fact_embedder, vector, stated_at in rows:
        by_terms = relevance(asked, terms or (), key, category)
        close = _cosine(query_vector, vector) if query_vector is not None and fact_embedder == model.name else 0.0
        score = max(by_terms if by_terms >= overlap_floor else 0.0, close if close >= cosine_floor else 0.0)
        if score > 0:
            recalled.append(RecalledFact(pk, text, round(score, 4), stated_at, CATEGORY_LABELS.get(category, "")))
    return sorted(recalled, key=lambda fact: (-fact.score, -fact.fact_id))[:limit]


def question_terms(query: str) -> list[str]:
    """The question's terms with their translations ("数据库" asks about a "database" too)."""
    terms: list[str] = []
    for variant in expand_query(query, limit=2):
        terms.extend(analyze(variant))
    return list(dict.fromkeys(terms))


def _cosine(a: np.ndarray | None, b: np.ndarray | None) -> float:
    if a is None or b is None or a.shape != b.shape:
        return 0.0
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b)) / norm if norm else 0.0


def fact_evidence(recalled: Sequence[RecalledFact], first: int) -> tuple[Any, ...]:
    """The recalled facts as MEMORY evidence numbered from `first`, each linking to its row on the facts page."""
    # Imported here: the pipeline imports this module, and this one may load first (a task).
    from .pipeline.state import EvidenceItem

    page = reverse("chat-facts")
    return tuple(
        EvidenceItem(
            first + i, "MEMORY", MEMORY_DOC, fact.text, section=fact.about, score=fact.score,
            url=f"{page}#fact-{fact.fact_id}",
        )
        for i, fact in enumerate(recalled)
    )


# --- forget ------------------------------------------------------------------------------------


def forget_facts(facts: Any) -> int:
    """Delete these facts and the past exchanges that stated them (episodic memory would recall
    them otherwise); return how many facts went."""
    rows = list(facts.values_list("user_id", "text"))
    for user_id, text in rows:
        MemoryEntry.objects.filter(user_id=user_id, question__contains=text).delete()
    return facts.delete()[0] if rows else 0
