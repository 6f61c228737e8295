"""In a real browser: a golden set written on the page, a retrieval and an answer run in the
background with live progress, two runs side by side, and a failing question's trace."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from .test_playground import upload_and_wait
from .test_upload import create_kb, log_in

GUIDE = """# Guide

## 1. Fusion

Hybrid search fuses BM25 and vectors with reciprocal rank fusion, k = 60.

## 2. Gate

The quality gate refuses evidence whose best score is below 0.3.
"""


def _add_question(page: Page, qid: str, text: str, keywords: str) -> None:
    page.fill("#id_qid", qid)
    page.fill("#id_text", text)
    page.fill("#id_keywords", keywords)
    page.select_option("#id_relevant", label="guide.md")
    page.get_by_role("button", name="Add").click()
    expect(page.locator("[data-questions]")).to_contain_text(text)


def _run(page: Page, kind: str) -> None:
    page.select_option("#id_kind", kind)
    page.get_by_role("button", name="Run in the background").click()
    row = page.locator("[data-runs] tbody tr").first
    expect(row).to_have_attribute("data-status", "done", timeout=30_000)  # the row polls until then


def test_golden_questions_runs_and_comparison_in_the_browser(page: Page, tmp_path, screenshots):
    log_in(page)
    create_kb(page, "eval-kb", "Evaluated")
    upload_and_wait(page, tmp_path, {"guide.md": GUIDE.encode()})
    page.get_by_role("link", name="Evaluation").click()
    page.wait_for_url(re.compile(r"/kb/eval-kb/evaluation/$"))

    page.fill("#id_name", "written")
    page.get_by_role("button", name="Create").click()
    _add_question(page, "q1", "What constant does reciprocal rank fusion use?", "60")
    _add_question(page, "q2", "Below which score does the gate refuse evidence?", "0.3")
    _add_question(page, "q3", "How long is the warranty?", "two years")  # the documents do not say
    page.get_by_role("link", name="Evaluation").last.click()

    _run(page, "bm25")
    _run(page, "answers")
    runs = page.locator("[data-runs] tbody tr")
    expect(runs).to_have_count(2)
    expect(runs.first).to_contain_text("keyword_pass")
    expect(runs.nth(1)).to_contain_text("ndcg@10")
    expect(page.locator("[data-chart]").first).to_be_visible()

    runs.nth(0).locator("input[name=compare]").check()
    runs.nth(1).locator("input[name=compare]").check()
    page.get_by_role("button", name="Compare selected").click()
    expect(page.locator("[data-compare]")).to_contain_text("ndcg@10")
    expect(page.locator("[data-config-diff]")).to_contain_text("mode")
    page.screenshot(path=str(screenshots / "evaluation-runs.png"), full_page=True)

    page.locator("[data-runs] tbody tr").first.get_by_role("link").first.click()
    failures = page.locator("[data-failures]")
    expect(failures).to_contain_text("How long is the warranty?")
    failures.get_by_role("link", name="trace").first.click()
    page.wait_for_url(re.compile(r"/traces/[0-9a-f-]+/$"))
    page.go_back()
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(screenshots / "evaluation-run-390.png"), full_page=True)
