"""In a real browser: the offline reader answers from a table row with its header, verified,
and says "not found" for a question the documents do not answer."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from .test_playground import upload_and_wait
from .test_upload import create_kb, log_in

RERANK_DOC = """# Rerank

## 6.1 Five-factor scorer

The five-factor scorer orders the fused candidates before the quality gate.

| factor | weight | meaning |
| --- | --- | --- |
| cosine | 35% | embedding similarity of query and chunk |
| key-term ratio | 25% | share of query tokens found in the chunk |
| title | 20% | query terms in the document name |

```
curl -X POST http://127.0.0.1:8000/api/chat -d '{"message": "cosine weight?"}'
```
"""


def _ask(page: Page, question: str):
    page.fill("#chat-message", question)
    page.press("#chat-message", "Enter")
    expect(page.locator(".msg-user .bubble").last).to_have_text(question)
    answer = page.locator(".msg-assistant").last
    expect(answer.locator(".msg-actions")).to_be_visible()
    return answer


def test_it_answers_from_a_table_row_and_says_when_nothing_answers(page: Page, tmp_path, screenshots):
    log_in(page)
    create_kb(page, "answers-kb", "Rerank notes")
    upload_and_wait(page, tmp_path, {"rerank.md": RERANK_DOC.encode()})
    page.get_by_role("link", name="Chat", exact=True).click()
    page.wait_for_url(re.compile(r"/$"))
    page.select_option("select[name=kb]", "answers-kb")
    expect(page.locator(".chat-offline")).to_contain_text("answers are extractive")

    answer = _ask(page, "What weight does the cosine factor get?")
    expect(answer.locator(".answer")).to_contain_text("Extractive answer")
    expect(answer.locator(".answer")).to_contain_text("factor: cosine, weight: 35%")  # the row, with its header
    expect(answer.locator(".answer")).not_to_contain_text("factor | weight")
    expect(answer.locator(".answer")).not_to_contain_text("curl")
    expect(answer).to_contain_text("Citations verified")
    page.screenshot(path=str(screenshots / "answer-table-row.png"))

    refused = _ask(page, "What is the boiling point of ethanol?")
    expect(refused.locator(".answer")).to_contain_text("found nothing in the knowledge base")
    expect(refused.locator("a.cite")).to_have_count(0)
    expect(refused).not_to_contain_text("Citations verified")
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(screenshots / "answer-not-found-390.png"), full_page=True)
