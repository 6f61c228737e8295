"""In a real browser: an evidence card opens at the sentence the answer quoted, even when
that sentence sits far into its chunk, on a wide screen and on a phone's sheet."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from .test_playground import upload_and_wait
from .test_upload import create_kb, log_in

FILLER = (
    "The office plants on the third floor are watered on Mondays by whoever arrives first, "
    "and the ferns by the window get a little more in summer. "
)
QUOTE = "Every incident review names the root cause within forty-eight hours."
HANDBOOK = f"""# Review handbook

## Incident review

{FILLER * 7}{QUOTE} The review is then shared with the whole team.
"""
QUESTION = "Within how many hours does an incident review name the root cause?"


def test_it_opens_the_evidence_at_the_quoted_sentence(page: Page, tmp_path, screenshots):
    assert HANDBOOK.index(QUOTE) > 800
    log_in(page)
    create_kb(page, "quote-kb", "Review handbook")
    upload_and_wait(page, tmp_path, {"review.md": HANDBOOK.encode()})
    page.goto("/")
    page.select_option("select[name=kb]", "quote-kb")
    page.fill("#chat-message", QUESTION)
    page.press("#chat-message", "Enter")

    answer = page.locator(".msg-assistant").last
    expect(answer.locator("a.cite").first).to_be_visible()
    expect(answer).to_contain_text("forty-eight hours")
    answer.locator("a.cite").first.click()
    item = page.locator(".evidence-item.is-highlighted")
    mark = item.locator("mark.ev-quote")
    expect(mark).to_contain_text("root cause within forty-eight hours")
    expect(mark).to_be_in_viewport()
    # The card opens a short lead-in before the quote, not at the chunk's first word.
    expect(item.locator(".ev-preview")).to_contain_text(re.compile(r"^…"))
    page.screenshot(path=str(screenshots / "chat-evidence-at-quote.png"))

    # On a phone the evidence is a sheet over the answer, opened at the same sentence.
    page.set_viewport_size({"width": 390, "height": 844})
    page.click("[data-evidence-close]")
    answer.locator("a.cite").first.click()
    expect(page.locator("#evidence-panel")).to_be_visible()
    expect(mark).to_be_in_viewport()
    page.screenshot(path=str(screenshots / "chat-evidence-at-quote-390.png"))
    page.set_viewport_size({"width": 1280, "height": 900})

    # The document's page opens scrolled to the quote, not to the top of a long passage: the
    # link carries the quote as a text fragment, which the browser scrolls to and marks.
    link = item.locator(".ev-doc a")
    expect(link).to_have_attribute("href", re.compile(r"#chunk-\d+:~:text=Every%20incident%20review%20names,"))
    link.click()
    page.wait_for_url(re.compile(r"/kb/quote-kb/documents/\d+/"))
    sentence = page.get_by_text(QUOTE, exact=False).last
    expect(sentence).to_be_in_viewport()
    header = page.locator(".topbar").bounding_box()
    assert sentence.bounding_box()["y"] >= header["y"] + header["height"]
    page.screenshot(path=str(screenshots / "document-at-quote.png"))
