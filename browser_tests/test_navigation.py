"""In a real browser: the skip link, the current section, the menu on a phone, the short name
filled from the name, a 404 for a knowledge base that is not there, and times in the reader's zone."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Page, expect

from .test_upload import log_in


def test_navigation_works_by_keyboard_on_a_phone_and_when_lost(page: Page, screenshots):
    log_in(page)
    page.locator(".topnav").get_by_role("link", name="Knowledge bases").click()
    page.wait_for_url("**/kb/")
    expect(page.locator(".topnav a[aria-current=page]")).to_have_text("Knowledge bases")

    page.keyboard.press("Tab")
    skip = page.locator(".skip-link")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("#main")).to_be_focused()

    page.get_by_role("link", name="New knowledge base").first.click()
    page.fill("#id_name", "Ops Handbook 2026")
    expect(page.locator("#id_slug")).to_have_value("ops-handbook-2026")
    page.fill("#id_slug", "ops")
    page.fill("#id_name", "Ops Handbook 2027")
    expect(page.locator("#id_slug")).to_have_value("ops")  # a short name the user typed stays
    expect(page.get_by_text("kb_prefix")).to_have_count(0)

    page.set_viewport_size({"width": 390, "height": 844})
    expect(page.locator(".topnav")).to_be_hidden()
    page.locator(".mobile-nav summary").click()
    menu = page.locator(".mobile-nav nav")
    expect(menu).to_be_visible()
    page.screenshot(path=str(screenshots / "navigation-menu-390.png"))
    menu.get_by_role("link", name="Chat").click()
    page.wait_for_url("**/")
    expect(page.locator("#chat-message")).to_be_visible()

    # The test server runs with DEBUG on, so Django's own 404 page shows here; the friendly one
    # (templates/404.html) is checked with DEBUG off in agentic_rag/tests/test_pages.py.
    response = page.goto(page.url.rstrip("/") + "/kb/no-such-kb/")
    assert response is not None and response.status == 404


@pytest.mark.parametrize(("locale", "clock"), [("en-GB", "%H:%M"), ("en-US", "%I:%M")])
def test_times_show_in_the_readers_zone_and_clock(browser, server, locale, clock):
    """The English interface writes a time in the reader's zone, on the reader's own clock:
    24-hour for a British browser, 12-hour for an American one."""
    context = browser.new_context(base_url=server, timezone_id="Asia/Tokyo", locale=locale)
    page = context.new_page()
    try:
        log_in(page)
        page.goto("/settings/tokens/")
        page.fill("input[name=name]", f"zone check {locale}")
        page.get_by_role("button", name="Create token").click()
        time = page.locator("table.tokens time").first
        expect(time).to_have_attribute("title", re.compile(r"\d{4}-\d\d-\d\dT"))
        moment = datetime.fromisoformat(time.get_attribute("datetime")).astimezone(ZoneInfo("Asia/Tokyo"))
        expect(time).to_contain_text(moment.strftime(clock))
    finally:
        context.close()
