"""Retrieve-only workers, their pool and the fan-out of a plan.

A worker only retrieves: `retrieve_with_trace` returns context, results and references,
and the pipeline generates the answer once, so every agent's answer is cited and checked
the same way. Workers live in one pool keyed `kb:type:mode`, so their number grows with
KBs and types, never with sessions.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.conf import settings

from agentic_rag.db_threads import DatabaseThreadPool
from knowledge.models import KnowledgeBase
from knowledge.retrieval import RetrievalResult, retrieve

from .agent_support import search_params, the_kb, worker_output
from .deep_research import DeepResearchWorker
from .fusion_agent import FusionAgentWorker
from .graph_agent import GraphAgentWorker
from .plan_execute import PlanExecuteWorker
from .react_agent import ReactWorker
from .routing_kb import AGENT_MODE, DEFAULT_AGENT, auto_agent, format_worker_name, parse_worker_name

logger = logging.getLogger("chat.workers")

Retriever = Callable[..., RetrievalResult]  # retrieve(query, kb, params)


class UnknownWorker(LookupError):
    """No worker type of that name is registered."""


class RetrievalWorker(Protocol):
    def retrieve_with_trace(self, query: str, thread_id: str = "", **overrides: Any) -> dict[str, Any]: ...


class RetrieveOnlyWorker:
    """Search one KB in one retrieval mode; never generates."""

    def __init__(self, kb_slug: str, search_mode: str) -> None:
        self.kb_slug = kb_slug
        self.search_mode = search_mode

    def retrieve_with_trace(
        self,
        query: str,
        thread_id: str = "",
        *,
        kb: KnowledgeBase | None = None,
        retriever: Retriever | None = None,
        top_k: int | None = None,
        rerank: bool | None = None,
        mode: str | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,  # one search: nothing to report
        llm: Any = None,
        user: Any = None,  # who asks: only agents with memory use it
        tools: Any = None,  # the tool channel: only agents that call tools use it
    ) -> dict[str, Any]:
        """Retrieve for `query`; thread_id is only logged (workers keep no session state)."""
        kb = the_kb(self.kb_slug, kb)
        params = search_params(kb, mode or self.search_mode, top_k=top_k, rerank=rerank)
        logger.debug("worker %s:%s thread=%s", self.kb_slug, self.search_mode, thread_id)
        return worker_output((retriever or retrieve)(query, kb, params))


FUSION_MEMBERS = ("hybrid_agent", "graph_agent", "deep_research_agent")

# A new worker type is one line: its name and how to build it for a KB slug.
WORKER_TYPES: dict[str, Callable[[str], RetrievalWorker]] = {
    "naive_rag_agent": lambda kb: RetrieveOnlyWorker(kb, "vector"),
    "hybrid_agent": lambda kb: RetrieveOnlyWorker(kb, "hybrid"),
    "graph_agent": GraphAgentWorker,
    "deep_research_agent": DeepResearchWorker,
    "plan_execute_agent": PlanExecuteWorker,
    "react_agent": ReactWorker,
    # Built when first asked for, so its members are this registry's own entries.
    "fusion_agent": lambda kb: FusionAgentWorker(kb, {name: WORKER_TYPES[name] for name in FUSION_MEMBERS}),
}
AGENT_TYPES: tuple[str, ...] = ("auto", *WORKER_TYPES)
# Agents that choose and call the chat's tools themselves, so the pipeline does not call them too.
TOOL_CALLING_AGENTS = frozenset({"react_agent"})


class WorkerPool:
    """Resident workers keyed `kb:type:mode`."""

    def __init__(self, registry: dict[str, Callable[[str], RetrievalWorker]] | None = None) -> None:
        self.registry = WORKER_TYPES if registry is None else registry
        self._workers: dict[str, RetrievalWorker] = {}
        self._lock = threading.Lock()

    def get(self, worker_name: str) -> RetrievalWorker:
        """The resident worker for `{kb}:{agent_type}:{mode}`, made on first use."""
        spec = parse_worker_name(worker_name)
        return self.worker(spec.kb_prefix, spec.agent_type)

    def worker(self, kb_slug: str, agent_type: str) -> RetrievalWorker:
        if agent_type not in self.registry:
            raise UnknownWorker(f"no worker type '{agent_type}'")
        key = format_worker_name(kb_slug, agent_type)
        with self._lock:
            if key not in self._workers:
                self._workers[key] = self.registry[agent_type](kb_slug)
            return self._workers[key]

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._workers)

    def clear(self) -> None:
        with self._lock:
            self._workers.clear()


WORKERS = WorkerPool()
_FANOUT = DatabaseThreadPool(max_workers=8, thread_name_prefix="chat-worker")


@dataclass(frozen=True)
class RagRunSpec:
    kb_slug: str
    agent_type: str = DEFAULT_AGENT
    queries: tuple[str, ...] = ()
    agent_mode: str = AGENT_MODE
    part: str = ""  # the part of a compound question this worker searches for ("" for the whole)

    @property
    def worker_name(self) -> str:
        return format_worker_name(self.kb_slug, self.agent_type, self.agent_mode)


@dataclass(frozen=True)
class PartFound:
    """What was searched for one part of a compound question: the pipeline gates and answers it alone."""

    question: str
    results: tuple[RetrievalResult, ...]
    agent_type: str = ""


# Agents that cut a compound question into sub-questions or tasks of their own and report
# what each found (worker output "parts_found"); the others get one worker per part.
SELF_SPLITTING_AGENTS = frozenset({"deep_research_agent", "plan_execute_agent"})


@dataclass
class FanOut:
    """What a plan's workers returned, in plan order; the pipeline merges it once."""

    results: list[RetrievalResult] = field(default_factory=list)
    parts: list[PartFound] = field(default_factory=list)  # per part of a compound question, when searched so
    tool_results: list[Any] = field(default_factory=list)  # the tool calls an agent made (ToolResult)
    errors: list[str] = field(default_factory=list)  # "worker: why" for each that failed or timed out
    incomplete: list[str] = field(default_factory=list)  # why workers stopped short, failures included


