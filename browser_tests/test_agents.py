"""In a real browser: the agents from the selector — graph evidence, deep research rounds, a
plan with its tasks and ReAct's steps, shown above the answer."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from .test_answers import _ask as ask
from .test_playground import upload_and_wait
from .test_upload import create_kb, log_in

OPS = "# 1 Ops\n\nCelery uses Redis as its broker. Docker runs Redis and Celery.\n"
GRAPH = "# 1 Graph\n\nLightRAG extends GraphRAG. GraphRAG depends on networkx for communities.\n"


def _ask(page: Page, agent: str, question: str):
    page.select_option("select[name=agent_type]", agent)
    return ask(page, question)


def test_the_agents_show_their_graph_evidence_rounds_and_plans(page: Page, tmp_path, screenshots):
    log_in(page)
    create_kb(page, "agents-kb", "Agents")
    upload_and_wait(page, tmp_path, {"ops.md": OPS.encode(), "graph.md": GRAPH.encode()})
    # The graph is built in the background after ingestion; the KB page says when it is there.
    expect(page.locator("#kb-graph")).to_contain_text("entities", timeout=60_000)
    page.get_by_role("link", name="Chat", exact=True).click()
    page.wait_for_url(re.compile(r"/$"))
    page.select_option("select[name=kb]", "agents-kb")

    graph = _ask(page, "graph_agent", "How is LightRAG related to networkx?")
    expect(graph.locator(".answer")).to_contain_text("LightRAG")
    evidence = page.locator(".evidence-list.is-active .evidence-item", has=page.locator(".ev-source", has_text="GRAPH"))
    expect(evidence.first).to_contain_text("relation:")
    page.screenshot(path=str(screenshots / "agent-graph.png"))

    deep = _ask(page, "deep_research_agent", "Which broker does Celery use? What does LightRAG extend?")
    summary = deep.locator("details.research summary")
    expect(summary).to_contain_text("Deep research: 1 round")
    summary.click()
    expect(deep.locator("details.research")).to_contain_text("2 sub-question(s)")
    expect(deep.locator(".answer")).to_contain_text("Redis")
    expect(deep.locator(".answer")).to_contain_text("GraphRAG")
    page.screenshot(path=str(screenshots / "agent-deep-research.png"))

    plan = _ask(page, "plan_execute_agent", "What is the difference between Celery and LightRAG?")
    summary = plan.locator("details.research summary")
    expect(summary).to_contain_text("Plan (comparative, rules): 3 tasks")
    summary.click()
    expect(plan.locator("details.research li")).to_have_count(3)
    expect(plan.locator("details.research")).to_contain_text("done")

    react = _ask(page, "react_agent", "Which broker does Celery use?")
    summary = react.locator("details.research summary")
    expect(summary).to_contain_text("ReAct: 2 steps")
    summary.click()
    expect(react.locator("details.research")).to_contain_text("vector_retrieve")
    expect(react.locator(".answer")).to_contain_text("Redis")
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(screenshots / "agent-plan-390.png"), full_page=True)
