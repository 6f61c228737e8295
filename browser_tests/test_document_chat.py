"""In a real browser: the document chat editor. Pick a section in the outline, ask about it,
have it condensed, accept the proposal as a new version; then the same page on a phone and
from the keyboard."""

from __future__ import annotations

import itertools
import re

from playwright.sync_api import Page, expect

from .test_playground import upload_and_wait
from .test_upload import create_kb, log_in

MAINTENANCE = [
    "Inspect the pump bearings every month and record the vibration readings in the log.",
    "Replace the bearing grease when the readings rise above the limit in the manual.",
    "Check the seals for leaks while the pump is running at full load.",
    "A worn seal lets water reach the motor and shortens its life by years.",
    "The maintenance crew signs the log after each inspection so the next shift knows what was done.",
]
GUIDE = f"""# Pump station field guide

How the crew keeps the pump station running.

## 1 Pump maintenance

{" ".join(MAINTENANCE)}

## 2 Alarm handling

When the high-level alarm sounds, start the standby pump and call the duty engineer. Write the
alarm time and the water level in the log.
"""
QUESTION = "How often should the pump bearings be inspected?"


def open_editor(page: Page, kb_slug: str, name: str) -> None:
    """From the KB page, open the editor of one of its documents (the page has no link to it yet)."""
    page.goto(f"/kb/{kb_slug}/")
    href = page.locator("#document-rows a", has_text=name).first.get_attribute("href")
    match = re.search(r"/documents/(\d+)/", href or "")
    assert match, href
    page.goto(f"/documents/{match.group(1)}/edit/")
    expect(page.locator("#doc-ask")).to_be_visible()


def test_it_answers_condenses_and_accepts_a_section(page: Page, tmp_path, screenshots):
    log_in(page)
    create_kb(page, "doc-chat-kb", "Pump station")
    upload_and_wait(page, tmp_path, {"pump-guide.md": GUIDE.encode()})
    open_editor(page, "doc-chat-kb", "pump-guide.md")

    outline = page.locator("nav.doc-outline")
    expect(outline.locator("a")).to_have_count(3)
    expect(outline.locator("a[aria-current=true]")).to_contain_text("Pump station field guide")
    outline.get_by_role("link", name=re.compile("Pump maintenance")).click()
    page.wait_for_url(re.compile(r"/edit/\?section=1&c=[\w-]+$"))
    conversation = re.search(r"[?&]c=([\w-]+)", page.url).group(1)
    current = outline.locator("a[aria-current=true]")
    expect(current).to_have_count(1)
    expect(current).to_contain_text("Pump maintenance")
    expect(page.locator("#section-heading")).to_contain_text("Pump maintenance")
    source = page.locator("#section-source")
    for sentence in MAINTENANCE:
        expect(source).to_contain_text(sentence)
    original = source.inner_text()

    turns = page.locator("#doc-turns article.doc-turn")
    expect(turns).to_have_count(0)
    page.fill("#doc-message", QUESTION)
    page.get_by_role("button", name="Send").click()
    expect(turns).to_have_count(1)
    answer = turns.last
    expect(answer.locator(".doc-turn-question")).to_contain_text(QUESTION)
    expect(answer.locator(".doc-turn-answer")).to_contain_text("(Extractive answer")
    expect(page.locator("#doc-message")).to_have_value("")  # the form reset itself
    expect(page).to_have_url(re.compile(r"section=1&c="))  # htmx appended in place

    page.fill("#doc-message", "Condense this section")
    page.get_by_role("button", name="Send").click()
    expect(turns).to_have_count(2)
    proposal = turns.last
    diff = proposal.locator(".diff")
    expect(diff).to_be_visible()
    expect(diff.locator("del").first).to_be_visible()
    expect(proposal.locator(".proposal-summary")).to_contain_text("condensed by rules")
    for label in ("Accept", "Reject", "Regenerate"):
        expect(proposal.get_by_role("button", name=label, exact=True)).to_be_visible()
    deleted = " ".join(diff.locator("del").all_inner_texts())
    removed = [s for s in MAINTENANCE if s.rstrip(".") in deleted]
    assert removed, f"no whole sentence struck through: {deleted!r}"
    proposal.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "document-chat-proposal.png"), full_page=True)

    with page.expect_navigation():  # HX-Redirect reloads the editor
        proposal.get_by_role("button", name="Accept", exact=True).click()
    expect(page).to_have_url(re.compile(rf"section=1&c={conversation}$"))
    expect(page.get_by_text(re.compile(r"Accepted: version 2 of pump-guide\.md"))).to_be_visible()
    expect(outline.locator("a[aria-current=true]")).to_contain_text("Pump maintenance")
    for sentence in removed:
        expect(source).not_to_contain_text(sentence)
    expect(source).to_contain_text(MAINTENANCE[0])  # the first sentence states the subject: kept
    assert len(source.inner_text()) < len(original)
    # The conversation is still there, the proposal marked as accepted.
    expect(turns).to_have_count(2)
    expect(turns.last.locator(".proposal")).to_have_attribute("data-status", "accepted")
    expect(turns.last.get_by_role("button", name="Accept", exact=True)).to_have_count(0)
    page.screenshot(path=str(screenshots / "document-chat-accepted.png"), full_page=True)

    # Keyboard only: Tab to the message box, type, Tab to Send, Enter.
    page.locator("#section-source").focus()
    for _ in range(40):
        if page.evaluate("document.activeElement && document.activeElement.id") == "doc-message":
            break
        page.keyboard.press("Tab")
    expect(page.locator("#doc-message")).to_be_focused()
    page.keyboard.type("Who signs the log?")
    page.keyboard.press("Tab")
    expect(page.locator("#doc-ask").get_by_role("button", name="Send")).to_be_focused()
    page.keyboard.press("Enter")
    expect(turns).to_have_count(3)
    expect(turns.last.locator(".doc-turn-question")).to_contain_text("Who signs the log?")
    expect(turns.last.locator(".doc-turn-answer")).to_contain_text("(Extractive answer")

    # On a phone the outline, the section and the assistant stack, without sideways scrolling.
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(page.locator("#doc-ask")).to_be_attached()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    boxes = [
        page.locator(selector).bounding_box()
        for selector in ("nav.doc-outline", "section.doc-section", "aside.doc-assistant")
    ]
    assert all(boxes), boxes
    for upper, lower in itertools.pairwise(boxes):
        assert upper["y"] + upper["height"] <= lower["y"] + 1, boxes  # stacked, in this order
    for box in boxes:
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, boxes
    message = page.locator("#doc-message")
    message.scroll_into_view_if_needed()
    expect(message).to_be_in_viewport()
    message.fill("What does the maintenance crew do after an inspection?")
    send = page.locator("#doc-ask").get_by_role("button", name="Send")
    expect(send).to_be_in_viewport()
    send.click()
    expect(turns).to_have_count(4)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.evaluate("window.scrollTo(0, 0)")  # else the sticky header is drawn mid-page
    page.screenshot(path=str(screenshots / "document-chat-mobile.png"), full_page=True)
