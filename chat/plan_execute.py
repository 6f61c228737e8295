"""plan_execute_agent (Plan-Execute-Report): a plan of search tasks, run in dependency order.

- Planner: a configured model answers a PlanSpec as JSON; offline (or when the model fails)
  the question is classified by rules (comparative, relational, procedural, analytical,
  factual) and cut into one task per part, with a last task over the whole question that
  depends on the others when the parts must be put together (comparisons and relations).
- Reviewer: a task naming an unknown tool or depending on an unknown task, and a cycle of
  dependencies, make the plan's status "issues"; such tasks are not run and the answer says so.
- Executor: tasks in topological order, the independent ones side by side, each within
  `TASK_TIMEOUT_S`; a task whose dependency failed is skipped.
- Reporter: before the answer is written, it checks that every task found evidence, that
  the evidence holds the question's words, and whether two documents give different numbers
  for the same term; what it finds goes into the warnings and the `report` event.
"""

from __future__ import annotations

import dataclasses
import graphlib
import re
import uuid
from collections.abc import Callable
from concurrent.futures import wait
from dataclasses import dataclass, field
from typing import Any

from agentic_rag.db_threads import DatabaseThreadPool
from agentic_rag.llm import get_llm
from knowledge.analysis import analyze
from knowledge.candidates import Candidate
from knowledge.fusion import expand_query
from knowledge.models import KnowledgeBase
from knowledge.retrieval import RetrievalResult, retrieve

from .agent_support import (
    RunModel,
    ask_model,
    combined_result,
    graph_mode,
    search_params,
    the_kb,
    worker_output,
)
from .deep_research import SubQuestion, interleave, rule_decompose
from .pipeline.compound import split_question
from .pipeline.stages import evidence_coverage

QUESTION_TYPES = ("comparative", "relational", "factual", "analytical", "procedural")
TOOLS = ("kb_search", "graph_search")
TASK_TIMEOUT_S = 10.0
MAX_TASKS = 6
_POOL = DatabaseThreadPool(max_workers=4, thread_name_prefix="plan-execute")

_TYPE_RULES: tuple[tuple[str, re.Pattern], ...] = (
    ("comparative", re.compile(r"(?i)区别|不同|对比|比较|相比|异同|\bvs\.?\b|versus|differ|compare|comparison|better than")),
    ("relational", re.compile(r"(?i)关系|联系|依赖|影响|之间|relat|depend|affect|between|connect")),
    ("procedural", re.compile(r"(?i)如何|怎么|怎样|步骤|流程|\bhow (?:do|to|can|should)\b|steps?\b|procedure")),
    ("analytical", re.compile(r"(?i)为什么|为何|原因|\bwhy\b|reason")),
)
_NUMBER_AFTER_TERM = re.compile(r"([A-Za-z_\u4e00-\u9fff][\w\u4e00-\u9fff-]{1,30})\D{0,12}?(\d+(?:\.\d+)?\s*%?)")

OnEvent = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class Task:
    task_id: str
    tool: str
    query: str
    priority: int = 1
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlanSpec:
    plan_id: str
    question_type: str
    tasks: tuple[Task, ...]
    status: str = "ready"  # ready | needs_clarification | issues
    issues: tuple[str, ...] = ()
    planner: str = "rules"

    def as_event(self) -> dict[str, Any]:
        return {
            "plan_id": self.plan_id, "question_type": self.question_type, "status": self.status,
            "issues": list(self.issues), "planner": self.planner,
            "tasks": [dataclasses.asdict(t) | {"depends_on": list(t.depends_on)} for t in self.tasks],
        }


@dataclass
class TaskRun:
    task: Task
    status: str = "pending"  # pending | done | failed | skipped
    evidence: list[Candidate] = field(default_factory=list)
    error: str = ""
    result: RetrievalResult | None = None


def question_type(question: str) -> str:
    return next((kind for kind, pattern in _TYPE_RULES if pattern.search(question)), "factual")


_COMPARED = (
    re.compile(r"^(?:请问)?(.{2,30}?)(?:和|与|跟|同)(.{2,30}?)(?:之间)?(?:的|有)?(?:什么|哪些)?(?:区别|不同|差异|异同|对比)"),
    re.compile(r"(?i)between (.{2,60}?) and (.{2,60}?)[?？.]?$"),
    re.compile(r"(?i)^(?:how does |how do |compare )?(.{2,60}?) (?:differ from|compare with|compare to|vs\.?|versus|and) (.{2,60}?)(?: differ| compare)?[?？.]?$"),
)


def compared(question: str) -> list[str]:
    """The two things a comparison names ("A 和 B 的区别", "between A and B"), if it names two."""
    for pattern in _COMPARED:
        match = pattern.search(question.strip())
        if match:
            return [match.group(1).strip(), match.group(2).strip()]
    return []


