"""In a real browser: ask a question, watch the stage cards and the streamed answer, open a
citation's evidence, then the trace of the answer."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from .test_playground import upload_and_wait
from .test_upload import CHINESE, HTML, MARKDOWN, create_kb, log_in

QUESTION = "How should we write an incident review?"
STAGES = ["memory", "rewrite", "intent", "guide", "system", "retrieve", "prompt", "generate"]


def test_it_streams_an_answer_with_stage_cards_citations_and_a_trace(page: Page, tmp_path, screenshots):
    log_in(page)
    create_kb(page, "chat-kb", "Operations handbook")
    upload_and_wait(
        page,
        tmp_path,
        {
            "handbook.md": MARKDOWN.encode(),
            "混凝土规范.txt": CHINESE.encode(),
            "deployment.html": HTML.encode(),
        },
    )

    frames: list[str] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(str(payload))))
    page.get_by_role("link", name="Chat", exact=True).click()
    page.wait_for_url(re.compile(r"/$"))
    for stage in STAGES:
        expect(page.locator(f"#stage-{stage}")).to_have_attribute("data-state", "idle")
    expect(page.locator(".chat-empty")).to_be_visible()

    page.select_option("select[name=kb]", "chat-kb")
    page.fill("#chat-message", QUESTION)
    page.press("#chat-message", "Enter")

    answer = page.locator(".msg-assistant").last
    expect(answer.locator("a.cite").first).to_be_visible()
    for stage in STAGES:
        expect(page.locator(f"#stage-{stage}")).to_have_attribute("data-state", "done")
    # The stages show as one line of chips until opened; the panel stays as it was left.
    expect(page.locator("#stage-retrieve .stage-label")).to_be_hidden()
    page.screenshot(path=str(screenshots / "chat-stages-one-line.png"))
    page.click("[data-pipeline-toggle]")
    expect(page.locator("#stage-retrieve .stage-label")).to_be_visible()
    expect(page.locator("#stage-retrieve .stage-status")).to_contain_text("ms")
    expect(page.locator(".msg-user .bubble").last).to_have_text(QUESTION)
    expect(page.locator("#chat-message")).to_have_value("")
    # The answer came token by token over the socket before the final fragment replaced it.
    token_frames = [frame for frame in frames if 'hx-swap-oob="beforeend:#answer-' in frame]
    assert len(token_frames) > 5, frames[:5]
    expect(answer.locator(".answer")).to_contain_text("incident review")
    expect(answer).to_contain_text("Citations verified")
    # The new session has its own address and its place in the sidebar.
    expect(page).to_have_url(re.compile(r"/c/[0-9a-f]{32}/$"))
    expect(page.locator(".session-item.is-current")).to_contain_text(QUESTION[:30])
    page.screenshot(path=str(screenshots / "chat.png"))

    citation = answer.locator("a.cite").first
    number = citation.get_attribute("data-cite")
    citation.click()
    item = page.locator(".evidence-item.is-highlighted")
    expect(item).to_be_visible()
    expect(item.locator(".ev-n")).to_have_text(number)
    expect(item.locator(".ev-source")).to_have_text("KB")
    expect(item.locator(".ev-doc a")).to_have_attribute("href", re.compile(r"^/kb/chat-kb/documents/\d+/"))
    page.screenshot(path=str(screenshots / "chat-evidence.png"))
    page.click("[data-theme-toggle]")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    page.screenshot(path=str(screenshots / "chat-dark.png"))
    page.click("[data-theme-toggle]")

    # On a narrow window the evidence opens over the answer and closes again.
    page.set_viewport_size({"width": 900, "height": 900})
    page.click("[data-evidence-close]")
    expect(page.locator("#evidence-panel")).to_be_hidden()
    answer.locator("a.cite").first.click()
    expect(page.locator("#evidence-panel")).to_be_visible()
    page.screenshot(path=str(screenshots / "chat-narrow.png"))
    page.click("[data-evidence-close]")
    expect(page.locator("#evidence-panel")).to_be_hidden()
    page.set_viewport_size({"width": 1280, "height": 900})

    # A reload shows the stored answer exactly as the stream left it.
    page.reload()
    expect(page.locator("[data-pipeline-toggle]")).to_have_attribute("aria-expanded", "true")
    expect(page.locator(".msg-assistant").last.locator("a.cite").first).to_be_visible()
    expect(page.locator(".msg-assistant").last).to_contain_text("incident review")

    # Thumbs, then retry: the same question again, over the socket, in the same session.
    page.locator(".msg-assistant").last.get_by_role("button", name="Helpful", exact=True).click()
    expect(
        page.locator(".msg-assistant").last.get_by_role("button", name="Helpful", exact=True)
    ).to_have_attribute("aria-pressed", "true")
    page.locator(".msg-assistant").last.get_by_role("button", name="Retry").click()
    expect(page.locator(".msg-assistant")).to_have_count(2)
    expect(page.locator(".msg-assistant").last.locator("a.cite").first).to_be_visible()
    expect(page.locator(".msg-user")).to_have_count(2)

    # Edit puts the question back in the box to change and send again.
    page.locator(".msg-user").first.hover()
    page.locator(".msg-user").first.get_by_role("button", name="Edit").click()
    expect(page.locator("#chat-message")).to_have_value(QUESTION)
    expect(page.locator("#chat-message")).to_be_focused()
    page.fill("#chat-message", "")

    # The evidence card opens the document as text at the cited passage, marked, clear of the header.
    chat_url = page.url
    page.locator(".msg-assistant").last.locator("a.cite").first.click()
    link = page.locator(".evidence-item.is-highlighted .ev-doc a")
    # The link names the chunk and, as a text fragment, the quoted sentence the browser marks.
    chunk = re.search(r"#(chunk-\d+):~:text=", link.get_attribute("href")).group(1)
    link.click()
    page.wait_for_url(re.compile(r"/kb/chat-kb/documents/\d+/#chunk-\d+"))
    passage = page.locator(f"#{chunk}")
    expect(passage).to_be_in_viewport()
    expect(page.locator("[data-document-text] h2").first).to_be_visible()
    header = page.locator(".topbar").bounding_box()
    box = passage.bounding_box()
    assert box["y"] >= header["y"] + header["height"], (box, header)
    page.screenshot(path=str(screenshots / "document-at-passage.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    cited = page.url  # opened on a phone: the text comes first, the passage in view
    page.goto(cited.split("#")[0])
    page.goto(cited)
    expect(passage).to_be_in_viewport()
    page.screenshot(path=str(screenshots / "document-at-passage-390.png"))
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(chat_url)

    page.locator(".msg-assistant").last.get_by_role("link", name="Trace ↗").click()
    page.wait_for_url(re.compile(r"/traces/[0-9a-f-]{36}/$"))
    expect(page.locator(".wf-row")).to_have_count(page.locator(".wf-row").count())
    assert page.locator(".wf-row").count() >= len(STAGES)
    row = page.locator(".wf-row", has_text="retrieve").first
    row.locator("summary").click()
    expect(row.locator(".wf-io")).to_be_visible()
    page.screenshot(path=str(screenshots / "trace.png"), full_page=True)


def test_it_explains_a_refused_question_in_the_chat(page: Page, screenshots):
    log_in(page)
    page.goto("/")
    page.fill("#chat-message", "x" * 10)
    page.evaluate(
        "document.querySelector('select[name=kb]').add(new Option('ghost', 'no-such-kb', true, true))"
    )
    page.press("#chat-message", "Enter")
    # The question shows at once; the reason it is not answered appears under it.
    expect(page.locator(".msg-user .bubble").last).to_have_text("x" * 10)
    refusal = page.locator(".msg-assistant .msg-refused")
    expect(refusal).to_contain_text("No such knowledge base.")
    expect(page.locator(".msg-assistant .answer.streaming")).to_be_hidden()  # no "writing" dots
    expect(page.locator("[data-chat-stop]")).to_be_hidden()
    expect(page.locator(".evidence-list.is-active .evidence-none")).to_have_text("No evidence for this answer")
    page.screenshot(path=str(screenshots / "chat-refused.png"), full_page=True)
