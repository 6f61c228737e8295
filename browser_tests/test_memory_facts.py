"""In a real browser: facts stated in a chat are listed on the Memory page, recalled and cited as
MEMORY in a later answer, and deleted one at a time or all at once, on a wide screen and a phone."""

from __future__ import annotations

import re
import time

from playwright.sync_api import Page, expect

from .test_upload import log_in

STATEMENT = "我们用 PostgreSQL 15。我是后端工程师。Our team deploys on Kubernetes."
QUESTION = "我们用的数据库是什么版本？"


def send(page: Page, message: str) -> None:
    page.fill("#chat-message", message)
    page.press("#chat-message", "Enter")
    expect(page.locator(".msg-assistant .feedback").last).to_be_visible()  # the answer ended


def open_memory_until(page: Page, count: int, timeout_s: float = 20) -> None:
    """Open the Memory page until it lists `count` facts (they are kept by a background task)."""
    deadline = time.monotonic() + timeout_s
    while True:
        page.goto("/memory/")
        if page.locator(".fact-item").count() == count or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    expect(page.locator(".fact-item")).to_have_count(count)


def test_stated_facts_are_listed_recalled_and_deleted(page: Page, screenshots):
    log_in(page)
    page.goto("/")
    send(page, STATEMENT)
    open_memory_until(page, 3)
    expect(page.locator(".fact-list")).to_contain_text("我们用 PostgreSQL 15")
    expect(page.locator(".fact-list")).to_contain_text("Our team deploys on Kubernetes")
    page.screenshot(path=str(screenshots / "memory-facts.png"), full_page=True)

    # A later question about one of them recalls it, cited as MEMORY.
    page.goto("/")
    send(page, QUESTION)
    answer = page.locator(".msg-assistant").last
    expect(answer).to_contain_text("PostgreSQL 15")
    answer.locator("a.cite").first.click()
    item = page.locator(".evidence-item.is-highlighted")
    expect(item.locator(".ev-source")).to_have_text("MEMORY")
    expect(item.locator(".ev-doc a")).to_have_attribute("href", re.compile(r"^/memory/#fact-\d+"))
    page.screenshot(path=str(screenshots / "memory-fact-cited.png"))

    # Deleted from the page, it is gone at once and the same question no longer recalls it.
    page.get_by_role("link", name="Memory", exact=True).first.click()
    expect(page.locator(".fact-item")).to_have_count(3)
    page.get_by_role("button", name="Delete “我们用 PostgreSQL 15”").click()
    expect(page.locator(".fact-item")).to_have_count(2)
    expect(page.locator(".fact-text")).to_have_text(["Our team deploys on Kubernetes", "我是后端工程师"])
    expect(page.locator(".facts-note")).to_contain_text("Forgot “我们用 PostgreSQL 15”")
    page.goto("/")
    send(page, QUESTION)
    expect(page.locator(".msg-assistant").last).not_to_contain_text("PostgreSQL 15")

    # On a phone: the page through the menu, then everything deleted at once.
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator(".mobile-nav summary").click()
    page.locator(".mobile-nav").get_by_role("link", name="Memory").click()
    expect(page.locator(".fact-item")).to_have_count(2)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing runs off the screen
    page.screenshot(path=str(screenshots / "memory-facts-390.png"), full_page=True)
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete all").click()
    expect(page.locator(".fact-item")).to_have_count(0)
    expect(page.locator(".facts-empty")).to_be_visible()
    page.screenshot(path=str(screenshots / "memory-facts-empty-390.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})
