"""In a real browser: ingest a few files, then watch one query go through every retrieval stage."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from .test_upload import CHINESE, HTML, MARKDOWN, create_kb, log_in

QUERY = "How often should the database be backed up?"


def upload_and_wait(page: Page, tmp_path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    page.set_input_files("#upload-files", [str(tmp_path / name) for name in files])
    for name in files:
        row = page.locator("#document-rows tr", has_text=name)
        expect(row).to_have_attribute("data-status", "ready", timeout=90_000)


def test_it_shows_every_stage_of_a_query(page: Page, browser, tmp_path, screenshots):
    log_in(page)
    create_kb(page, "playground-kb", "Operations playground")
    files = {
        "handbook.md": MARKDOWN.encode(),
        "混凝土规范.txt": CHINESE.encode(),
        "deployment.html": HTML.encode(),
    }
    upload_and_wait(page, tmp_path, files)

    page.get_by_role("link", name="Playground").click()
    page.wait_for_url("**/kb/playground-kb/playground/")
    expect(page.get_by_role("heading", name="Retrieval playground")).to_be_visible()
    expect(page.locator("#playground-results")).to_contain_text("Type a query")

    htmx_requests: list[str] = []
    page.on("request", lambda r: htmx_requests.append(r.url) if r.headers.get("hx-request") else None)
    page.fill("input[name=q]", QUERY)
    page.select_option("select[name=mode]", "hybrid")
    page.select_option("select[name=rerank]", "on")  # an untuned hashing KB starts with it off
    page.get_by_role("button", name="Search").click()

    results = page.locator("#playground-results")
    expect(results.locator('[data-leg="bm25"]')).to_be_visible()
    expect(results.locator('[data-leg="vector"]')).to_be_visible()
    expect(results.locator('[data-leg="bm25"] tbody tr').first).to_be_visible()
    for heading in ("Timings", "Fused list", "Rerank", "Final list", "Quality gate"):
        expect(results.get_by_role("heading", name=heading)).to_be_visible()
    verdicts = results.locator(".pg-verdict")
    expect(verdicts.first).to_be_visible()
    expect(verdicts.first.locator(".pg-mark")).to_have_text(re.compile("[✓✗]"))
    expect(verdicts.first.locator(".pg-reason")).not_to_be_empty()
    expect(results.locator(".pg-final-list")).to_contain_text("deployment.html")
    # htmx swapped the results in place and put the query in the address bar.
    assert len(htmx_requests) == 1 and "q=" in htmx_requests[0]
    expect(page).to_have_url(re.compile(r"/playground/\?q=How(%20|\+)often.*&mode=hybrid"))
    page.screenshot(path=str(screenshots / "playground.png"), full_page=True)

    page.click("[data-theme-toggle]")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    page.screenshot(path=str(screenshots / "playground-dark.png"), full_page=True)

    # Multi-path mode shows its four recall paths.
    page.select_option("select[name=mode]", "multipath")
    page.get_by_role("button", name="Search").click()
    expect(results.locator('[data-leg="parent_hybrid"]')).to_be_visible()
    expect(results.get_by_role("heading", name="Recall paths")).to_be_visible()
    page.click("[data-theme-toggle]")

    # An empty query is explained, not an error page.
    page.fill("input[name=q]", "   ")
    page.get_by_role("button", name="Search").click()
    expect(results.locator(".pg-query-error")).to_contain_text("the query is empty")

    # Without JavaScript the same form is a plain GET that renders the whole page.
    context = browser.new_context(
        base_url=page.url.split("/kb/")[0],
        java_script_enabled=False,
        storage_state=page.context.storage_state(),
    )
    plain = context.new_page()
    plain.goto("/kb/playground-kb/playground/")
    plain.fill("input[name=q]", "backups restore")
    plain.get_by_role("button", name="Search").click()
    expect(plain.locator('#playground-results [data-leg="bm25"]')).to_be_visible()
    expect(plain.locator("#playground-results .pg-verdict").first).to_be_visible()
    context.close()
