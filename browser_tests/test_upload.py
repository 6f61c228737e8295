"""In a real browser: upload several files, watch them reach "ready" over the websocket."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from .conftest import PASSWORD, USERNAME

MARKDOWN = """# Operations handbook

How the team runs the service, from install to incident review.

## 1 Installation

Install the package, run the migrations and create the first user. The installer writes
the configuration file and checks that the database answers.

### 1.1 Requirements

Python 3.11 or newer, SQLite for a single machine, PostgreSQL and Redis for the full stack.

## 2 Daily operation

Upload documents on the knowledge base page. Each file is parsed, split into sections and
chunked; the table shows its progress live. Concrete work follows GB 50204-2015.

## 3 Incident review

Write down what happened, what was affected and what changes, within two working days.
"""

CHINESE = """第一章 总则

为了加强建筑工程质量管理，统一混凝土结构工程施工质量的验收，保证工程质量，制定本规范。本规范适用于建筑工程混凝土结构施工质量的验收。

第二章 术语

混凝土结构是以混凝土为主制成的结构，包括素混凝土结构、钢筋混凝土结构和预应力混凝土结构。施工单位应建立健全质量管理体系。
"""

HTML = """<!doctype html><html><head><title>Deployment guide</title></head><body>
<h1>Deployment guide</h1>
<p>Serve the application with daphne behind a reverse proxy.</p>
<h2>Workers</h2>
<p>Run Celery workers for the ingestion queue; scale them with the upload volume.</p>
<h2>Backups</h2>
<p>Back up the database every night and test a restore every month.</p>
</body></html>
"""


def log_in(page: Page, username: str = USERNAME) -> None:
    page.goto("/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Knowledge bases", exact=True)).to_be_visible()


def create_kb(page: Page, slug: str, name: str) -> None:
    page.get_by_role("link", name="New knowledge base").first.click()
    page.fill("#id_name", name)
    page.fill("#id_slug", slug)
    page.fill("#id_description", "Handbooks, standards and guides uploaded from the browser test.")
    page.get_by_role("button", name="Create", exact=True).click()
    page.wait_for_url(f"**/kb/{slug}/")


def test_it_uploads_files_and_watches_them_reach_ready(page: Page, tmp_path, screenshots):
    files = {
        "handbook.md": MARKDOWN.encode(),
        "混凝土规范.txt": CHINESE.encode(),
        "deployment.html": HTML.encode(),
        "broken.pdf": b"%PDF-1.7 this file was cut off",  # accepted, then fails to parse
    }
    good = ["handbook.md", "混凝土规范.txt", "deployment.html"]
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    frames: list[str] = []
    page.on(
        "websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(str(payload)))
    )
    requests: list[str] = []
    page.on("request", lambda request: requests.append(f"{request.method} {request.url}"))

    log_in(page)
    create_kb(page, "browser-kb", "Operations library")
    # Progress arrives over the socket: nothing on the page polls.
    assert page.locator("[hx-trigger*='every']").count() == 0
    expect(page.locator("#document-rows")).to_contain_text("No documents yet")

    requests.clear()
    page.set_input_files("#upload-files", [str(tmp_path / name) for name in files])
    expect(page.locator(".outcome-queued")).to_have_count(4)
    for name in good:
        row = page.locator("#document-rows tr", has_text=name)
        expect(row).to_have_attribute("data-status", "ready", timeout=60_000)
    broken = page.locator("#document-rows tr", has_text="broken.pdf")
    expect(broken).to_have_attribute("data-status", "failed", timeout=60_000)
    expect(broken.locator(".error-text")).not_to_be_empty()
    expect(page.locator("#kb-counts .stat-ready dd")).to_have_text("3")
    # The outcome list above the table ends in the rows' final states, without a reload.
    for name in good:
        expect(page.locator(".outcome", has_text=name).locator(".outcome-badge")).to_have_text("Ready")
    expect(page.locator(".outcome", has_text="broken.pdf").locator(".outcome-badge")).to_have_text("Failed")
    # Every column says what it counts: "20 / 5" under "Chunks" is child / parent.
    expect(page.locator("table.documents thead")).to_contain_text("child / parent")
    page.screenshot(path=str(screenshots / "kb-page-upload-outcomes.png"), full_page=True)
    expect(page.locator("#kb-counts .stat-failed dd")).to_have_text("1")
    assert any('data-status="ready"' in frame for frame in frames), "no row arrived over the socket"
    # The table came once on connecting and once more when the upload's result asked for it.
    assert sum(frame.startswith('<tbody id="document-rows"') for frame in frames) >= 2
    posts = [r for r in requests if r.startswith("POST ")]
    assert len(posts) == 1 and posts[0].endswith("/kb/browser-kb/upload/")
    assert not [r for r in requests if r.startswith("GET ") and "/kb/" in r], requests

    # A file dropped on the drop zone goes through the same input.
    drop = page.evaluate_handle(
        """() => {
            const data = new DataTransfer();
            const text = "# Dropped notes\\n\\nDropped on the zone.\\n\\n## Details\\n\\nMore.";
            data.items.add(new File([text], "dropped.md", {type: "text/markdown"}));
            return data;
        }"""
    )
    page.dispatch_event("[data-dropzone]", "drop", {"dataTransfer": drop})
    expect(page.locator("#document-rows tr", has_text="dropped.md")).to_have_attribute(
        "data-status", "ready", timeout=60_000
    )

    # A file of an unsupported type is refused with its reason; the table is unchanged.
    bad = tmp_path / "setup.exe"
    bad.write_bytes(b"MZ\x90\x00 not a document")
    page.set_input_files("#upload-files", str(bad))
    rejected = page.locator(".outcome-rejected")
    expect(rejected).to_contain_text("setup.exe")
    expect(rejected).to_contain_text(re.compile(r"unsupported file type '\.exe'"))
    expect(page.locator("#document-rows tr")).to_have_count(5)
    page.screenshot(path=str(screenshots / "kb-page.png"), full_page=True)

    # A dropped file has its row from the moment it is dropped, before the server has it.
    held = []
    page.route("**/kb/browser-kb/upload/", lambda route: held.append(route))
    late = tmp_path / "late.md"
    late.write_text("# Late\n\nArrives after a slow upload.", encoding="utf-8")
    page.set_input_files("#upload-files", str(late))
    pending = page.locator("#document-rows tr[data-upload-pending]", has_text="late.md")
    expect(pending).to_be_visible()
    expect(pending).to_contain_text("Uploading")
    page.screenshot(path=str(screenshots / "kb-page-uploading.png"))
    for _ in range(100):  # the route handler runs when Playwright next listens to the page
        if held:
            break
        page.wait_for_timeout(50)
    held[0].continue_()
    page.unroute("**/kb/browser-kb/upload/")
    expect(page.locator("#document-rows tr", has_text="late.md")).to_have_attribute("data-status", "ready", timeout=60_000)
    expect(page.locator("[data-upload-pending]")).to_have_count(0)

    # A failed row offers a retry, which runs the ingestion again (this file stays broken).
    with page.expect_response(lambda response: "/reingest/" in response.url) as retried:
        broken.get_by_role("button", name="Retry broken.pdf").click()
    assert retried.value.ok
    expect(broken).to_have_attribute("data-status", "failed", timeout=60_000)

    page.locator("#document-rows a", has_text="handbook.md").click()
    expect(page.get_by_role("heading", name="handbook.md")).to_be_visible()
    outline = page.locator(".outline-list")
    expect(outline).to_contain_text("Installation")
    expect(outline).to_contain_text("Incident review")
    expect(page.locator("[data-document-text]")).to_contain_text("Incident review")
    page.screenshot(path=str(screenshots / "document-page.png"), full_page=True)

    page.click("[data-theme-toggle]")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    page.go_back()
    expect(page.locator("#document-rows tr")).to_have_count(6)
    page.screenshot(path=str(screenshots / "kb-page-dark.png"), full_page=True)


def test_it_switches_and_remembers_the_theme(page: Page):
    log_in(page)
    html = page.locator("html")
    expect(html).to_have_attribute("data-theme", "light")  # the browser prefers light
    page.click("[data-theme-toggle]")
    expect(html).to_have_attribute("data-theme", "dark")
    page.reload()
    expect(html).to_have_attribute("data-theme", "dark")
    page.click("[data-theme-toggle]")
    page.reload()
    expect(html).to_have_attribute("data-theme", "light")


def test_it_follows_the_system_theme_by_default(browser, server):
    context = browser.new_context(base_url=server, color_scheme="dark", locale="en-US")
    page = context.new_page()
    page.goto("/login/")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    context.close()
