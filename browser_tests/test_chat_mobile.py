"""In a real browser on a phone's screen (390×844): the sessions and options fold into a
sheet, the offline note is one line, and a sent question's answer shows above the input."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from .test_playground import upload_and_wait
from .test_upload import MARKDOWN, create_kb, log_in

QUESTION = "How should we write an incident review?"


def test_it_fits_the_answer_on_a_phone(page: Page, tmp_path, screenshots):
    log_in(page)
    create_kb(page, "phone-kb", "Operations handbook")
    upload_and_wait(page, tmp_path, {"handbook.md": MARKDOWN.encode()})
    page.goto("/")
    # On a wide screen the options sit over the sessions and the title has the toolbar.
    expect(page.locator("[data-chat-sheet-toggle]")).to_be_hidden()
    expect(page.locator(".chat-sessions select[name=kb]")).to_be_visible()
    page.screenshot(path=str(screenshots / "chat-empty-1280.png"))

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(page.locator(".chat-sessions")).to_be_hidden()
    note = page.locator("[data-offline-note]")
    expect(note).to_contain_text("answers are extractive")
    assert note.bounding_box()["height"] < 48, note.bounding_box()  # one line
    empty, box = page.locator(".chat-empty"), page.locator("#chat-form").bounding_box()
    assert empty.bounding_box()["y"] + empty.bounding_box()["height"] <= box["y"]  # not under the input
    page.screenshot(path=str(screenshots / "chat-empty-390.png"))

    toggle = page.locator("[data-chat-sheet-toggle]")
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(page.locator(".chat-sessions")).to_be_in_viewport()
    page.select_option("select[name=kb]", "phone-kb")
    page.screenshot(path=str(screenshots / "chat-sheet-390.png"))
    toggle.click()
    expect(page.locator(".chat-sessions")).to_be_hidden()

    page.locator("[data-offline-dismiss]").click()
    expect(note).to_be_hidden()
    page.fill("#chat-message", QUESTION)
    page.press("#chat-message", "Enter")
    answer = page.locator(".msg-assistant").last.locator(".answer")
    expect(answer.locator("a.cite").first).to_be_visible()
    expect(answer).to_contain_text("incident review")

    # The answer's first three lines are on screen, between the header and the input.
    header = page.locator(".topbar").bounding_box()
    form = page.locator("#chat-form").bounding_box()
    top = answer.bounding_box()["y"]
    line = float(answer.evaluate("el => parseFloat(getComputedStyle(el).lineHeight)"))
    padding = float(answer.evaluate("el => parseFloat(getComputedStyle(el).paddingTop)"))
    assert top >= header["y"] + header["height"], (top, header)
    assert top + padding + 3 * line <= form["y"], (top, line, form)
    assert form["y"] + form["height"] <= 844
    page.screenshot(path=str(screenshots / "chat-answer-390.png"))

    # The dismissed note stays away in this browser.
    page.reload()
    expect(page.locator(".msg-assistant").last.locator("a.cite").first).to_be_visible()
    expect(note).to_be_hidden()
