"""In a real browser: Plan-Execute-Report asks what a pronoun means instead of guessing, its
choices are buttons (reachable from the keyboard) on a wide screen and a phone, and picking
one answers the question it spells out."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from .test_playground import upload_and_wait
from .test_upload import create_kb, log_in

GUIDE = """# Search guide

## Hybrid search

Hybrid search fuses the BM25 ranking and the vector ranking. The vector weight is 0.7 and
the BM25 weight is 0.3.

## Reranking

The reranker gives the title a weight of 0.2 and the passage the rest.

## Backups

The index is backed up every night.
"""


def test_the_clarifier_offers_choices_and_a_choice_gets_the_answer(page: Page, tmp_path, screenshots):
    log_in(page)
    create_kb(page, "clarify-kb", "Search guide")
    upload_and_wait(page, tmp_path, {"search-guide.md": GUIDE.encode()})
    page.goto("/")
    page.select_option("select[name=kb]", "clarify-kb")
    page.select_option("select[name=agent_type]", "plan_execute_agent")
    page.fill("#chat-message", "它的权重是多少？")
    page.press("#chat-message", "Enter")

    asked = page.locator(".msg-assistant").last
    expect(asked.locator(".answer")).to_contain_text("“它”指的是什么？")
    choices = asked.locator("[data-clarify-choice]")
    expect(choices).to_have_count(2)
    expect(choices.nth(0)).to_have_text("Hybrid search")
    expect(choices.nth(1)).to_have_text("Reranking")
    expect(asked.get_by_role("group", name="Choose what you mean")).to_be_visible()
    expect(choices.nth(0)).to_be_focused()  # the keyboard lands on the first choice
    page.screenshot(path=str(screenshots / "chat-clarify.png"))

    page.set_viewport_size({"width": 390, "height": 844})
    expect(choices.nth(1)).to_be_visible()
    box = choices.nth(1).bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390  # the buttons wrap on a phone
    page.screenshot(path=str(screenshots / "chat-clarify-390.png"))
    page.set_viewport_size({"width": 1280, "height": 900})

    # Tab to the second choice and pick it with Enter: its question is sent and answered.
    choices.nth(0).focus()
    page.keyboard.press("Tab")
    expect(choices.nth(1)).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".msg-user").last).to_contain_text("Reranking 的权重是多少？")
    answer = page.locator(".msg-assistant").last
    expect(answer.locator("a.cite").first).to_be_visible()
    expect(answer).to_contain_text("0.2")
    expect(answer.locator("[data-clarify-choice]")).to_have_count(0)  # a reply is not asked about again
    page.screenshot(path=str(screenshots / "chat-clarify-answered.png"))
