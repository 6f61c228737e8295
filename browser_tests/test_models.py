"""In a real browser: staff add a language model (a fake OpenAI-compatible server), test its
connection, see it in order; the chat's extractive banner is gone while it is in use."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from agentic_rag.llm.testing import FakeOpenAIServer

from .conftest import STAFF_USERNAME
from .test_upload import log_in


def log_in_as_staff(page: Page) -> None:
    log_in(page, STAFF_USERNAME)


def test_staff_add_test_and_remove_a_model(page: Page, screenshots):
    with FakeOpenAIServer(text="OK") as fake:
        log_in_as_staff(page)
        page.goto("/")
        expect(page.locator(".chat-offline")).to_contain_text("answers are extractive")
        page.locator(".chat-offline").get_by_role("link", name="add one in Language models").click()
        page.wait_for_url(re.compile(r"/settings/models/$"))
        expect(page.locator("[data-no-model]")).to_be_visible()

        page.fill("#id_name", "local-fake")
        page.fill("#id_base_url", fake.base_url)
        page.fill("#id_model", "fake-model")
        page.fill("#id_api_key", "sk-browser")
        page.get_by_role("button", name="Add").click()
        row = page.locator('[data-models] tr[data-model="local-fake"]')
        expect(row).to_contain_text("stored, encrypted")
        expect(row).to_contain_text("closed")
        expect(page.locator("[data-no-model]")).to_have_count(0)
        assert "sk-browser" not in page.content()

        row.get_by_role("button", name="Test").click()
        expect(row.locator("[data-test-result]")).to_contain_text("Answered in")
        assert fake.chat_requests[-1].headers["Authorization"] == "Bearer sk-browser"
        page.screenshot(path=str(screenshots / "models.png"), full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})
        page.screenshot(path=str(screenshots / "models-390.png"), full_page=True)
        page.set_viewport_size({"width": 1280, "height": 900})

        page.goto("/")
        expect(page.locator(".chat-offline")).to_have_count(0)

        page.goto("/settings/models/")
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator('[data-models] tr[data-model="local-fake"]').get_by_role("button", name="Remove").click()
        expect(page.locator('[data-models] tr[data-model="local-fake"]')).to_have_count(0)
        expect(page.locator("[data-no-model]")).to_be_visible()
