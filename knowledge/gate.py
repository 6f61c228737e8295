"""The quality gate: which candidates become references, within budgets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from agentic_rag.llm.units import is_heading_of

from .candidates import Candidate
from .context_window import DEFAULT_MAX_CHARS, with_context_window
from .scope import Scope


# The untuned five-factor thresholds (see GateParams.five_factor_min), calibrated as `evaluate
# --tune` does (evaluation.tuning.choose_gate_threshold: the highest that keeps 95% of the
# references from relevant documents and one for every question) on the docs KB's 209 golden
# questions, the top 5 after rerank as the chat searches. Over e5-small vectors 0.25 (train and
# test alike: every relevant reference kept, no noise rejected); over hashing vectors 0.10
# (the train split alone chose 0.15, which lost a test question's only relevant reference).
# The seed's 0.70 read on this scale would keep a relevant reference for 31% (e5) / 5%
# (hashing) of the questions: the five factors order candidates well and tell relevant from
# noise poorly, so the check is a floor.
FIVE_FACTOR_MIN = 0.10  # over lexical vectors, and wherever the KB is not known
FIVE_FACTOR_MIN_MODEL_VECTORS = 0.25


@dataclass(frozen=True)
class GateParams:
    """Thresholds and reference budgets."""

    vector_min: float = 0.45
    # The rerank check reads the scorer that ran. An LLM judge's 0-10 lands on a calibrated
    # 0-1 scale under rerank_key, where the seed's 0.70 means "7 of 10".
    rerank_min: float = 0.70
    rerank_key: str = "rerank.model"
    # The five-factor score (a weighted sum of cosine, term, title, prior-score and overlap
    # factors) is on no calibrated scale: its 0.70 would ask 70% of every factor at once,
    # titles included, and rejected most passages golden questions cite. Its threshold is
    # calibrated per KB by `evaluate --tune` (evaluation.tuning.calibrate_rerank_gate); the
    # untuned defaults are that calibration on the docs KB (FIVE_FACTOR_MIN, see there).
    five_factor_min: float = FIVE_FACTOR_MIN
    five_factor_key: str = "rerank.five_factor"
    max_reference_chars: int = 4000
    max_single_reference_chars: int = 1500
    submit_top_k: int = 3
    require_scope: bool = False
    scope_key: str = "scope"  # the Candidate.metadata entry compared with the scope
    # A reference the total budget would cut shorter than this is dropped instead.
    min_reference_chars: int = 200
    # ContextWindow(1) for the answer: a reference cut off mid-thought gets the rest of it
    # from its next chunk (knowledge.context_window), up to this many characters.
    context_window: bool = True
    context_window_chars: int = DEFAULT_MAX_CHARS


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

    def summary(self, limit: int = 5) -> str:
        """What passed and why the first `limit` rejected candidates did not, for a trace."""
        rejected = [verdict for verdict in self.verdicts if not verdict.passed]
        text = f"{len(self.references)} passed, {len(rejected)} rejected"
        if rejected:
            text += ": " + "; ".join(f"chunk {v.chunk_id}: {v.reason}" for v in rejected[:limit])
        return text


def gate_trace(gate: GateResult | None, scope: Scope | None) -> str:
    """The scope a search was held to and the gate's verdicts, as a trace span's output."""
    named = f"scope {scope.label} (named in the {scope.source})" if scope else "no scope named"
    return f"{named}; {gate.summary()}" if gate is not None else named


def gate_for_kb(stored: object, *, lexical: bool = True) -> GateParams:
    """The gate with a KB's calibrated threshold (`evaluate --tune` stores it), else the default
    for its kind of vectors."""
    values = stored if isinstance(stored, dict) else {}
    threshold = values.get("five_factor_min")
    if isinstance(threshold, (int, float)) and 0.0 <= threshold <= 1.0:
        return GateParams(five_factor_min=float(threshold))
    return GateParams(five_factor_min=FIVE_FACTOR_MIN if lexical else FIVE_FACTOR_MIN_MODEL_VECTORS)


def apply_quality_gate(
    candidates: Sequence[Candidate], params: GateParams = GateParams(), *, scope: str | Scope | None = None
) -> GateResult:
    """Judge candidates in order; keep at most submit_top_k that pass, within the budgets.

    A `Scope` (the question named a document or a chapter) is always checked; a string scope
    only with `require_scope`, against each candidate's `metadata[scope_key]`.
    """
    references: list[Candidate] = []
    verdicts: list[Verdict] = []
    for candidate in candidates:
        reference: Candidate | None = None
        reason = rejection(candidate, params, scope)
        if reason is None:
            reference, reason = _fit_with_context(candidate, references, params)
        if reference is not None:
            references.append(reference)
        verdicts.append(Verdict(candidate.chunk_id, reference is not None, reason))
    return GateResult(tuple(references), tuple(verdicts))


def rejection(candidate: Candidate, params: GateParams, scope: str | Scope | None = None) -> str | None:
    """Return why a candidate fails the thresholds, or None when it passes them."""
    if not candidate.text.strip():
        return "empty text"
    if is_heading_of(candidate.text, candidate.section_title):
        return "only its section's heading"  # a chunk of a section with no body of its own
    if isinstance(scope, Scope):
        if outside := scope.rejection(candidate):
            return outside
        if scope.chapter:
            # "What does section 7.6 say?" holds no words to score a passage by: a chunk of the
            # chapter it names is what it asks for.
            return None
    elif params.require_scope and not _is_in_scope(candidate, params.scope_key, scope):
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
    return _rerank_rejection(candidate, params)


def _rerank_rejection(candidate: Candidate, params: GateParams) -> str | None:
    """The check of the scorer that ran last on the candidate: the LLM judge, else the five factors.

    A second embedding model's cosine ("rerank.embedding") is on no common scale and is not
    checked; a candidate below the reranked head carries no rerank score and is not either.
    """
    judged = candidate.scores.get(params.rerank_key)
    if judged is not None:
        if judged < params.rerank_min:
            return f"rerank (LLM judge) {judged:.2f} < {params.rerank_min:.2f}"
        return None
    five_factor = candidate.scores.get(params.five_factor_key)
    if five_factor is not None and five_factor < params.five_factor_min:
        return f"rerank (five-factor) {five_factor:.2f} < {params.five_factor_min:.2f}"
    return None


def _is_in_scope(candidate: Candidate, key: str, scope: str | None) -> bool:
    # Recall may mark the verdict itself; otherwise compare with the query's scope.
    if "source_scope_valid" in candidate.metadata:
        return bool(candidate.metadata["source_scope_valid"])
    return scope is None or candidate.metadata.get(key) == scope


def _fit_with_context(
    candidate: Candidate, references: list[Candidate], params: GateParams
) -> tuple[Candidate | None, str]:
    """Fit the candidate completed by its context window, else the candidate as it is."""
    if params.context_window:
        completed = with_context_window(candidate, params.context_window_chars)
        if completed is not candidate:
            reference, reason = _fit_budget(completed, references, params)
            if reference is not None and "cut to" not in reason:
                return reference, f"{reason}, with {len(completed.metadata['context_window'])} chars of the next chunk"
    return _fit_budget(candidate, references, params)


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
