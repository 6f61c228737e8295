"""Link a mention to a known entity or declare it new, in three stages.

1. String recall: exact 1.0, abbreviation 0.9 ("SCP" = StreamChatPipeline), containment 0.8,
   Jaccard of character sets, 1 − Levenshtein / max length; candidates at or above
   `recall_threshold` (0.3) go on.
2. Vector rerank: the cosine of the name vectors; at or above `vector_threshold` (0.75) the
   vector agrees and the combined score is the mean of both, below it the string score alone
   counts half. An abbreviation keeps its string score: its letters are not its name's.
3. NIL: a best combined score below `nil_threshold` (0.5) makes the mention a new entity.

Candidates come from a character-bigram index over the known keys, so a mention is compared
with the few entities that share letters with it, never with the whole graph.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .extraction import normalise


@dataclass(frozen=True)
class DisambiguationParams:
    recall_threshold: float = 0.3
    vector_threshold: float = 0.75
    nil_threshold: float = 0.5
    max_candidates: int = 20


@dataclass(frozen=True)
class Link:
    key: str  # the entity's key: the mention's own when it is new
    score: float
    new: bool


def edit_similarity(a: str, b: str) -> float:
    """1 − Levenshtein(a, b) / max length."""
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        previous = current
    return 1 - previous[-1] / max(len(a), len(b))


def jaccard(a: str, b: str) -> float:
    set_a, set_b = set(a), set(b)
    return len(set_a & set_b) / len(set_a | set_b) if set_a | set_b else 0.0


def initials(name: str) -> str:
    """"StreamChatPipeline" → "scp", "Reciprocal Rank Fusion" → "rrf"."""
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)
    return "".join(word[0] for word in words).lower() if len(words) >= 2 else ""


ABBREVIATION = 0.9


def is_abbreviation(mention: str, candidate: str, *, candidate_name: str = "", mention_name: str = "") -> bool:
    return bool(candidate_name and initials(candidate_name) == mention) or bool(
        mention_name and initials(mention_name) == candidate
    )


def string_similarity(mention: str, candidate: str, *, candidate_name: str = "", mention_name: str = "") -> float:
    """The best of five string measures between two keys (names give initials)."""
    if mention == candidate:
        return 1.0
    if is_abbreviation(mention, candidate, candidate_name=candidate_name, mention_name=mention_name):
        return ABBREVIATION
    shorter, longer = sorted((mention, candidate), key=len)
    if len(shorter) >= 3 and shorter in longer:
        return 0.8
    return max(jaccard(mention, candidate), edit_similarity(mention, candidate))


NAME_DIMS = 256


def name_vectors(names: Sequence[str]) -> np.ndarray:
    """Unit vectors of names' character 2- and 3-grams, hashed (crc32) into NAME_DIMS.

    Names differ by letters, not words ("Postgres" / "PostgreSQL"), so their vectors are
    made of character n-grams; a fixed hash keeps them the same in every process.
    """
    vectors = np.zeros((len(names), NAME_DIMS), dtype=np.float32)
    for row, name in enumerate(names):
        padded = f"#{normalise(name)}#"
        for n in (2, 3):
            for i in range(len(padded) - n + 1):
                vectors[row, zlib.crc32(padded[i : i + n].encode()) % NAME_DIMS] += 1.0
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


def _grams(key: str) -> set[str]:
    return {key[i : i + 2] for i in range(len(key) - 1)} or {key}


class EntityIndex:
    """The known entities of one KB: keys, display names and name vectors, indexed by bigram."""

    def __init__(self, embed: Callable[[list[str]], np.ndarray]) -> None:
        self.embed = embed
        self.names: dict[str, str] = {}
        self.by_initials: dict[str, set[str]] = defaultdict(set)
        self.by_gram: dict[str, set[str]] = defaultdict(set)
        self.vectors: dict[str, np.ndarray] = {}

    def add(self, key: str, name: str, vector: np.ndarray | None = None) -> None:
        if key in self.names:
            return
        self.names[key] = name
        for gram in _grams(key):
            self.by_gram[gram].add(key)
        if abbreviation := initials(name):
            self.by_initials[abbreviation].add(key)
        if vector is not None:
            self.vectors[key] = vector

    def add_all(self, rows: Iterable[tuple[str, str, np.ndarray | None]]) -> None:
        for key, name, vector in rows:
            self.add(key, name, vector)

    def vector(self, key: str) -> np.ndarray:
        if key not in self.vectors:
            self.vectors[key] = self.embed([self.names[key]])[0]
        return self.vectors[key]

    def candidates(self, key: str, limit: int) -> list[str]:
        shared = Counter(other for gram in _grams(key) for other in self.by_gram.get(gram, ()))
        # Ties go by key, not by set order, which changes with each process's hash seed.
        found = [other for other, _ in sorted(shared.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]
        return found + sorted(k for k in self.by_initials.get(key, ()) if k not in found)


def link(
    key: str,
    name: str,
    index: EntityIndex,
    params: DisambiguationParams = DisambiguationParams(),
    *,
    embed_mention: Callable[[str], np.ndarray] | None = None,
) -> Link:
    """Which entity of `index` the mention (`key`, as written `name`) is, or that it is new."""
    if key in index.names:
        return Link(key, 1.0, new=False)
    recalled = []
    for other in index.candidates(key, params.max_candidates):
        score = string_similarity(key, other, candidate_name=index.names[other], mention_name=name)
        if score >= params.recall_threshold:
            recalled.append((score, other))
    if not recalled:
        return Link(key, 0.0, new=True)
    mention_vector = (embed_mention or (lambda text: index.embed([text])[0]))(name)
    best_score, best_key = 0.0, key
    for string_score, other in recalled:
        if is_abbreviation(key, other, candidate_name=index.names[other], mention_name=name):
            # "SCP" and "StreamChatPipeline" share no n-grams: their vectors cannot agree.
            combined = string_score
        else:
            cosine = float(np.dot(mention_vector, index.vector(other)))
            combined = (string_score + cosine) / 2 if cosine >= params.vector_threshold else string_score / 2
        if combined > best_score:
            best_score, best_key = combined, other
    if best_score < params.nil_threshold:
        return Link(key, best_score, new=True)
    return Link(best_key, best_score, new=False)


