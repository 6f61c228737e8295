"""In a real browser: staff switch web search on in the model settings, and a DeepSearch answer
cites a web page, whose evidence card links to the page and opens at the quote.

The web is a fake SearXNG and a fake page on 127.0.0.1 that this test serves; the app's server
is one of its own, started with WEB_FETCH_ALLOW_HOSTS=127.0.0.1 (only the deployment may open
inside addresses, so the page alone could not).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from chat.web.testing import ZORBLAX_PAGE, FakeWeb, html_route

from .conftest import STAFF_USERNAME, Daphne
from .test_answers import _ask as ask
from .test_playground import upload_and_wait
from .test_upload import create_kb, log_in

OPS = "# 1 Hybrid search\n\nHybrid search fuses the BM25 ranking and the vector ranking with reciprocal rank fusion.\n"
QUESTION = "How does hybrid search fuse the rankings? Which port does the Zorblax daemon listen on?"


@pytest.fixture
def web() -> Iterator[FakeWeb]:
    with FakeWeb() as server:
        server.routes["/zorblax"] = html_route(ZORBLAX_PAGE)
        server.results("/zorblax", titles=("Zorblax daemon manual",))
        yield server


@pytest.fixture
def web_page(browser, tmp_path_factory) -> Iterator[Page]:
    daphne = Daphne(tmp_path_factory.mktemp("web-search"))
    daphne.env["WEB_FETCH_ALLOW_HOSTS"] = "127.0.0.1"
    daphne.start()
    context = browser.new_context(base_url=daphne.base_url, viewport={"width": 1280, "height": 900}, locale="en-US")
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        yield page
    finally:
        context.close()
        daphne.stop()


def test_staff_turn_web_search_on_and_an_answer_cites_a_web_page(web_page: Page, web, tmp_path, screenshots):
    page = web_page
    log_in(page, STAFF_USERNAME)
    page.goto("/settings/models/")
    section = page.locator("#web-search")
    expect(section.locator("[data-web-status]")).to_contain_text("Off")
    section.get_by_label("Search the web").check()
    section.get_by_label("Base URL").fill(web.base_url)
    section.get_by_role("button", name="Save").click()
    expect(page.locator("#web-search [data-web-status]")).to_contain_text(f"On: searxng {web.base_url}")
    page.screenshot(path=str(screenshots / "settings-web-search.png"), full_page=True)

    page.goto("/kb/")
    create_kb(page, "web-kb", "Web search")
    upload_and_wait(page, tmp_path, {"hybrid.md": OPS.encode()})
    page.goto("/")
    page.select_option("select[name=kb]", "web-kb")
    page.select_option("select[name=agent_type]", "deep_research_agent")
    answer = ask(page, QUESTION)
    expect(answer.locator(".answer")).to_contain_text("7431")

    card = page.locator(".evidence-list.is-active .evidence-item", has=page.locator(".ev-source", has_text="WEB"))
    expect(card.first).to_be_visible()
    link = card.first.locator(".ev-doc a")
    expect(link).to_have_text("Zorblax daemon manual")
    expect(link).to_have_attribute("href", re.compile("^" + re.escape(web.url("/zorblax"))))
    expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
    expect(card.first.locator(".ev-url")).to_have_text(web.url("/zorblax"))
    number = card.first.locator(".ev-n").inner_text()
    answer.locator(f"a.cite[data-cite='{number}']").first.click()
    expect(page.locator(".evidence-item.is-highlighted mark.ev-quote")).to_contain_text("7431")
    expect(answer).not_to_contain_text("PWNED")
    page.screenshot(path=str(screenshots / "chat-web-evidence.png"))
