"""In a real browser: Stop ends an answer being written and keeps its text; a lost
connection is said, Send waits, and the message being typed stays."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from agentic_rag.llm.testing import FakeOpenAIServer, FakeReply

from .test_models import log_in_as_staff


def test_stop_keeps_the_text_so_far_and_a_lost_connection_keeps_the_message(page: Page, screenshots):
    words = " ".join(f"word{i}" for i in range(400))
    with FakeOpenAIServer() as fake:
        fake.default = FakeReply(text=words, token_delay_s=0.05)  # slow enough to stop
        log_in_as_staff(page)
        page.goto("/settings/models/")
        page.fill("#id_name", "slow-fake")
        page.fill("#id_base_url", fake.base_url)
        page.fill("#id_model", "fake-model")
        page.get_by_role("button", name="Add").click()
        expect(page.locator('[data-models] tr[data-model="slow-fake"]')).to_be_visible()
        try:
            page.goto("/")
            page.fill("#chat-message", "Tell me a long story about the sea.")
            page.press("#chat-message", "Enter")
            answer = page.locator(".msg-assistant").last
            expect(answer.locator(".answer")).to_contain_text("word3")
            stop = page.locator("[data-chat-stop] button")
            expect(stop).to_be_visible()
            stop.click()
            expect(answer.locator(".msg-stopped")).to_be_visible()
            expect(stop).to_be_hidden()
            page.screenshot(path=str(screenshots / "chat-stopped.png"))
            assert "word399" not in answer.locator(".answer").inner_text()

            # The socket drops: htmx reconnects by itself; meanwhile the draft stays, and Send
            # would queue it (test_chat_reconnect.py).
            page.fill("#chat-message", "a draft not sent yet")
            page.evaluate("htmx.trigger(document.querySelector('[data-chat]'), 'htmx:wsClose', {})")
            expect(page.locator("[data-connection]")).to_be_visible()
            expect(page.locator("[data-send]")).to_be_enabled()
            page.set_viewport_size({"width": 390, "height": 844})
            page.screenshot(path=str(screenshots / "chat-connection-lost-390.png"))
            page.set_viewport_size({"width": 1280, "height": 900})
            page.evaluate("htmx.trigger(document.querySelector('[data-chat]'), 'htmx:wsOpen', {})")
            expect(page.locator("[data-connection]")).to_be_hidden()
            expect(page.locator("[data-send]")).to_be_enabled()
            expect(page.locator("#chat-message")).to_have_value("a draft not sent yet")
        finally:  # the server is shared with later tests, which expect no model
            page.goto("/settings/models/")
            page.once("dialog", lambda dialog: dialog.accept())
            page.locator('[data-models] tr[data-model="slow-fake"]').get_by_role("button", name="Remove").click()
            expect(page.locator('[data-models] tr[data-model="slow-fake"]')).to_have_count(0)
            expect(page).to_have_url(re.compile(r"/settings/models/$"))
