"""fusion_agent: several workers side by side on one question, their evidence merged once.

It runs its member workers (hybrid, graph and deep research by default) in parallel, each
with its own timeout, and merges their reference lists by reciprocal rank (k = 60): a chunk
that several members found ranks above one that only one found, and each chunk appears once.
A member that fails or times out is reported as a warning; the others' evidence stays.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import wait
from typing import Any

from django.conf import settings

from agentic_rag.db_threads import DatabaseThreadPool
from knowledge.candidates import Candidate
from knowledge.models import KnowledgeBase
from knowledge.retrieval import RetrievalResult

from .agent_support import combined_result, worker_output

logger = logging.getLogger(__name__)

RRF_K = 60
_POOL = DatabaseThreadPool(max_workers=6, thread_name_prefix="fusion-agent")


class FusionAgentWorker:
    """Run `members` (type → worker factory) on one question and merge what they found."""

    def __init__(self, kb_slug: str, members: Mapping[str, Callable[[str], Any]]) -> None:
        self.kb_slug = kb_slug
        self.members = dict(members)

    def retrieve_with_trace(
        self,
        query: str,
        thread_id: str = "",
        *,
        kb: KnowledgeBase | None = None,
        retriever=None,
        top_k: int | None = None,
        rerank: bool | None = None,
        mode: str | None = None,  # each member searches in its own mode
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        llm: Any = None,
        user: Any = None,  # who asks: only agents with memory use it
        timeout_s: float | None = None,
        tools: Any = None,  # the tool channel: only the ReAct agent calls tools
    ) -> dict[str, Any]:
        timeout = settings.CHAT_WORKER_TIMEOUT_S if timeout_s is None else timeout_s
        futures = {
            name: _POOL.submit(
                factory(self.kb_slug).retrieve_with_trace, query, thread_id,
                kb=kb, retriever=retriever, top_k=top_k, rerank=rerank, on_event=on_event, llm=llm, user=user,
                tools=tools,
            )
            for name, factory in self.members.items()
        }
        wait(futures.values(), timeout=timeout)
        found: dict[str, list[Candidate]] = {}
        results: list[RetrievalResult] = []
        warnings: list[str] = []
        unfinished: list[str] = []
        for name, future in futures.items():
            if not future.done():
                future.cancel()
                warnings.append(f"{name}: timed out after {timeout:g}s")
            elif future.exception() is not None:
                warnings.append(f"{name}: {future.exception()}")
            else:
                output = future.result()
                found[name] = list(output["reference"])
                results.extend(output["retrieval_results"])
                if output.get("incomplete"):
                    unfinished.append(f"{name}: {output['incomplete']}")
        limit = top_k or max((len(refs) for refs in found.values()), default=0)
        references = merge_by_rank(found)[:limit]
        if on_event:
            on_event("thinking", {"text": "fused " + ", ".join(f"{n} ({len(r)})" for n, r in found.items())})
        parts = [part for result in results for part in result.parts]
        return worker_output(combined_result(query, "fusion", results, references, warnings=warnings, parts=parts),
                             incomplete="; ".join([*warnings, *unfinished]))


def merge_by_rank(found: Mapping[str, list[Candidate]]) -> list[Candidate]:
    """Reciprocal-rank merge of the members' lists, each chunk once (its first copy kept)."""
    scores: dict[int, float] = {}
    first: dict[int, Candidate] = {}
    for references in found.values():
        for rank, candidate in enumerate(references, 1):
            scores[candidate.chunk_id] = scores.get(candidate.chunk_id, 0.0) + 1.0 / (RRF_K + rank)
            first.setdefault(candidate.chunk_id, candidate)
    return [first[c] for c in sorted(scores, key=lambda c: -scores[c])]
