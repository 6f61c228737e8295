"""Pick the knowledge base a question goes to.

A requested KB wins; otherwise, with KB_AUTO_ROUTE on, each KB the user may read is
scored by its profile (description, top terms of its chunks, embedding centroid) and the
best one above KB_ROUTE_MIN_SCORE is routed to. Anything else is "general": no retrieval.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from django.conf import settings

from agentic_rag.embeddings import Embedder, embed_query_cached, get_embedder
from knowledge.analysis import analyze
from knowledge.models import Chunk, KnowledgeBase
from knowledge.search import live_entries

logger = logging.getLogger("chat.routing")

AGENT_MODE = "retrieve_only"
GENERAL = "general"
DEFAULT_KB = "default"
DEFAULT_AGENT = "hybrid_agent"
PROFILE_TERMS = 2000
PROFILE_CHUNKS = 1000
# Embedders give unrelated texts a floor of similarity (e5: ~0.75); a question about nothing
# in particular measures each KB's floor, so cosines of different embedders compare.
BASELINE_PROBE = "What is this about?"
TERM_WEIGHT = 0.6

EmbedderFor = Callable[[str], Embedder]


class InvalidWorkerName(ValueError):
    """A worker_name that is not `{kb}:{agent_type}:{mode}` (or an older form of it)."""


@dataclass(frozen=True)
class WorkerSpec:
    kb_prefix: str
    agent_type: str
    agent_mode: str = AGENT_MODE


@dataclass(frozen=True)
class RouteDecision:
    requested_kb_prefix: str
    routed_kb_prefix: str
    kb_prefix: str  # the KB searched; "general" (or "") searches none
    confidence: float
    method: str  # "requested" | "auto" | "disabled" | "none"
    reason: str
    worker_name: str  # `{kb}:{agent_type}:{mode}`, shown in the route event and the trace
    agent_type: str = DEFAULT_AGENT  # the worker type the message goes to
    ranked: tuple[tuple[str, float], ...] = ()  # each readable KB's score, best first, when it routed by content

    @property
    def is_general(self) -> bool:
        return self.kb_prefix in ("", GENERAL)

    def as_event(self) -> dict[str, Any]:
        return {
            "kb_prefix": "" if self.is_general else self.kb_prefix,
            "requested_kb_prefix": self.requested_kb_prefix,
            "routed_kb_prefix": self.routed_kb_prefix,
            "confidence": round(self.confidence, 4),
            "method": self.method,
            "reason": self.reason,
            "worker_name": self.worker_name,
        }


def parse_worker_name(name: str | None) -> WorkerSpec:
    """Read a worker_name: "", "agent_type", "kb:agent_type" or "kb:agent_type:agent_mode"."""
    raw = (name or "").strip()
    if not raw:
        return WorkerSpec("", "", AGENT_MODE)
    parts = [part.strip() for part in raw.split(":")]
    if len(parts) == 1:
        return WorkerSpec("", parts[0], AGENT_MODE)
    if len(parts) == 2:
        return WorkerSpec(parts[0], parts[1], AGENT_MODE)
    if len(parts) == 3:
        mode = parts[2] or AGENT_MODE
        if mode != AGENT_MODE:
            raise InvalidWorkerName(f"unsupported agent_mode in worker_name: {name}")
        return WorkerSpec(parts[0], parts[1], mode)
    raise InvalidWorkerName(f"invalid worker_name format: {name}")


def format_worker_name(kb: str | None, agent_type: str = DEFAULT_AGENT, mode: str = AGENT_MODE) -> str:
    """The three-part worker_name; "" for the general (no retrieval) path."""
    kb_prefix = (kb or "").strip()
    if kb_prefix == GENERAL:
        return ""
    if (mode or AGENT_MODE) != AGENT_MODE:
        raise InvalidWorkerName(f"unsupported agent_mode: {mode}")
    return f"{kb_prefix or DEFAULT_KB}:{(agent_type or '').strip() or DEFAULT_AGENT}:{AGENT_MODE}"


# --- KB profiles ----------------------------------------------------------------------------


@dataclass(frozen=True)
class KbProfile:
    slug: str
    terms: dict[str, float]  # term -> weight, the heaviest first
    centroid: np.ndarray | None  # L2-normalised mean of the KB's child vectors
    embedder: str
    baseline: float = 0.0  # the centroid's cosine with BASELINE_PROBE


_profiles: dict[tuple[Any, ...], KbProfile] = {}
_profiles_lock = threading.Lock()


def kb_profile(kb: KnowledgeBase, embedder_for: EmbedderFor | None = None) -> KbProfile:
    """The KB's routing profile, built once per content_version and embedder."""
    # updated_at too: a renamed or re-described KB gets a new profile.
    key = (kb.pk, kb.content_version, kb.embedder, kb.updated_at)
    with _profiles_lock:
        found = _profiles.get(key)
    if found is None:
        found = build_profile(kb, embedder_for or get_embedder)
        with _profiles_lock:
            _profiles[key] = found
    return found


