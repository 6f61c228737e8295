"""graph_agent: a retrieve-only worker that answers from the KB's graph and its chunks.

It searches in `hybrid+graph` mode and puts graph evidence first: for a question about how
two things relate, the relations on the path between them; for "what directions / themes
exist", the chunks cited by the communities whose reports answer it best (graphrag's
map-reduce global search); otherwise the explicit relations of the entities the question
names. Each graph item is the chunk that states it, labelled with the relation or community
(`Candidate.metadata["graph"]`), so it is cited and verified like any chunk. A KB without a
graph yet gets the plain hybrid answer and a warning.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from graphrag.search import GraphFact, global_search, graph_index, local_search, path_search
from knowledge.candidates import Candidate
from knowledge.models import KnowledgeBase
from knowledge.retrieval import RetrievalResult, retrieve
from knowledge.search import get_backend

from .agent_support import graph_mode, search_params, the_kb, worker_output
from .routing_kb import graph_question

GRAPH_ITEMS = 3  # graph evidence ahead of the chunks; the rest of top_k stays retrieval's

class GraphAgentWorker:
    """Search one KB with its graph; never generates."""

    def __init__(self, kb_slug: str) -> None:
        self.kb_slug = kb_slug

    def retrieve_with_trace(
        self,
        query: str,
        thread_id: str = "",
        *,
        kb: KnowledgeBase | None = None,
        retriever=None,
        top_k: int | None = None,
        rerank: bool | None = None,
        mode: str | None = None,  # the worker's mode is its own: hybrid+graph
        on_event=None,  # one search: nothing to report
        llm: Any = None,
        user: Any = None,  # who asks: only agents with memory use it
        tools: Any = None,  # the tool channel: only the ReAct agent calls tools
    ) -> dict[str, Any]:
        kb = the_kb(self.kb_slug, kb)
        # hybrid+graph unless the KB's own evaluation found the graph leg no help (graph_mode).
        params = search_params(kb, graph_mode(kb), top_k=top_k, rerank=rerank)
        result = (retriever or retrieve)(query, kb, params)
        if graph_index(kb) is None:
            result.warnings.append("this knowledge base has no graph yet: answered from hybrid search")
            graph_items: list[Candidate] = []
        else:
            graph_items = graph_evidence(kb, query, graph_question(query) or "local", llm=llm)
        return worker_output(with_graph_evidence(result, graph_items, limit=params.top_k))


def graph_evidence(kb: KnowledgeBase, query: str, kind: str, *, llm: Any = None) -> list[Candidate]:
    """The chunks that state the graph's answer, each labelled with what it states.

    For a global question, the chunks the best communities' partial answers cite (the model
    maps the question over their reports when `llm` has one).
    """
    labelled: list[tuple[int, str]] = []
    if kind == "path":
        labelled = [(f.chunk_ids[0], _label(f)) for f in path_search(kb, query) if f.chunk_ids]
    elif kind == "global":
        labelled = [(a.chunk_ids[0], f"community: {a.community.title}") for a in global_search(kb, query, llm=llm) if a.chunk_ids]
    if not labelled:  # "local", or no path / community found
        labelled = [(f.chunk_ids[0], _label(f)) for f in local_search(kb, query).facts if f.chunk_ids]
    chosen: dict[int, str] = {}
    for chunk_id, label in labelled:
        if chunk_id not in chosen and len(chosen) < GRAPH_ITEMS:
            chosen[chunk_id] = label
    infos = get_backend().chunks(kb, list(chosen))
    items = []
    for rank, (chunk_id, label) in enumerate(chosen.items()):
        if chunk_id in infos:
            candidate = infos[chunk_id].candidate(1.0 - 0.01 * rank, "graph")
            candidate.metadata["graph"] = label
            items.append(candidate)
    return items


def _label(fact: GraphFact) -> str:
    return f"relation: {fact.text}"


def with_graph_evidence(result: RetrievalResult, graph_items: list[Candidate], *, limit: int) -> RetrievalResult:
    """The result with the graph's items first among its references, each chunk once."""
    if not graph_items:
        return result
    ids = {c.chunk_id for c in graph_items}
    rest = [c for c in result.references if c.chunk_id not in ids]
    references = tuple((graph_items + rest)[: max(limit, len(graph_items))])
    gate = dataclasses.replace(result.gate, references=references) if result.gate else None
    candidates = graph_items + [c for c in result.candidates if c.chunk_id not in ids]
    return dataclasses.replace(result, candidates=candidates if gate else list(references), gate=gate)
