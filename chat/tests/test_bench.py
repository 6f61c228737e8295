from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from chat.models import Conversation, Trace
from evaluation.chat_bench import _union_ms

pytestmark = pytest.mark.django_db


def test_it_measures_the_chat_pipeline_and_cleans_up(docs_kb):
    out = io.StringIO()

    call_command("bench", "chat", "--kb", "alice-kb", "--queries", "3", "--fake-llm", "--json", stdout=out)

    report = json.loads(out.getvalue())
    for key in ("e2e_p50_ms", "first_token_p50_ms", "shortcut_a_p50_ms", "shortcut_b_p50_ms",
                "prompt_assembly_p50_ms", "fake_llm_own_ttft_p50_ms"):
        assert report[key] > 0 and key in report["goals_met"]
    assert report["shortcuts_seen"] == ["A", "B"] and report["unverified_quotes"] == 0
    assert report["fake_llm_ttft_p50_ms"] > report["fake_llm_own_ttft_p50_ms"]
    assert not Conversation.objects.exists() and not Trace.objects.exists()


@pytest.mark.parametrize(
    ("intervals", "until", "ms"),
    [([(0.0, 0.010), (0.005, 0.020)], 1.0, 20.0), ([(0.0, 0.010), (0.030, 0.040)], 0.035, 15.0),
     ([(0.0, 0.050), (0.010, 0.020)], 1.0, 50.0), ([], 1.0, 0.0)],
)
def test_it_counts_overlapping_model_waits_once(intervals, until, ms):
    assert _union_ms(intervals, until=until) == pytest.approx(ms)
