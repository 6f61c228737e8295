from __future__ import annotations

import json

import pytest

from chat.plan_execute import (
    PlanExecuteWorker,
    PlanSpec,
    Task,
    contradictions,
    execute,
    question_type,
    review,
    rule_plan,
)
from chat.tests.conftest import Events, model_router
from graphrag.tests.test_build import ingest
from knowledge.candidates import Candidate
from knowledge.retrieval import RetrievalResult

# Tasks run side by side in threads, which see only committed rows.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("混合检索和多路召回有什么区别？", "comparative"),
        ("How does BM25 differ from vector search?", "comparative"),
        ("GraphRAG 和 networkx 的关系是什么？", "relational"),
        ("如何部署全栈模式？", "procedural"),
        ("Why is the rerank limited to the top 10?", "analytical"),
        ("What is the RRF constant?", "factual"),
    ],
)
def test_questions_are_typed_by_rules(question, kind):
    assert question_type(question) == kind


def test_a_comparison_becomes_one_task_per_side_and_a_last_one_after_both():
    plan = rule_plan("混合检索和多路召回有什么区别？")

    assert plan.status == "ready" and plan.planner == "rules"
    assert [(t.query, t.depends_on) for t in plan.tasks] == [
        ("混合检索", ()), ("多路召回", ()), ("混合检索和多路召回有什么区别？", ("t1", "t2")),
    ]


def test_review_finds_unknown_tools_unknown_tasks_and_cycles():
    plan = review(PlanSpec("p", "factual", (
        Task("a", "kb_search", "x", depends_on=("b",)), Task("b", "kb_search", "y", depends_on=("a",)),
        Task("c", "web_search", "z"), Task("d", "kb_search", "w", depends_on=("nope",)), Task("e", "kb_search", "v"),
    )))

    assert plan.status == "issues"
    text = " ".join(plan.issues)
    assert "unknown tool 'web_search'" in text and "unknown task 'nope'" in text and "cycle" in text


def _candidate(chunk_id: int, doc: str, text: str = "") -> Candidate:
    return Candidate(chunk_id=chunk_id, doc_id=chunk_id, doc_name=doc, text=text or doc)


def test_the_executor_runs_in_dependency_order_skips_after_failures_and_times_out():
    plan = review(PlanSpec("p", "factual", (
        Task("t1", "kb_search", "one"), Task("t2", "kb_search", "hangs"),
        Task("t3", "kb_search", "after one", depends_on=("t1",)), Task("t4", "kb_search", "after hang", depends_on=("t2",)),
        Task("t5", "kb_search", "raises"), Task("loop1", "kb_search", "x", depends_on=("loop2",)),
        Task("loop2", "kb_search", "y", depends_on=("loop1",)), Task("t6", "made_up", "z"),
    )))
    order: list[str] = []

    def search(task: Task) -> RetrievalResult:
        order.append(task.query)
        if task.query == "hangs":
            import time

            time.sleep(1.0)
        if task.query == "raises":
            raise RuntimeError("tool broke")
        result = RetrievalResult(query=task.query, mode="hybrid")
        result.candidates = [_candidate(len(order), f"{task.task_id}.md")]
        return result

    events = []
    runs = {r.task.task_id: r for r in execute(plan, search, emit=lambda k, d: events.append((k, d)), timeout_s=0.2)}

    assert runs["t1"].status == "done" and runs["t3"].status == "done"
    assert order.index("one") < order.index("after one")
    assert runs["t2"].status == "failed" and "timed out" in runs["t2"].error
    assert runs["t4"].status == "skipped"
    assert runs["t5"].status == "failed" and "tool broke" in runs["t5"].error
    assert runs["loop1"].status == runs["loop2"].status == runs["t6"].status == "failed"
    assert "x" not in order and "z" not in order  # never run
    assert {d["task_id"] for k, d in events if k == "task"} == set(runs)


def test_the_reporter_flags_sources_that_disagree_on_a_number():
    refs = [_candidate(1, "a.md", "The RRF constant k is 60."), _candidate(2, "b.md", "The RRF constant k is 40.")]

    (warning,) = contradictions(refs, {"constant"})

    assert "60 (a.md)" in warning and "40 (b.md)" in warning


def test_a_plan_runs_against_the_kb_and_reaches_both_sides(kb):
    ingest(kb)
    events = []

    output = PlanExecuteWorker(kb.slug).retrieve_with_trace(
        "What is the difference between Celery and LightRAG?", on_event=lambda k, d: events.append((k, d))
    )

    assert [k for k, _ in events][0] == "plan" and events[-1][0] == "report"
    assert {"ops.md", "graph.md"} <= {c.doc_name for c in output["reference"]}
    assert output["retrieval_results"][0].mode == "plan_execute" and output["incomplete"] == ""


def test_the_models_plan_is_used_and_a_bad_one_falls_back_to_the_rules(kb, fake_server):
    ingest(kb)
    server = fake_server
    llm = model_router(server)
    plan = {"question_type": "factual", "tasks": [
        {"task_id": "a", "tool": "kb_search", "query": "Celery broker", "priority": 1, "depends_on": []},
        {"task_id": "b", "tool": "teleport", "query": "x", "priority": 1, "depends_on": ["a"]}]}
    server.reply(json.dumps(plan))
    events = []
    output = PlanExecuteWorker(kb.slug).retrieve_with_trace("Which broker?", llm=llm, on_event=lambda k, d: events.append((k, d)))
    shown = events[0][1]
    assert shown["planner"] == "model" and shown["status"] == "issues"
    assert any("unknown tool 'teleport'" in w for w in output["retrieval_results"][0].warnings)
    assert "ops.md" in {c.doc_name for c in output["reference"]}
    assert "unknown tool 'teleport'" in output["incomplete"]

    server.reply("no plan today")
    events.clear()
    PlanExecuteWorker(kb.slug).retrieve_with_trace("Which broker does Celery use?", llm=llm, on_event=lambda k, d: events.append((k, d)))
    assert events[0][1]["planner"] == "rules"


def test_the_chat_shows_the_plan_its_tasks_and_the_report(alice, kb, extractive):
    from chat.pipeline import ChatOptions, ChatRequest, run_chat

    ingest(kb)
    events = Events()
    run_chat(ChatRequest(alice, None, "What is the difference between Celery and LightRAG?",
                         ChatOptions(kb_slug=kb.slug, agent_type="plan_execute_agent")), emit=events, llm=extractive)

    types = events.types()
    assert types.index("plan") < types.index("task") < types.index("report") < types.index("retrieval")
    assert {"ops.md", "graph.md"} <= {item["doc"] for item in events.one("retrieval").data["evidence"]}


def test_a_whole_answer_is_not_flagged(docs_kb, alice, extractive, events):
    from chat.pipeline import ChatOptions, ChatRequest, run_chat

    options = ChatOptions(kb_slug="alice-kb", agent_type="plan_execute_agent")
    result = run_chat(ChatRequest(alice, None, "How does hybrid search fuse the rankings?", options), emit=events,
                      llm=extractive)

    assert result.status == "done" and not result.partial and result.incomplete == ""
