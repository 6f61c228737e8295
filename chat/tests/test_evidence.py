"""Evidence cards open at the sentence the answer quoted."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from chat.evidence import find_quote, message_evidence, quote_window

FILLER = "The office plants are watered on Mondays by whoever arrives first. " * 13
QUOTE = "Every incident review names the root cause within 48 hours."
TEXT = FILLER + QUOTE + " The review is shared with the whole team afterwards."


def _message(quote: str = QUOTE, text: str = TEXT) -> SimpleNamespace:
    evidence = [{"n": 1, "source": "KB", "doc": "handbook.md", "preview": text[:200], "text": text,
                 "url": "/kb/ops/documents/3/#chunk-7"}]
    return SimpleNamespace(debug={"evidence": evidence}, citations=[{"n": 1, "quote": quote, "doc": "handbook.md"}])


def test_it_opens_the_card_at_a_quote_past_the_first_600_characters():
    assert TEXT.index(QUOTE) > 800
    [item] = message_evidence(_message())
    assert item.quote == QUOTE.rstrip(".")
    assert item.before.startswith("…") and len(item.before) <= 170
    assert item.after.startswith(". The review is shared")
    assert item.url == "/kb/ops/documents/3/#chunk-7:~:text=Every%20incident%20review%20names,cause%20within%2048%20hours"


@pytest.mark.parametrize(
    ("text", "quote", "found"),
    [
        ("Intro. Write  down\nwhat happened. Then rest.", "write down what happened.", "Write  down\nwhat happened"),
        ("Intro. Write **down** what happened.", "Write down what happened", "Write **down** what happened"),
        ("总则。施工单位应建立健全质量管理体系。其余。", "施工单位应建立健全质量管理体系。", "施工单位应建立健全质量管理体系"),
    ],
)
def test_it_finds_a_quote_across_spacing_case_and_markdown(text, quote, found):
    start, end = find_quote(text, quote)
    assert text[start:end] == found


def test_it_keeps_the_preview_when_the_quote_is_not_in_the_text():
    [item] = message_evidence(_message(quote="Nothing like this is written anywhere."))
    assert item.quote == ""
    assert item.url == "/kb/ops/documents/3/#chunk-7"


@pytest.mark.parametrize("size", [0, 1, 5, 200, 2000])
def test_it_keeps_the_window_near_its_size_and_the_quote_whole(size):
    text = "word " * size + QUOTE + " tail" * size
    start, end = find_quote(text, QUOTE)
    before, after = quote_window(text, start, end)
    assert len(before) + (end - start) + len(after) <= 600 + 2
    assert text[start:end] in before + text[start:end] + after
