from __future__ import annotations

import io
import json
import logging
from datetime import datetime, timedelta
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command

from chat.models import Conversation, Trace
from chat.pipeline import ChatResult
from evaluation.chat_bench import _right_conversion, _right_time, _union_ms

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
    # (the fixture KB does not hold every demo question's answer, so "kb" is not checked here)
    tools_and_greetings = ("greeting", "arithmetic", "time", "currency")
    assert {kind: report[f"ask_{kind}_right"] for kind in tools_and_greetings} == dict.fromkeys(tools_and_greetings, "3/3")


def test_it_reports_the_retrieval_cache_on_repeated_questions(docs_kb):
    out = io.StringIO()

    call_command("bench", "chat", "--kb", "alice-kb", "--queries", "1", "--repeat", "3", "--json", stdout=out)

    report = json.loads(out.getvalue())
    asked = report["cache_questions"]
    assert report["cache_repeat"] == 3 and asked == 3 * 8
    # Every question's first asking misses; its two repeats hit (a rewrite may search more than once).
    assert report["cache_hits"] == 2 * report["cache_misses"] and report["cache_hit_rate"] == pytest.approx(2 / 3, abs=0.01)
    assert report["retrieve_p50_ms_with_cache"] > 0 and report["e2e_p50_ms_without_cache"] > 0  # (timed on a real KB)
    assert report["same_answers_with_cache"] == f"{asked}/{asked}"
    assert not Conversation.objects.exists() and not Trace.objects.exists()


@pytest.mark.parametrize(("verbosity", "logged"), [(1, False), (2, True)])
def test_it_keeps_each_requests_log_lines_out_of_its_report_unless_asked(docs_kb, caplog, verbosity, logged):
    caplog.set_level(logging.INFO)

    call_command("bench", "chat", "--kb", "alice-kb", "--queries", "1", "--json", verbosity=verbosity,
                 stdout=io.StringIO())

    assert any("chat request" in record.getMessage() for record in caplog.records) is logged
    assert logging.root.manager.disable == logging.NOTSET


def test_its_checks_refuse_a_wrong_clock_or_amount():
    def result(answer: str, tool: str) -> ChatResult:
        return SimpleNamespace(answer=answer, tools=(tool,))  # type: ignore[return-value]

    tokyo = datetime.now(ZoneInfo("Asia/Tokyo"))
    assert _right_time("现在东京几点", result(f"Asia/Tokyo: {tokyo:%Y-%m-%d %H:%M:%S}", "datetime"))
    assert not _right_time("现在东京几点", result(f"Asia/Tokyo: {tokyo - timedelta(hours=1):%Y-%m-%d %H:%M:%S}", "datetime"))
    assert not _right_time("现在东京几点", result(f"UTC: {tokyo:%Y-%m-%d %H:%M:%S}", "datetime"))
    assert _right_conversion("100 美元等于多少人民币", result("100 USD = 729.93 CNY (…)", "currency"))
    assert not _right_conversion("100 美元等于多少人民币", result("100 USD = 700.00 CNY (…)", "currency"))
    assert not _right_conversion("100 美元等于多少人民币", result("100 USD = 729.93 CNY (…)", "calculator"))


@pytest.mark.parametrize(
    ("intervals", "until", "ms"),
    [([(0.0, 0.010), (0.005, 0.020)], 1.0, 20.0), ([(0.0, 0.010), (0.030, 0.040)], 0.035, 15.0),
     ([(0.0, 0.050), (0.010, 0.020)], 1.0, 50.0), ([], 1.0, 0.0)],
)
def test_it_counts_overlapping_model_waits_once(intervals, until, ms):
    assert _union_ms(intervals, until=until) == pytest.approx(ms)


@pytest.mark.django_db(transaction=True)  # the agents search side by side in threads
@pytest.mark.parametrize("agent", ["deep_research_agent", "plan_execute_agent"])
def test_it_times_an_agent_and_its_first_visible_event(docs_kb, agent):
    out = io.StringIO()

    call_command("bench", "chat", "--kb", "alice-kb", "--queries", "2", "--agent", agent, "--json", stdout=out)

    report = json.loads(out.getvalue())
    assert report["agent"] == agent and report["queries"] == 2
    assert 0 < report["first_agent_event_p50_ms"] <= report["e2e_p50_ms"]
    assert not Conversation.objects.exists() and not Trace.objects.exists()
