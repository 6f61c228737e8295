"""The post-processing chain: Dedup → RRF → ContextWindow → Diversity → Truncate."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .candidates import Candidate

NeighbourLookup = Callable[[Candidate], tuple[str, str]]


@dataclass(frozen=True)
class PostContext:
    """What processors may need besides the candidates."""

    query: str = ""
    neighbours: NeighbourLookup | None = None  # (previous text, next text) of a chunk


class PostProcessor(Protocol):
    @property
    def name(self) -> str:
        """Identify the processor in timings, warnings and `add(before=..., after=...)`."""
        ...

    def process(self, candidates: list[Candidate], context: PostContext) -> list[Candidate]:
        """Return the refined candidates; may adjust their scores and metadata."""
        ...


@dataclass(frozen=True)
class PostProcessingParams:
    """Defaults of the built-in processors."""

    min_chars: int = 20
    hash_prefix_chars: int = 300
    rrf_k: int = 60
    per_document: int = 3
    top_k: int = 5


@dataclass(frozen=True)
class DedupProcessor:
    """Drop repeats by key or by md5 of the text's start, merging their hits; short texts last.

    Texts under `min_chars` look like fragments, but a KB's only match may be that short
    ("14 前卫 青岛中能青年队", a one-line note): dropping it lost the document, so a short
    text goes after the others instead, where truncation drops it if longer ones answer.
    """

    min_chars: int = 20
    prefix_chars: int = 300
    name: str = "dedup"

    def process(self, candidates: list[Candidate], context: PostContext) -> list[Candidate]:
        """Return the first candidate of each key and text prefix, with every hit merged in."""
        kept: list[Candidate] = []
        by_key: dict[str, Candidate] = {}
        by_hash: dict[str, Candidate] = {}
        texts = [(c, len(c.text.strip())) for c in candidates]
        long = [c for c, length in texts if length >= self.min_chars]
        short = [c for c, length in texts if 0 < length < self.min_chars]
        for candidate in long + short:
            digest = hashlib.md5(candidate.text[: self.prefix_chars].encode()).hexdigest()
            first = by_key.get(candidate.key) or by_hash.get(digest)
            if first is not None:
                _merge_hits(first, candidate)
                continue
            by_key[candidate.key] = by_hash[digest] = candidate
            kept.append(candidate)
        return kept


def _merge_hits(kept: Candidate, duplicate: Candidate) -> None:
    kept.sources |= duplicate.sources
    for leg, score in duplicate.scores.items():
        kept.scores[leg] = max(score, kept.scores.get(leg, score))
    if duplicate.chunk_id != kept.chunk_id:
        kept.notes.append(f"dedup: same text as chunk {duplicate.chunk_id}")


@dataclass(frozen=True)
class RRFProcessor:
    """Fuse by `1 / (k + rank)` over each source's ranking of `scores[source]`.

    Runs only when the candidates come from more than one source and nothing upstream has
    already fused or reranked them (a second fusion would undo that order).
    """

    k: int = 60
    skip_if_scored: tuple[str, ...] = ("fusion", "rerank")
    name: str = "rrf"

    def process(self, candidates: list[Candidate], context: PostContext) -> list[Candidate]:
        """Return the candidates ordered by their RRF score, or unchanged when skipped."""
        sources = set().union(*(candidate.sources for candidate in candidates))
        if len(sources) < 2 or self._already_ordered(candidates):
            return candidates
        totals = [0.0] * len(candidates)
        for source in sources:
            for rank, position in enumerate(_ranking(candidates, source), start=1):
                totals[position] += 1.0 / (self.k + rank)
        for candidate, total in zip(candidates, totals, strict=True):
            candidate.score = candidate.scores["rrf"] = total
        return sorted(candidates, key=lambda candidate: -candidate.score)

    def _already_ordered(self, candidates: list[Candidate]) -> bool:
        keys = self.skip_if_scored
        return any(key in candidate.scores for candidate in candidates for key in keys)


def _ranking(candidates: list[Candidate], source: str) -> list[int]:
    """Return positions of the source's candidates, best `scores[source]` first."""
    found = [i for i, candidate in enumerate(candidates) if source in candidate.sources]
    return sorted(found, key=lambda i: -candidates[i].scores.get(source, -math.inf))


@dataclass(frozen=True)
class ContextWindowProcessor:
    """Attach each candidate's neighbouring chunk texts as metadata, via the context lookup."""

    name: str = "context_window"

    def process(self, candidates: list[Candidate], context: PostContext) -> list[Candidate]:
        """Return the candidates with `context_before` / `context_after` in their metadata."""
        if context.neighbours is None:
            return candidates
        for candidate in candidates:
            if "context_before" not in candidate.metadata:
                before, after = context.neighbours(candidate)
                candidate.metadata["context_before"] = before
                candidate.metadata["context_after"] = after
        return candidates


