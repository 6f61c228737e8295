"""In a real browser: the server restarts under an open chat; the page finds it again within
seconds of its answering, and a message sent while it was down goes then."""

from __future__ import annotations

import time

from playwright.sync_api import expect

from .conftest import Daphne
from .test_upload import log_in

RECONNECT_S = 3.0  # after the server answers again
MESSAGE = "Is anyone there after the restart?"


def test_it_reconnects_soon_after_a_restart_and_sends_the_queued_message(
    browser, restartable_server: Daphne, screenshots
):
    context = browser.new_context(base_url=restartable_server.base_url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        log_in(page)
        page.goto("/")
        note = page.locator("[data-connection]")
        expect(note).to_be_hidden()
        # However long the server has been away, the next try is at most the cap away.
        delays = page.evaluate(
            "[...Array(400).keys()].map(i => htmx.config.wsReconnectDelay(i % 40))"
        )
        assert max(delays) <= 2000 and min(delays) > 0, (min(delays), max(delays))

        restartable_server.stop()
        expect(note).to_be_visible()
        page.fill("#chat-message", MESSAGE)
        page.press("#chat-message", "Enter")
        expect(note).to_contain_text("queued")
        expect(page.locator("#chat-message")).to_have_value(MESSAGE)
        expect(page.locator("[data-send]")).to_be_disabled()
        page.screenshot(path=str(screenshots / "chat-reconnecting.png"))
        page.set_viewport_size({"width": 390, "height": 844})
        page.screenshot(path=str(screenshots / "chat-reconnecting-390.png"))
        page.set_viewport_size({"width": 1280, "height": 900})
        time.sleep(12)  # long enough for htmx's own backoff to have grown past 8 s

        restartable_server.start()  # returns once the server answers
        answered = time.monotonic()
        expect(note).to_be_hidden(timeout=int(RECONNECT_S * 1000))
        expect(page.locator(".msg-user .bubble").last).to_have_text(MESSAGE, timeout=int(RECONNECT_S * 1000))
        reconnected_after = time.monotonic() - answered
        assert reconnected_after <= RECONNECT_S, reconnected_after
        expect(page.locator("#chat-message")).to_have_value("")
        expect(page.locator("[data-send]")).to_be_enabled()
        expect(page.locator(".msg-assistant").last).to_be_visible()
        page.screenshot(path=str(screenshots / "chat-reconnected.png"))
    finally:
        context.close()
