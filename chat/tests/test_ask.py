from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from chat.models import Conversation
from chat.pipeline import ChatResult

pytestmark = pytest.mark.django_db


def ask(*args: str) -> str:
    out = io.StringIO()
    call_command("ask", *args, stdout=out)
    return out.getvalue()


def test_it_prints_the_json_apis_object(docs_kb):
    data = json.loads(ask("How does hybrid search fuse the rankings?", "--kb", "alice-kb", "--json"))

    assert list(data) == list(ChatResult().as_json())  # the API's body: one result shape for every way in
    assert data["intent"]["intents"][0]["name"] == "KB" and data["route"]["kb_prefix"] == "alice-kb"
    assert data["tools"] == [] and data["shortcut"] is None and data["status"] == "done" and data["error"] is None
    assert data["citations"][0]["doc"] == "hybrid.md" and data["citations"][0]["quote"] in data["answer"]
    assert [s["name"] for s in data["stages"]] == [
        "memory", "rewrite", "intent", "guide", "system", "retrieve", "prompt", "generate"]
    assert all(list(s) == ["name", "ms", "status", "detail"] for s in data["stages"])


def test_it_reports_a_shortcut_in_json(docs_kb):
    data = json.loads(ask("hello", "--kb", "alice-kb", "--json"))

    assert data["shortcut"] == "B" and data["intent"]["intents"][0]["name"] == "SYSTEM" and data["citations"] == []


def test_it_prints_a_readable_answer_with_citations_and_timings(docs_kb):
    text = ask("How does hybrid search fuse the rankings?", "--kb", "alice-kb")

    assert "Extractive answer" in text and "Citations:" in text and "[1] hybrid.md #" in text
    assert "retrieve" in text and "total" in text and " ms" in text


def test_it_continues_a_session_and_asks_as_a_given_user(docs_kb, alice):
    ask("What is hybrid search?", "--kb", "alice-kb", "--session", "cli-1", "--user", "alice")
    ask("What are its weights?", "--kb", "alice-kb", "--session", "cli-1", "--user", "alice")

    assert Conversation.objects.get(user=alice, session_id="cli-1").messages.count() == 4


def test_it_refuses_a_kb_the_user_may_not_read(docs_kb, bob):
    with pytest.raises(CommandError, match="no knowledge base 'alice-kb' you can read"):
        ask("What is hybrid search?", "--kb", "alice-kb", "--user", "bob")


def test_it_refuses_an_unknown_user(docs_kb):
    with pytest.raises(CommandError, match="no user 'carol'"):
        ask("Hi", "--kb", "alice-kb", "--user", "carol")


@pytest.mark.parametrize(
    ("question", "tool", "answer_part"),
    [("现在东京几点", "datetime", "Current time · 当前时间 Asia/Tokyo: "),
     ("100 美元等于多少人民币", "currency", "100 USD = 729.93 CNY")],
)  # fmt: skip
def test_it_answers_a_chinese_tool_question_with_the_tool_result_alone(docs_kb, question, tool, answer_part):
    data = json.loads(ask(question, "--kb", "alice-kb", "--json"))

    assert data["shortcut"] is None and [call["name"] for call in data["tools"]] == [tool]
    assert answer_part in data["answer"] and "没有共同的词语" not in data["answer"]
    assert data["citations"][0]["doc"] == tool and data["citations"][0]["chunk_id"] is None
    # A tool's result is labelled as one, not as sentences quoted from the sources.
    assert data["answer"].startswith("（工具结果") and "摘自资料原文" not in data["answer"]


def test_its_readable_citation_of_a_tool_names_no_chunk(docs_kb):
    text = ask("100美元换人民币", "--kb", "alice-kb")

    assert "[1] currency: 100 USD = 729.93 CNY" in text and "#None" not in text


def test_an_unverified_citation_is_printed_with_its_reason():
    from chat.management.commands.ask import Command
    from chat.pipeline.options import ChatResult

    citation = {"n": 1, "doc": "faq.md", "chunk_id": 7, "quote": "Logs are kept.", "verified": False}
    reason = {"n": 1, "quote": "Logs are kept.", "sentence": "Logs are kept.", "verified": False,
              "reason": "the sentence does not address the question"}
    result = ChatResult("t", "s", 1, "Logs are kept. [1]", "done", citations=(citation,), verification=(reason,))
    out = io.StringIO()

    Command(stdout=out)._print(result)

    assert "[1] faq.md #7: Logs are kept.  (the sentence does not address the question)" in out.getvalue()


def test_the_agent_may_be_a_worker_name_that_names_the_kb(docs_kb):
    data = json.loads(ask("How does hybrid search fuse the rankings?", "--agent", "alice-kb:plan_execute_agent:retrieve_only",
                          "--json"))

    assert data["route"]["kb_prefix"] == "alice-kb" and data["agent_steps"][0]["type"] == "plan"
    with pytest.raises(CommandError, match="names the KB 'alice-kb' but --kb is 'other'"):
        ask("Hi", "--agent", "alice-kb:hybrid_agent", "--kb", "other")
    with pytest.raises(CommandError, match="unsupported agent_mode"):
        ask("Hi", "--agent", "alice-kb:hybrid_agent:generate")