def rule_plan(question: str) -> PlanSpec:
    kind = question_type(question)
    parts = rule_decompose(question)
    if kind == "comparative" and len(parts) == 1:
        parts = compared(question) or parts
    tool = "graph_search" if kind == "relational" else "kb_search"
    tasks = [Task(f"t{i}", tool, part) for i, part in enumerate(parts, 1)]
    if len(tasks) > 1 and kind in ("comparative", "relational"):
        # Putting the parts together needs the passages that mention them side by side.
        tasks.append(Task(f"t{len(tasks) + 1}", "kb_search", question, 2, tuple(t.task_id for t in tasks)))
    status = "ready" if analyze(question) else "needs_clarification"
    return review(PlanSpec(uuid.uuid4().hex[:8], kind, tuple(tasks), status))


def model_plan(question: str, llm: Any) -> PlanSpec | None:
    """The model's plan, reviewed; None when no model answered a usable one."""
    reply = ask_model(
        llm,
        "Plan the searches that answer the user's question over a knowledge base. "
        f"Tools: {', '.join(TOOLS)}. At most {MAX_TASKS} tasks; a task may depend on others.",
        question,
        '{"question_type": "' + "|".join(QUESTION_TYPES) + '", "tasks": [{"task_id": str, "tool": str, '
        '"query": str, "priority": int, "depends_on": [str]}]}',
        field="tasks", max_tokens=500,
    )
    tasks = reply.get("tasks") if reply else None
    if not isinstance(tasks, list):
        return None
    parsed = []
    for item in tasks[:MAX_TASKS]:
        if isinstance(item, dict) and isinstance(item.get("query"), str) and item["query"].strip():
            depends = item.get("depends_on") if isinstance(item.get("depends_on"), list) else []
            parsed.append(Task(
                str(item.get("task_id") or f"t{len(parsed) + 1}"), str(item.get("tool") or "kb_search"),
                item["query"].strip(), _priority(item.get("priority")),
                tuple(str(d) for d in depends),
            ))
    if not parsed:
        return None
    kind = reply.get("question_type") if reply.get("question_type") in QUESTION_TYPES else question_type(question)
    return review(PlanSpec(uuid.uuid4().hex[:8], kind, tuple(parsed), planner="model"))


def _priority(value: Any) -> int:
    return int(value) if str(value).isdigit() and int(value) > 0 else 1


def review(plan: PlanSpec) -> PlanSpec:
    """Check tools, dependencies and cycles; a plan with problems has status "issues"."""
    issues = []
    ids = {t.task_id for t in plan.tasks}
    for task in plan.tasks:
        if task.tool not in TOOLS:
            issues.append(f"task {task.task_id}: unknown tool '{task.tool}'")
        for dependency in task.depends_on:
            if dependency not in ids:
                issues.append(f"task {task.task_id}: depends on unknown task '{dependency}'")
    try:
        graphlib.TopologicalSorter({t.task_id: [d for d in t.depends_on if d in ids] for t in plan.tasks}).prepare()
    except graphlib.CycleError as error:
        issues.append(f"the tasks {' → '.join(error.args[1])} depend on each other in a cycle")
    if issues:
        return dataclasses.replace(plan, status="issues", issues=tuple(issues))
    return plan


def runnable(plan: PlanSpec) -> set[str]:
    """The tasks the executor may run: known tools, known dependencies, outside any cycle."""
    bad = {i.split(":")[0].removeprefix("task ") for i in plan.issues if i.startswith("task ")}
    cycle = next((i for i in plan.issues if "cycle" in i), "")
    in_cycle = {t.task_id for t in plan.tasks if re.search(rf"(?<![\w]){re.escape(t.task_id)}(?![\w])", cycle)}
    return {t.task_id for t in plan.tasks} - bad - in_cycle


class PlanExecuteWorker:
    """Plan, execute and report over one KB; never generates."""

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
        mode: str | None = None,  # each tool searches in its own mode
        on_event: OnEvent | None = None,
        llm: Any = None,
        user: Any = None,  # who asks: only agents with memory use it
        task_timeout_s: float = TASK_TIMEOUT_S,
        tools: Any = None,  # the tool channel: only the ReAct agent calls tools
    ) -> dict[str, Any]:
        kb = the_kb(self.kb_slug, kb)
        llm = RunModel(llm if llm is not None else get_llm())
        emit = on_event or (lambda kind, data: None)
        plan = model_plan(query, llm)
        if plan is None or len(_part_tasks(plan)) < len(split_question(query, analyze)):
            # A question that asks two things gets a task for each, whatever the model planned.
            plan = rule_plan(query)
        emit("plan", plan.as_event())
        tools = {
            "kb_search": search_params(kb, "hybrid", top_k=top_k, rerank=rerank),
            "graph_search": search_params(kb, graph_mode(kb), top_k=top_k, rerank=rerank),
        }
        runs = execute(plan, lambda task: (retriever or retrieve)(task.query, kb, tools[task.tool]),
                       emit=emit, timeout_s=task_timeout_s)
        references, warnings = report(query, plan, runs, limit=tools["kb_search"].top_k)
        emit("report", {"warnings": warnings, "references": len(references)})
        searches = [run.result for run in runs if run.result is not None]
        unfinished = [*plan.issues, *(f"task {r.task.task_id} {r.status}: {r.error}" for r in runs if r.status != "done")]
        output = worker_output(combined_result(
            query, "plan_execute", searches, references, warnings=warnings, parts=[run.task.query for run in runs]
        ), incomplete="; ".join(unfinished))
        part_runs = [run for run in runs if not run.task.depends_on]
        if len(part_runs) > 1:  # each part's task and what it found, for an answer part by part
            output["parts_found"] = [
                (run.task.query, run.result or combined_result(run.task.query, "plan_execute", (), ())) for run in part_runs
            ]
        return output


