"""In a real browser: a chat's title uses the width it has, and dates are written in the
interface's language, not the browser's."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from .test_upload import log_in

QUESTION = "What should the team write down after an outage that affected several customers?"


def test_it_shows_a_long_title_and_dates_in_the_pages_language(browser, server, screenshots):
    context = browser.new_context(base_url=server, viewport={"width": 1400, "height": 900}, locale="en-US")
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        log_in(page)
        page.goto("/")
        page.fill("#chat-message", QUESTION)
        page.press("#chat-message", "Enter")
        title = page.locator("#chat-title")
        expect(title).to_have_text(QUESTION[:60].strip())  # as the session names it
        # The whole title shows at 1400 px: it has the toolbar to itself.
        assert title.evaluate("el => el.scrollWidth <= el.clientWidth"), title.bounding_box()
        assert title.bounding_box()["width"] > 600
        page.screenshot(path=str(screenshots / "chat-title-1400.png"))

        trace = page.locator(".msg-assistant").last.get_by_role("link", name=re.compile("Trace"))
        page.goto(trace.get_attribute("href"))
        when = page.locator(".page-header time, main time").first
        expect(when).to_have_text(re.compile(r"^[A-Z][a-z]{2} \d"))  # "Nov 27, 05:36 PM" in English

        # The interface switched to Chinese in an English browser writes its dates in Chinese.
        page.get_by_role("button", name="中文").click()
        expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
        expect(when).to_have_text(re.compile(r"\d+月\d+日"))
        page.screenshot(path=str(screenshots / "trace-date-zh.png"))
        page.set_viewport_size({"width": 390, "height": 844})
        expect(when).to_be_in_viewport()
        page.screenshot(path=str(screenshots / "trace-date-zh-390.png"))
        page.get_by_role("button", name="English").click()
        expect(page.locator("html")).to_have_attribute("lang", "en")
    finally:
        context.close()


def test_how_long_ago_stays_true_while_the_page_stays_open(browser, server, screenshots):
    context = browser.new_context(base_url=server, viewport={"width": 1280, "height": 900}, locale="en-US")
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        log_in(page)
        page.goto("/")
        page.fill("#chat-message", "How long does an incident review take?")
        page.press("#chat-message", "Enter")
        expect(page.locator(".msg-assistant").last).to_be_visible()
        page.clock.install()  # from here the page's timers run on a clock the test moves
        page.reload()
        since = page.locator(".session-link time[data-relative]").first
        expect(since).to_have_text(re.compile(r"^(this minute|now|\d+ seconds? ago|1 minute ago)$"))

        page.clock.fast_forward("07:00")
        expect(since).to_have_text(re.compile(r"^[78] minutes ago$"))
        page.screenshot(path=str(screenshots / "chat-sessions-time-live.png"))
    finally:
        context.close()
