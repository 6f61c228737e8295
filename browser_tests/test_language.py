"""In a real browser: the interface speaks the browser's language, one language at a time,
streamed stages included, and the switch in the top bar changes it for good."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from .conftest import PASSWORD, USERNAME

CJK = re.compile(r"[\u4e00-\u9fff]")


def test_a_chinese_browser_gets_the_chinese_interface_and_can_switch(browser, server, screenshots):
    context = browser.new_context(base_url=server, viewport={"width": 1280, "height": 900}, locale="zh-CN")
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto("/login/")
        expect(page.get_by_role("heading", name="登录")).to_be_visible()
        page.fill("input[name=username]", USERNAME)
        page.fill("input[name=password]", PASSWORD)
        page.get_by_role("button", name="登录").click()
        expect(page.get_by_role("heading", name="知识库", exact=True)).to_be_visible()

        page.locator(".topnav").get_by_role("link", name="对话").click()
        expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
        expect(page.locator("#chat-title")).to_have_text("新对话")
        expect(page.get_by_role("button", name="发送")).to_be_visible()
        expect(page.locator("#chat-message")).to_have_attribute("placeholder", re.compile("问点什么"))
        expect(page.get_by_text("New chat")).to_have_count(0)

        # Stages streamed over the websocket speak the page's language too.
        page.fill("#chat-message", "你好")
        page.press("#chat-message", "Enter")
        expect(page.locator("#stage-system")).to_have_attribute("data-state", "shortcut")
        page.get_by_role("button", name="阶段").click()
        expect(page.locator("#stage-memory .stage-label")).to_have_text("记忆")
        expect(page.locator("#stage-retrieve .stage-status")).to_contain_text("已跳过")
        page.screenshot(path=str(screenshots / "chat-zh.png"))
        page.set_viewport_size({"width": 390, "height": 844})
        expect(page.locator("#chat-message")).to_be_in_viewport()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390  # the top bar fits
        page.screenshot(path=str(screenshots / "chat-zh-390.png"))
        page.set_viewport_size({"width": 1280, "height": 900})

        # The switch offers the other language and keeps the choice over the browser's.
        page.get_by_role("button", name="English").click()
        expect(page.locator("html")).to_have_attribute("lang", "en")
        expect(page.get_by_role("button", name="Send")).to_be_visible()
        page.goto("/kb/")
        expect(page.get_by_role("heading", name="Knowledge bases", exact=True)).to_be_visible()
        # One language at a time: no doubled labels in the navigation, headings, buttons or table heads.
        chrome = [page.locator(".topnav").inner_text(), *page.locator("main h1, main .button, main th").all_inner_texts()]
        assert not [text for text in chrome if CJK.search(text)], chrome
        expect(page.get_by_role("button", name="中文")).to_be_visible()
        page.screenshot(path=str(screenshots / "kb-list-switched-to-english.png"))
    finally:
        context.close()