def index_neighbours(texts: Mapping[tuple[int, int, int], str]) -> NeighbourLookup:
    """Build a ±1 neighbour lookup from chunk texts keyed by (doc_id, level, index)."""

    def neighbours(candidate: Candidate) -> tuple[str, str]:
        key = (candidate.doc_id, candidate.level)
        before = texts.get((*key, candidate.index - 1), "")
        return before, texts.get((*key, candidate.index + 1), "")

    return neighbours


@dataclass(frozen=True)
class DiversityProcessor:
    """Keep at most per_document candidates of any one document, where another document has one
    to put in their place.

    A document's surplus gives way to other documents' candidates that score at least
    yield_share of it. When every other document scores far below (the question is about one
    document, and the rest matched a word or two), the surplus keeps its place: dropping it
    would answer from the fillers.
    """

    per_document: int = 3
    yield_share: float = 0.5
    name: str = "diversity"

    def process(self, candidates: list[Candidate], context: PostContext) -> list[Candidate]:
        """Return the candidates minus each document's surplus that others can replace."""
        counts: dict[int, int] = {}
        kept = []
        for i, candidate in enumerate(candidates):
            seen = counts.get(candidate.doc_id, 0)
            counts[candidate.doc_id] = seen + 1
            if seen < self.per_document or not self._replaceable(candidate, candidates[i + 1 :]):
                kept.append(candidate)
        return kept

    def _replaceable(self, candidate: Candidate, later: Sequence[Candidate]) -> bool:
        """Whether the best later candidate of another document (0 without one) scores at least
        yield_share of candidate's."""
        rival = max((other.score for other in later if other.doc_id != candidate.doc_id), default=0.0)
        return rival >= self.yield_share * candidate.score


@dataclass(frozen=True)
class TruncateProcessor:
    """Keep the first top_k candidates."""

    top_k: int = 5
    name: str = "truncate"

    def process(self, candidates: list[Candidate], context: PostContext) -> list[Candidate]:
        """Return the first top_k candidates."""
        return candidates[: self.top_k]


@dataclass
class PostProcessingPipeline:
    """An ordered, editable list of processors."""

    processors: list[PostProcessor] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [processor.name for processor in self.processors]

    def add(
        self, processor: PostProcessor, *, before: str | None = None, after: str | None = None
    ) -> PostProcessingPipeline:
        """Insert a processor before or after a named one, else at the end."""
        if before is not None and after is not None:
            raise ValueError("give before or after, not both")
        anchor = before if before is not None else after
        if anchor is None:
            self.processors.append(processor)
            return self
        if anchor not in self.names:
            raise ValueError(f"no post-processor named {anchor!r} in {self.names}")
        position = self.names.index(anchor) + (after is not None)
        self.processors.insert(position, processor)
        return self

    def remove(self, name: str) -> PostProcessingPipeline:
        """Drop the processor with this name."""
        self.processors = [processor for processor in self.processors if processor.name != name]
        return self


@dataclass(frozen=True)
class _Registration:
    factory: Callable[[], PostProcessor]
    before: str | None
    after: str | None


_REGISTERED: list[_Registration] = []


def register_postprocessor(
    factory: Callable[[], PostProcessor], *, before: str | None = None, after: str | None = None
) -> Callable[[], PostProcessor]:
    """Add a processor factory to every `default_pipeline()`; usable as a decorator."""
    _REGISTERED.append(_Registration(factory, before, after))
    return factory


def unregister_postprocessor(factory: Callable[[], PostProcessor]) -> None:
    """Forget a factory added by `register_postprocessor`."""
    _REGISTERED[:] = [entry for entry in _REGISTERED if entry.factory is not factory]


def default_pipeline(
    params: PostProcessingParams = PostProcessingParams(),
) -> PostProcessingPipeline:
    """Build the default chain with the given params, plus every registered processor."""
    pipeline = PostProcessingPipeline([
        DedupProcessor(params.min_chars, params.hash_prefix_chars),
        RRFProcessor(params.rrf_k),
        ContextWindowProcessor(),
        DiversityProcessor(params.per_document),
        TruncateProcessor(params.top_k),
    ])
    for entry in _REGISTERED:
        pipeline.add(entry.factory(), before=entry.before, after=entry.after)
    return pipeline


def run_postprocessing(
    candidates: Sequence[Candidate],
    context: PostContext,
    pipeline: PostProcessingPipeline,
    *,
    warnings: list[str] | None = None,
) -> tuple[list[Candidate], dict[str, float]]:
    """Run the processors in order; return the candidates and each processor's time in ms.

    With a warnings list, a failing processor is skipped and noted there; without, it raises.
    """
    current = list(candidates)
    timings: dict[str, float] = {}
    for processor in pipeline.processors:
        started = time.perf_counter()
        try:
            current = processor.process(current, context)
        except Exception as exc:
            if warnings is None:
                raise
            reason = f"{type(exc).__name__}: {exc}"
            warnings.append(f"post-processor {processor.name} skipped: {reason}")
        timings[processor.name] = (time.perf_counter() - started) * 1000
    return current, timings