def _part_tasks(plan: PlanSpec) -> list[Task]:
    """The tasks that each search for a part of the question (not the ones putting parts together)."""
    return [task for task in plan.tasks if not task.depends_on]


def execute(plan: PlanSpec, search: Callable[[Task], RetrievalResult], *, emit: OnEvent, timeout_s: float) -> list[TaskRun]:
    """Run the runnable tasks in dependency order, independent ones side by side."""
    runs = {t.task_id: TaskRun(t) for t in plan.tasks}
    allowed = runnable(plan)
    for task_id in set(runs) - allowed:
        runs[task_id].status, runs[task_id].error = "failed", "not run: " + "; ".join(plan.issues)
        emit("task", {"task_id": task_id, "status": "failed", "error": runs[task_id].error})
    sorter = graphlib.TopologicalSorter({t: [d for d in runs[t].task.depends_on if d in allowed] for t in allowed})
    sorter.prepare()
    while sorter.is_active():
        ready = sorted(sorter.get_ready(), key=lambda t: runs[t].task.priority)
        to_run = [t for t in ready if all(runs[d].status == "done" for d in runs[t].task.depends_on)]
        for task_id in set(ready) - set(to_run):
            runs[task_id].status, runs[task_id].error = "skipped", "a task it depends on failed"
            emit("task", {"task_id": task_id, "status": "skipped", "error": runs[task_id].error})
        futures = {t: _POOL.submit(search, runs[t].task) for t in to_run}
        wait(futures.values(), timeout=timeout_s)
        for task_id, future in futures.items():
            run = runs[task_id]
            if not future.done():
                future.cancel()
                run.status, run.error = "failed", f"timed out after {timeout_s:g}s"
            elif future.exception() is not None:
                run.status, run.error = "failed", str(future.exception())
            else:
                run.result = future.result()
                run.evidence = list(run.result.references)
                run.status = "done"
            emit("task", {"task_id": task_id, "status": run.status, "error": run.error,
                          "found": sorted({c.doc_name for c in run.evidence})})
        sorter.done(*ready)
    return list(runs.values())


def report(question: str, plan: PlanSpec, runs: list[TaskRun], *, limit: int) -> tuple[list[Candidate], list[str]]:
    """The references, every task's best evidence first, and what the checks found."""
    warnings = list(plan.issues)
    for run in runs:
        if run.status != "done":
            warnings.append(f"task {run.task.task_id} ({run.task.query}) {run.status}: {run.error}")
        elif not run.evidence:
            warnings.append(f"task {run.task.task_id} ({run.task.query}) found no evidence")
    parts = [SubQuestion(r.task.query, evidence=r.evidence) for r in runs if r.evidence]
    references = interleave(parts, limit=limit)
    whole = set(analyze(question))
    held = set(analyze(" ".join(c.text for c in references)))
    if references and whole and len(whole & held) / len(whole) < 0.5:
        best = evidence_coverage(question, references, tokenize=analyze, expand=expand_query)
        warnings.append(f"the evidence holds {len(whole & held)} of the question's {len(whole)} terms (best passage {best:.0%})")
    warnings.extend(contradictions(references, whole))
    return references, warnings


def contradictions(references: list[Candidate], terms: set[str]) -> list[str]:
    """Terms of the question that two documents follow with different numbers."""
    seen: dict[str, dict[str, str]] = {}
    for candidate in references:
        for term, number in _NUMBER_AFTER_TERM.findall(candidate.text):
            key = " ".join(analyze(term))
            if key and key in terms:
                seen.setdefault(key, {}).setdefault(number.replace(" ", ""), candidate.doc_name)
    return [
        f"the sources give different values for '{term}': " + ", ".join(f"{n} ({d})" for n, d in values.items())
        for term, values in seen.items()
        if len(values) > 1 and len(set(values.values())) > 1
    ]
