"""What the retrieve-only workers share: their search settings, the result shape they return,
one result combined from many searches, and a model's JSON answer that may not come."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings

from agentic_rag.llm import CompletionOptions, LLMError, Message
from agentic_rag.llm.extractive import model_json
from graphrag.search import graph_index
from knowledge.candidates import Candidate
from knowledge.graph_leg import graph_leg_helps
from knowledge.models import KnowledgeBase
from knowledge.retrieval import RetrievalParams, RetrievalResult, params_for_kb

logger = logging.getLogger(__name__)


def the_kb(kb_slug: str, kb: KnowledgeBase | None) -> KnowledgeBase:
    """The KB the pipeline already loaded (and checked the user may read), else the slug's.

    A pooled worker outlives any one version of the KB row, so it never keeps one itself."""
    return kb if kb is not None else KnowledgeBase.objects.get(slug=kb_slug)


def search_params(kb: KnowledgeBase, mode: str, *, top_k: int | None, rerank: bool | None) -> RetrievalParams:
    """The KB's settings in `mode`, with the request's top_k and rerank where it gave them."""
    overrides = {k: v for k, v in {"top_k": top_k, "rerank": rerank}.items() if v is not None}
    return params_for_kb(kb, **{**overrides, "mode": mode})


def graph_mode(kb: KnowledgeBase) -> str:
    """hybrid+graph when the KB has a graph and its own evaluation did not find the graph leg
    useless (`manage.py evaluate --judge-graph-leg`), else hybrid."""
    if not graph_leg_helps(kb):
        return "hybrid"
    return "hybrid+graph" if graph_index(kb) is not None else "hybrid"


def worker_output(result: RetrievalResult, *, incomplete: str = "") -> dict[str, Any]:
    """The one shape every worker returns: {context, retrieval_results, reference, incomplete}.

    `incomplete` says why an agent stopped before it had what the question needs (its cap,
    a failed task, a sub-question still open): the answer is then stored as partial."""
    references = result.references
    return {
        "context": "\n\n".join(candidate.text for candidate in references),
        "retrieval_results": [result],
        "reference": references,
        "incomplete": incomplete,
    }


def combined_result(
    query: str,
    mode: str,
    results: Iterable[RetrievalResult],
    references: Sequence[Candidate],
    *,
    warnings: Sequence[str] = (),
    parts: Sequence[str] = (),
) -> RetrievalResult:
    """One result for an agent's many searches: their stage times summed, their warnings and
    the agent's own kept, the references the agent chose."""
    results = list(results)
    timings: dict[str, float] = {}
    for result in results:
        for stage, ms in result.timings_ms.items():
            timings[stage] = round(timings.get(stage, 0.0) + ms, 3)
    return dataclasses.replace(
        RetrievalResult(query=query, mode=mode),
        candidates=list(references),
        timings_ms=timings,
        warnings=[w for r in results for w in r.warnings] + list(warnings),
        reason="" if references else "nothing in the knowledge base matches the question",
        parts=list(parts),
    )


class RunModel:
    """The model as one agent run asks it. Once a call fails (an error, or no answer within
    CHAT_AGENT_MODEL_TIMEOUT_S), the run goes on by its rules and never waits on it again:
    a hung model costs an agent one timeout, not one per round."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self.failure = ""

    @property
    def has_model(self) -> bool:
        return bool(getattr(self._llm, "has_model", False)) and not self.failure

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)


def ask_model(llm: Any, system: str, user: str, schema_hint: str, *, field: str, max_tokens: int) -> dict | None:
    """The configured model's JSON answer, or None: no model, or no usable answer (then the
    caller's rules decide, as they do offline)."""
    if not getattr(llm, "has_model", False):
        return None
    try:
        return model_json(
            llm,
            [Message("system", system), Message("user", user)],
            CompletionOptions(temperature=0.0, max_tokens=max_tokens, timeout_s=settings.CHAT_AGENT_MODEL_TIMEOUT_S),
            schema_hint,
            field=field,
        )
    except (LLMError, ValueError, TypeError, AttributeError) as error:
        logger.info("the model gave no usable %s, the rules decide: %s", field, error)
        if isinstance(error, LLMError) and isinstance(llm, RunModel):
            llm.failure = f"the model failed ({error}); the rules went on"
        return None
