"""Answers as HTML, stage cards, evidence and the trace waterfall: plain functions, no database."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from chat.cards import StageCard, card_ended, card_started, stage_lanes
from chat.evidence import evidence_items, verification_marks
from chat.rendering import render_markdown
from chat.waterfall import waterfall_rows


def test_it_renders_markdown():
    html = render_markdown("# Title\n\n- **one**\n- `two`\n\n| a | b |\n|:-|-:|\n| 1 | 2 |")
    assert "<h1>Title</h1>" in html and "<strong>one</strong>" in html and "<code>two</code>" in html
    assert '<td align="right">2</td>' in html


@pytest.mark.parametrize(
    "unsafe",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "[click](javascript:alert(1))",
        '<a href="javascript:alert(1)">click</a>',
        "<iframe src=//evil></iframe>",
        '<p style="position:fixed">x</p>',
        "<style>body{display:none}</style>",
    ],
)
def test_it_strips_unsafe_html(unsafe):
    html = render_markdown(f"Before {unsafe} after")
    for needle in ("<script", "onerror", "javascript:", "<iframe", "style=", "<style", "alert(1)</"):
        assert needle not in html


def test_it_links_citations_that_have_evidence():
    html = render_markdown("One [1]. Two [2]. Missing [9].", evidence_key="m7", numbers={1, 2})
    assert '<a class="cite" href="#ev-m7-1" data-cite="1" data-evidence="m7"' in html
    assert 'href="#ev-m7-2"' in html
    assert "Missing [9]" in html


def test_it_links_each_number_of_a_grouped_citation():
    html = render_markdown("Both [1, 2] and [1，3].", evidence_key="t1", numbers={1, 2})
    assert html.count('class="cite"') == 3
    assert "[3]" in html


def test_it_leaves_citations_in_code_and_links_alone():
    html = render_markdown(
        "`x[1]`\n\n```\ny[1]\n```\n\n[see [1]](https://example.com)", evidence_key="m1", numbers={1}
    )
    assert 'class="cite"' not in html


def test_it_lays_parallel_stages_in_one_lane():
    graph = {
        "nodes": [
            {"id": "memory", "label": "Memory"},
            {"id": "rewrite", "label": "Rewrite", "parallel_group": "understand"},
            {"id": "intent", "label": "Intent", "parallel_group": "understand"},
            {"id": "guide", "label": "Guide"},
        ]
    }
    lanes = stage_lanes(graph)
    assert [[card.id for card in lane] for lane in lanes] == [["memory"], ["rewrite", "intent"], ["guide"]]
    assert [card.number for lane in lanes for card in lane] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("data", "state", "shortcut"),
    [
        ({"status": "done"}, "done", ""),
        ({"status": "skipped"}, "skipped", ""),
        ({"status": "failed", "detail": "boom"}, "failed", ""),
        ({"status": "shortcut", "shortcut": "A"}, "shortcut", "A"),
        ({"status": "degraded"}, "done", ""),
    ],
)
def test_it_moves_a_card_through_its_states(data, state, shortcut):
    card = card_started(StageCard("guide", "Guide", 4))
    assert card.state == "running"
    ended = card_ended(card, 3.5, data)
    assert (ended.state, ended.shortcut, ended.ms) == (state, shortcut, 3.5)


def test_it_normalises_evidence_and_refuses_foreign_links():
    items = evidence_items(
        [
            {"n": 2, "source": "tool", "doc": "calculator", "preview": "4", "url": "javascript:alert(1)"},
            {"n": 1, "source": "KB", "doc": "a.md", "score": "0.5", "url": "/kb/x/documents/1/#chunk-3"},
            {"n": 3, "url": "//evil.example/"},
            {"doc": "no number"},
        ]
    )
    assert [(i.n, i.source, i.url) for i in items] == [
        (1, "KB", "/kb/x/documents/1/#chunk-3"),
        (2, "TOOL", ""),
        (3, "KB", ""),
    ]
    assert items[0].score == 0.5


def test_it_summarises_verification():
    assert verification_marks([]) is None
    marks = verification_marks([{"quote": "a", "verified": True}, {"quote": "b", "verified": False}])
    assert marks.checked == 2 and marks.flagged == ("b",) and not marks.is_clean and marks.state == "unverified"


def test_quotes_that_may_not_answer_are_neither_clean_nor_unverified():
    marks = verification_marks([{"quote": "a", "verified": True, "status": "verified"},
                                {"quote": "b", "verified": False, "status": "may_not_answer"}])
    assert (marks.flagged, marks.unanswered, marks.is_clean, marks.state) == ((), ("b",), False, "may_not_answer")


def span(name, start, ms, kind="stage"):
    return SimpleNamespace(
        name=name, kind=kind, status="ok", start_ms=start, ms=ms, input='{"q": 1}', output="", error=""
    )


def test_it_puts_spans_on_one_time_axis():
    rows, axis = waterfall_rows([span("b", 50, 50), span("a", 0, 25), span("zero", 99.6, 0.4)], total_ms=100)
    assert axis == 100
    assert [(r.name, r.left_pct, r.width_pct) for r in rows] == [
        ("a", 0, 25),
        ("b", 50, 50),
        ("zero", 99.6, 0.4),
    ]
    assert rows[0].input == '{"q": 1}'


def test_it_stretches_the_axis_to_the_longest_span():
    rows, axis = waterfall_rows([span("a", 10, 90)], total_ms=50)
    assert axis == 100 and rows[0].left_pct == 10 and rows[0].width_pct == 90