def clear_profiles() -> None:
    with _profiles_lock:
        _profiles.clear()


def build_profile(kb: KnowledgeBase, embedder_for: EmbedderFor) -> KbProfile:
    """Top terms of the KB's name, description, chunk tags and tokens; the centroid of its vectors."""
    rows = list(
        live_entries(kb).filter(level=Chunk.CHILD).values_list("embedding", "tokens", "chunk__tags")[:PROFILE_CHUNKS]
    )
    counts: Counter[str] = Counter()
    for _, tokens, tags in rows:
        counts.update(set((tokens or "").split()))
        counts.update(set(analyze(" ".join(str(tag) for tag in tags or []))))
    described = Counter(analyze(f"{kb.name} {kb.description}"))
    for term in described:
        counts[term] += max(3, len(rows) // 2)  # the owner's own words weigh like common terms
    top = counts.most_common(PROFILE_TERMS)
    # Log-scaled, so a term in a few chunks of a big KB still counts.
    heaviest = math.log1p(top[0][1]) if top else 1.0
    terms = {term: math.log1p(count) / heaviest for term, count in top}
    centroid = _centroid([row[0] for row in rows])
    baseline = 0.0
    if centroid is not None and kb.embedder:
        probe = _embed(BASELINE_PROBE, kb.embedder, embedder_for)
        baseline = _cosine(probe, centroid)
    return KbProfile(kb.slug, terms, centroid, kb.embedder, baseline)


def _centroid(vectors: Iterable[Any]) -> np.ndarray | None:
    usable = [np.asarray(v, dtype=np.float32) for v in vectors if v is not None]
    if not usable or len({v.shape for v in usable}) != 1:
        return None
    mean = np.mean(usable, axis=0)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm else None


def score_profile(query_terms: set[str], query_vector: np.ndarray | None, profile: KbProfile) -> float:
    """Term overlap (weighted share of the query's terms) and cosine to the centroid above its floor."""
    overlap = sum(profile.terms.get(term, 0.0) for term in query_terms) / max(len(query_terms), 1)
    cosine = _cosine(query_vector, profile.centroid)
    floor = min(max(profile.baseline, 0.0), 0.99)
    lift = max(0.0, (cosine - floor) / (1.0 - floor))
    return TERM_WEIGHT * min(overlap, 1.0) + (1 - TERM_WEIGHT) * lift


def _cosine(a: np.ndarray | None, b: np.ndarray | None) -> float:
    if a is None or b is None or a.shape != b.shape:
        return 0.0
    return float(np.dot(a, b))


# --- routing ------------------------------------------------------------------------------


# Questions about how things relate, or about the themes of a field: the graph's questions.
_PATH = re.compile(
    r"(?i)(?:和|与|跟).{1,30}(?:的)?(?:关系|区别|联系)|之间|relat(?:e|ed|ion|ionship)s? (?:to|between|with)"
    r"|between .{1,40} and |how does .{1,40} (?:affect|lead to|depend on|connect to)"
)
_GLOBAL = re.compile(
    r"(?i)有哪些(?:方向|主题|领域|方面|部分|组件)|哪些方向|主要(?:主题|方向)|what (?:themes|topics|directions|areas|components)"
    r"|which (?:themes|topics|directions|areas|components)|overview of|main (?:themes|topics|parts)"
)
_LOCAL = re.compile(
    r"(?i)依赖(?:什么|哪些)|使用(?:了)?(?:什么|哪些)|包含(?:什么|哪些)|被.{0,10}(?:使用|依赖)"
    r"|what does .{1,40} (?:depend on|use|include|contain|support|replace|extend)|what (?:uses|depends on)"
)


def graph_question(text: str) -> str:
    """"path", "global" or "local" for a relation-style question, "" for any other."""
    if _PATH.search(text):
        return "path"
    if _GLOBAL.search(text):
        return "global"
    if _LOCAL.search(text):
        return "local"
    return ""


def auto_agent(message: str) -> str:
    """The worker type "auto" means for this message: graph_agent for the graph's questions."""
    return "graph_agent" if graph_question(message) else DEFAULT_AGENT


def route(
    user: Any,
    message: str,
    *,
    requested_kb: str | None = None,
    agent_type: str = DEFAULT_AGENT,
    embedder_for: EmbedderFor | None = None,
) -> RouteDecision:
    """Decide which KB (and worker) answers `message` for `user`."""
    requested = (requested_kb or "").strip()
    agent_type = auto_agent(message) if agent_type in ("", "auto") else agent_type
    if requested and requested != "auto":
        return _decision(requested, "", requested, 1.0, "requested", "chosen in the request", agent_type)
    if not settings.KB_AUTO_ROUTE:
        return _decision("", "", GENERAL, 0.0, "disabled", "automatic routing is off (KB_AUTO_ROUTE)", agent_type)
    try:
        scores = score_kbs(user, message, embedder_for=embedder_for or get_embedder)
    except Exception as error:  # an embedder that is down must not stop the chat
        logger.warning("routing by content failed, taking the general path: %s", error, exc_info=True)
        return _decision("", "", GENERAL, 0.0, "failed", f"routing failed: {error}", agent_type)
    if not scores:
        return _decision("", "", GENERAL, 0.0, "none", "no knowledge base you can read", agent_type)
    (best, score), runner_up = scores[0], (scores[1][1] if len(scores) > 1 else 0.0)
    if score < settings.KB_ROUTE_MIN_SCORE:
        reason = f"best match {best} scored {score:.2f} < {settings.KB_ROUTE_MIN_SCORE:.2f}"
        return _decision("", best, GENERAL, score, "auto", reason, agent_type)
    reason = f"content match {score:.2f} (next {runner_up:.2f}) over {len(scores)} KBs"
    return replace(_decision("", best, best, score, "auto", reason, agent_type), ranked=tuple(scores))


def score_kbs(user: Any, message: str, *, embedder_for: EmbedderFor) -> list[tuple[str, float]]:
    """Each readable KB's slug and score for the message, best first."""
    query_terms = set(analyze(message))
    vectors: dict[str, np.ndarray | None] = {}
    scores = []
    for kb in KnowledgeBase.objects.readable_by(user).order_by("slug"):
        profile = kb_profile(kb, embedder_for)
        if profile.embedder not in vectors:
            vectors[profile.embedder] = _embed(message, profile.embedder, embedder_for)
        scores.append((kb.slug, score_profile(query_terms, vectors[profile.embedder], profile)))
    return sorted(scores, key=lambda pair: -pair[1])


def _embed(message: str, name: str, embedder_for: EmbedderFor) -> np.ndarray | None:
    if not name:
        return None
    vector = embed_query_cached(embedder_for(name), message)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else None


def _decision(requested, routed, kb_prefix, confidence, method, reason, agent_type) -> RouteDecision:
    worker = format_worker_name(kb_prefix, agent_type)
    chosen = (agent_type or "").strip() or DEFAULT_AGENT
    return RouteDecision(requested, routed, kb_prefix, float(confidence), method, reason, worker, chosen)