def plan_for(kb_slug: str, agent_type: str, queries: Sequence[str], parts: Sequence[str] = ()) -> list[RagRunSpec]:
    """The workers to run: the chosen type; for "auto", graph_agent for a question about how
    things relate (or what themes exist), else the default one.

    A compound question (two `parts` or more, chat.pipeline.compound) gets one worker per part,
    "auto" choosing for each part, except for the agents that split a question themselves:
    they get it whole and report what each of their sub-questions or tasks found.
    """
    auto = agent_type in ("", "auto")
    if len(parts) >= 2 and agent_type not in SELF_SPLITTING_AGENTS:
        return [RagRunSpec(kb_slug, auto_agent(part) if auto else agent_type, (part,), part=part) for part in parts]
    chosen = agent_type
    if auto:
        chosen = auto_agent(queries[0]) if queries else DEFAULT_AGENT
    if chosen in ("deep_research_agent", "plan_execute_agent", "react_agent", "fusion_agent"):
        # It decomposes and rephrases the question itself, in rounds: the rewrite's variants
        # would only repeat that work.
        queries = list(queries)[:1]
    return [RagRunSpec(kb_slug, chosen, tuple(queries))]


def run_plan(
    plan: Sequence[RagRunSpec],
    *,
    kb: KnowledgeBase,
    thread_id: str = "",
    pool: WorkerPool = WORKERS,
    timeout_s: float | None = None,
    **overrides: Any,
) -> FanOut:
    """Run the plan's workers over `kb` side by side (one alone runs inline), each within the timeout."""
    timeout = settings.CHAT_WORKER_TIMEOUT_S if timeout_s is None else timeout_s
    overrides = {**overrides, "kb": kb}
    if len(plan) == 1:
        return _gather([(plan[0], _run_spec(pool, plan[0], thread_id, overrides), "")])
    futures = [
        _FANOUT.submit(contextvars.copy_context().run, _run_spec, pool, spec, thread_id, overrides) for spec in plan
    ]
    wait(futures, timeout=timeout)
    outcomes = []
    for spec, future in zip(plan, futures, strict=True):
        if not future.done():
            future.cancel()
            outcomes.append((spec, [], f"{spec.worker_name}: timed out after {timeout:g}s"))
        elif future.exception() is not None:
            outcomes.append((spec, [], f"{spec.worker_name}: {future.exception()}"))
        else:
            outcomes.append((spec, future.result(), ""))
    return _gather(outcomes)


def _run_spec(pool: WorkerPool, spec: RagRunSpec, thread_id: str, overrides: dict[str, Any]) -> list[dict[str, Any]]:
    worker = pool.worker(spec.kb_slug, spec.agent_type)
    if spec.part and overrides.get("on_event") is not None:
        # What a worker reports names the part it works on, so each part's steps can be told apart.
        on_event = overrides["on_event"]
        overrides = {**overrides, "on_event": lambda kind, data: on_event(kind, {**data, "part": spec.part})}
    return [worker.retrieve_with_trace(query, thread_id, **overrides) for query in spec.queries]


def _gather(outcomes: Sequence[tuple[RagRunSpec, list[dict[str, Any]], str]]) -> FanOut:
    """The workers' outputs side by side, in plan order: `collect_search` merges their references.

    Each part of a compound question keeps its own results too: a worker's for the part it
    searched, or the parts an agent that splits questions itself reported."""
    gathered = FanOut()
    for spec, outputs, error in outcomes:
        if error:
            gathered.errors.append(error)
            gathered.incomplete.append(error)
        for output in outputs:
            gathered.results.extend(output["retrieval_results"])
            gathered.tool_results.extend(output.get("tool_results", ()))
            if output.get("incomplete"):
                gathered.incomplete.append(output["incomplete"])
            gathered.parts.extend(
                PartFound(question, (result,), spec.agent_type) for question, result in output.get("parts_found", ())
            )
        if spec.part:
            found = tuple(result for output in outputs for result in output["retrieval_results"])
            gathered.parts.append(PartFound(spec.part, found, spec.agent_type))
    return gathered
