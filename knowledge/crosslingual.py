"""A cross-language recall leg: the reader's multilingual encoder over the units ingestion encoded.

The keyword leg shares only identifiers between an English question and a Chinese passage, and
hashing vectors are monolingual, so a question in another language than the KB's text often
does not reach the passage that answers it. Ingestion already keeps a multilingual encoder's
vector of every answer unit (knowledge.meaning); this leg embeds the question once with the same
encoder and ranks the KB's child chunks by their best unit's cosine to it.

Only the KB it is given is read: its live child chunks, and the vectors of their documents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from agentic_rag.embeddings import Embedder, embed_query_cached, text_key
from agentic_rag.llm.units import split_units

from .candidates import Candidate
from .meaning import MAX_UNIT_KEYS_PER_QUERY, configured_encoder
from .models import Chunk, KnowledgeBase, UnitVector
from .pg_search import _BoundedCache
from .search import Hit, live_entries

CROSSLINGUAL_SOURCE = "crosslingual"
MIN_COSINE = 0.15  # a floor under which a unit is no nearer the question than unrelated text is
MATRIX_CACHE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class UnitMatrix:
    """A KB version's unit vectors and the chunks they are in.

    One pair a (unit, chunk): rows[i] indexes vectors, sorted by chunk so that the pairs of
    chunk ids[j] start at starts[j] and a chunk's best unit is one reduceat away.
    """

    vectors: np.ndarray  # (units, dims) float16, unit length
    rows: np.ndarray  # (pairs,) index into vectors, grouped by chunk
    ids: np.ndarray  # (chunks,) chunk ids
    starts: np.ndarray  # (chunks,) each chunk's first pair

    @property
    def nbytes(self) -> int:
        return self.vectors.nbytes + self.rows.nbytes + self.ids.nbytes + self.starts.nbytes

    def best_chunks(self, query: np.ndarray, top_k: int, min_score: float = MIN_COSINE) -> list[Hit]:
        """The chunks whose best unit is nearest the query, best first."""
        if not len(self.rows) or top_k <= 0:
            return []
        cosines = (self.vectors @ query.astype(np.float16)).astype(np.float32)[self.rows]
        best = np.maximum.reduceat(cosines, self.starts)
        order = np.argsort(-best, kind="stable")[:top_k]
        return [(int(self.ids[i]), float(best[i])) for i in order if best[i] >= min_score]


EMPTY = UnitMatrix(np.zeros((0, 0), np.float16), *(np.zeros(0, np.int64) for _ in range(3)))


def build_unit_matrix(kb: KnowledgeBase, encoder: str) -> UnitMatrix:
    """The unit vectors of the KB's live child chunks under an encoder (EMPTY when it has none)."""
    chunks = live_entries(kb).filter(chunk__level=Chunk.CHILD).values_list("chunk_id", "chunk__document_id", "chunk__text")
    keys_of: dict[int, list[str]] = {}
    documents: dict[int, set[str]] = {}
    for chunk_id, document_id, text in chunks.iterator():
        keys = [text_key(unit.text) for unit in split_units(text) if getattr(unit, "is_answer", True)]
        keys_of[chunk_id] = keys
        documents.setdefault(document_id, set()).update(keys)
    index: dict[str, int] = {}
    vectors: list[np.ndarray] = []
    for document_id, keys in documents.items():
        wanted = sorted(keys - index.keys())
        for start in range(0, len(wanted), MAX_UNIT_KEYS_PER_QUERY):
            found = UnitVector.objects.filter(
                document_id=document_id, encoder=encoder, key__in=wanted[start : start + MAX_UNIT_KEYS_PER_QUERY]
            ).values_list("key", "vector")
            for key, vector in found:
                if key not in index:
                    index[key] = len(vectors)
                    vectors.append(np.frombuffer(bytes(vector), dtype=np.float16))
    pairs = sorted((chunk_id, index[key]) for chunk_id, keys in keys_of.items() for key in set(keys) if key in index)
    if not pairs:
        return EMPTY
    matrix = np.vstack(vectors).astype(np.float32)
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-9)
    chunk_ids, rows = (np.asarray(column, dtype=np.int64) for column in zip(*pairs, strict=True))
    ids, starts = np.unique(chunk_ids, return_index=True)
    return UnitMatrix(matrix.astype(np.float16), rows, ids, starts)


# What a KB's content version holds never changes, so each process keeps the matrices it built.
_MATRICES = _BoundedCache(MATRIX_CACHE_BYTES)


def unit_matrix(kb: KnowledgeBase, encoder: str, build: Callable[[KnowledgeBase, str], UnitMatrix] = build_unit_matrix) -> UnitMatrix:
    """The KB's UnitMatrix at its content version, built once a version in this process."""
    key = (kb.pk, kb.content_version, getattr(kb, "created_at", None), encoder)
    return _MATRICES.built_once(key, lambda: build(kb, encoder), lambda matrix: matrix.nbytes + 200)


def crosslingual_hits(
    kb: KnowledgeBase, query: str, top_k: int, *, encoder: Callable[[], Embedder | None] | None = None,
) -> list[Hit]:
    """The KB's child chunks nearest the question under the multilingual encoder (default: the
    reader's, settings.READER_ENCODER), best first; none when there is no encoder or the KB has no
    unit vectors of it."""
    embedder = (encoder or configured_encoder)()
    if embedder is None:
        return []
    matrix = unit_matrix(kb, embedder.name)
    if not len(matrix.rows):
        return []
    vector = np.asarray(embed_query_cached(embedder, query), dtype=np.float32)
    vector /= max(float(np.linalg.norm(vector)), 1e-9)
    return matrix.best_chunks(vector, top_k)


def interleave(fused: Sequence[Candidate], extra: Sequence[Candidate], *, every: int = 3, limit: int = 2) -> list[Candidate]:
    """The fused ranking with up to `limit` of the leg's chunks it lacks slotted in after every
    `every` fused candidates; a chunk both hold keeps its fused place and gains the leg's score.

    A slotted candidate takes the score of the one before it, so the ranking stays in score order.
    Slotting a few between the fused hits rather than after them keeps them within the answer's
    top_k, while the fused leaders keep the head: the leg's cosines across languages are weak and
    its first chunk is often not the answer (seeds_eval --half tune chose the defaults).
    """
    by_id = {candidate.chunk_id: candidate for candidate in fused}
    merged = [candidate.copy() for candidate in fused]
    positions = {candidate.chunk_id: i for i, candidate in enumerate(merged)}
    missing: list[Candidate] = []
    for candidate in extra:
        if candidate.chunk_id in by_id:
            held = merged[positions[candidate.chunk_id]]
            held.scores[CROSSLINGUAL_SOURCE] = candidate.score
            held.sources.add(CROSSLINGUAL_SOURCE)
        elif len(missing) < limit:
            missing.append(candidate)
    out: list[Candidate] = []
    for i, candidate in enumerate(merged):
        out.append(candidate)
        if missing and (i + 1) % every == 0:
            out.append(_slotted(missing.pop(0), candidate.score))
    return out + [_slotted(candidate, out[-1].score if out else candidate.score) for candidate in missing]


def _slotted(candidate: Candidate, score: float) -> Candidate:
    slotted = candidate.copy()
    slotted.scores[CROSSLINGUAL_SOURCE] = candidate.score
    slotted.sources.add(CROSSLINGUAL_SOURCE)
    slotted.score = slotted.scores["fusion"] = score
    return slotted
