"""The quality gate: which candidates become references, within budgets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from agentic_rag.llm.units import is_heading_of

from .candidates import Candidate


@dataclass(frozen=True)
class GateParams:
    """Thresholds and reference budgets."""

    vector_min: float = 0.45
    rerank_min: float = 0.70
    # 0.70 is a calibrated model reranker's threshold (a cross-encoder's). The
    # five-factor score only orders candidates, so the check reads a model's score.
    rerank_key: str = "rerank.model"
    max_reference_chars: int = 4000
    max_single_reference_chars: int = 1500
    submit_top_k: int = 3
    require_scope: bool = False
    scope_key: str = "scope"  # the Candidate.metadata entry compared with the scope
    # A reference the total budget would cut shorter than this is dropped instead.
    min_reference_chars: int = 200


@dataclass(frozen=True)
class Verdict:
    chunk_id: int
    passed: bool
    reason: str


@dataclass(frozen=True)
class GateResult:
    """Accepted references (texts cut to budget) and a verdict for every candidate."""

    references: tuple[Candidate, ...]
    verdicts: tuple[Verdict, ...]

    @property
    def total_chars(self) -> int:
        return sum(len(reference.text) for reference in self.references)


def apply_quality_gate(
    candidates: Sequence[Candidate], params: GateParams = GateParams(), *, scope: str | None = None
) -> GateResult:
    """Judge candidates in order; keep at most submit_top_k that pass, within the budgets."""
    references: list[Candidate] = []
    verdicts: list[Verdict] = []
    for candidate in candidates:
        reference: Candidate | None = None
        reason = rejection(candidate, params, scope)
        if reason is None:
            reference, reason = _fit_budget(candidate, references, params)
        if reference is not None:
            references.append(reference)
        verdicts.append(Verdict(candidate.chunk_id, reference is not None, reason))
    return GateResult(tuple(references), tuple(verdicts))


def rejection(candidate: Candidate, params: GateParams, scope: str | None = None) -> str | None:
    """Return why a candidate fails the thresholds, or None when it passes them."""
    if not candidate.text.strip():
        return "empty text"
    if is_heading_of(candidate.text, candidate.section_title):
        return "only its section's heading"  # a chunk of a section with no body of its own
    if params.require_scope and not _is_in_scope(candidate, params.scope_key, scope):
        return "scope mismatch"
    vector = candidate.scores.get("vector")
    fused = candidate.scores.get("fusion", candidate.scores.get("rrf", 0.0))
    # Weighted fusion min-max normalises each leg, so a leg's last hit adds 0 however close it
    # came to the first: a keyword hit (it shares a term with the query) passes all the same.
    keyword_hit = candidate.scores.get("bm25", 0.0) > 0
    has_fused_hit = (fused > 0 or keyword_hit) and bool(candidate.sources)
    if not has_fused_hit and (vector is None or vector < params.vector_min):
        if vector is None:
            return "no vector score and no fused source hit"
        return f"vector {vector:.2f} < {params.vector_min:.2f} and no fused source hit"
    rerank = candidate.scores.get(params.rerank_key)
    if rerank is not None and rerank < params.rerank_min:
        return f"rerank {rerank:.2f} < {params.rerank_min:.2f}"
    return None


def _is_in_scope(candidate: Candidate, key: str, scope: str | None) -> bool:
    # Recall may mark the verdict itself; otherwise compare with the query's scope.
    if "source_scope_valid" in candidate.metadata:
        return bool(candidate.metadata["source_scope_valid"])
    return scope is None or candidate.metadata.get(key) == scope


def _fit_budget(
    candidate: Candidate, references: list[Candidate], params: GateParams
) -> tuple[Candidate | None, str]:
    """Return the candidate cut to the remaining budget with its verdict, or None and why."""
    if len(references) >= params.submit_top_k:
        return None, f"beyond submit_top_k {params.submit_top_k}"
    used = sum(len(reference.text) for reference in references)
    room = min(params.max_single_reference_chars, params.max_reference_chars - used)
    if len(candidate.text) <= room:
        return replace(candidate, notes=list(candidate.notes)), "passed"
    if room <= 0 or room < params.min_reference_chars:
        return None, f"over the {params.max_reference_chars}-char budget"
    note = f"cut to {room} of {len(candidate.text)} chars"
    cut = replace(candidate, text=candidate.text[:room], notes=[*candidate.notes, note])
    return cut, f"passed, {note}"
