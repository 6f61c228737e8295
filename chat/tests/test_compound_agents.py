"""Every agent on a compound question: a worker per part (or the agent's own sub-questions and
tasks), each part gated and answered from its own evidence, the part nothing answers named."""

from __future__ import annotations

import re

import pytest

from chat.tests.conftest import Events, ingest_docs
from chat.workers import RagRunSpec, plan_for


def test_the_plan_has_a_worker_per_part_but_agents_that_split_get_the_question_whole():
    parts = ["When does the breaker open?", "How does hybrid search fuse the rankings?"]
    whole = " and ".join(parts)

    assert plan_for("kb", "hybrid_agent", [whole], parts) == [
        RagRunSpec("kb", "hybrid_agent", (part,), part=part) for part in parts
    ]
    # "auto" chooses for each part: a relation goes to the graph agent.
    auto = plan_for("kb", "auto", [whole], ["When does the breaker open?", "GraphRAG 和 networkx 的关系？"])
    assert [spec.agent_type for spec in auto] == ["hybrid_agent", "graph_agent"]
    for agent in ("deep_research_agent", "plan_execute_agent"):
        assert plan_for("kb", agent, [whole, *parts], parts) == [RagRunSpec("kb", agent, (whole,))]
    assert plan_for("kb", "hybrid_agent", [whole], [parts[0]]) == [RagRunSpec("kb", "hybrid_agent", (whole,))]


# --- every agent on a compound question over a KB whose two parts live in two documents ---------

DOCS = {
    "weights.md": "# Weighted fusion\n\nThe weighted mode scores 0.7 times the vector score plus 0.3 times the BM25 "
    "score. Hybrid search fuses the BM25 ranking and the vector ranking.",
    "breaker.md": "# Circuit breaker\n\nThe circuit breaker opens when more than 10% of calls fail within the "
    "window. It stays open for five minutes, then lets one probe through.",
    "限流.md": "# 限流\n\n令牌桶算法用于限流，每秒补充 50 个令牌。超过速率的请求返回 429。",
}
COMPOUND = "How much does the weighted mode multiply the vector score by, and when does the circuit breaker open?"
AGENTS = ("auto", "naive_rag_agent", "hybrid_agent", "graph_agent", "react_agent", "deep_research_agent",
          "plan_execute_agent", "fusion_agent")


def _ask(alice, question: str, agent: str, llm):
    from chat.pipeline import ChatOptions, ChatRequest, run_chat

    events = Events()
    result = run_chat(ChatRequest(alice, None, question, ChatOptions(kb_slug="alice-kb", agent_type=agent)),
                      emit=events, llm=llm)
    return result, events


def _cited_docs(answer: str, part_text: str, evidence) -> set[str]:
    numbers = {int(n) for n in re.findall(r"\[(\d+)\]", part_text)}
    return {item["doc"] for item in evidence if item["n"] in numbers}


def _answer_parts(answer: str) -> list[str]:
    """The answer's text under each part heading."""
    return re.split(r"\*\*\d+\. [^*]+\*\*", answer)[1:]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("agent", AGENTS)
def test_every_agent_answers_each_part_from_its_own_document(alice, kb, extractive, agent):
    ingest_docs(kb, DOCS)

    result, events = _ask(alice, COMPOUND, agent, extractive)

    assert result.status == "done", result.answer
    first, second = _answer_parts(result.answer)
    assert "0.7" in first and "10%" in second
    assert _cited_docs(result.answer, first, result.evidence) == {"weights.md"}
    assert _cited_docs(result.answer, second, result.evidence) == {"breaker.md"}
    # Each part's quotes are checked against its own question, which they answer.
    assert result.citations and all(c["verified"] for c in result.citations), result.citations
    parts = [event.data for event in events.of("part")]
    assert [p["docs"][:1] for p in parts] == [["weights.md"], ["breaker.md"]] and all(p["found"] for p in parts)
    assert [s for s in result.agent_steps if s["type"] == "part"] == [{"type": "part", **p} for p in parts]


@pytest.mark.django_db(transaction=True)
def test_each_agent_shows_its_own_work_on_a_compound_question(alice, kb, extractive):
    ingest_docs(kb, DOCS)
    steps = {agent: _ask(alice, COMPOUND, agent, extractive)[0].agent_steps for agent in AGENTS}

    thinking = next(s for s in steps["deep_research_agent"] if s["type"] == "thinking")
    assert thinking["text"].startswith("2 sub-question(s)")
    plan = next(s for s in steps["plan_execute_agent"] if s["type"] == "plan")
    assert len([t for t in plan["tasks"] if not t["depends_on"]]) >= 2
    assert {s["type"] for s in steps["plan_execute_agent"]} >= {"plan", "task", "report", "part"}
    # A worker per part: its steps name the part they work on.
    react = [s for s in steps["react_agent"] if s["type"] == "step"]
    assert len({s["part"] for s in react}) == 2
    fusion = [s for s in steps["fusion_agent"] if s["type"] == "thinking" and s["text"].startswith("fused")]
    assert len({s["part"] for s in fusion}) == 2
    assert [s["agent_type"] for s in steps["hybrid_agent"]] == ["hybrid_agent", "hybrid_agent"]
    assert [s["agent_type"] for s in steps["graph_agent"]] == ["graph_agent", "graph_agent"]
    # No two agents leave the same record of their work.
    records = [tuple(sorted({s["type"] for s in found})) + tuple(s.get("agent_type", "") for s in found)
               for found in steps.values() if found]
    assert len(set(records)) == len(records) - 1  # auto chose the hybrid agent for both parts, and says so


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("agent", "question", "missing", "said"),
    [
        ("hybrid_agent", "When does the circuit breaker open, and which database stores the quantum ledger?",
         "which database stores the quantum ledger?", "Nothing in the knowledge base answers this part"),
        ("deep_research_agent", "限流用什么算法？量子账本存在哪个数据库里？",
         "量子账本存在哪个数据库里？", "知识库中没有找到这一部分的答案"),
        ("plan_execute_agent", "When does the circuit breaker open, and which database stores the quantum ledger?",
         "which database stores the quantum ledger?", "Nothing in the knowledge base answers this part"),
        # A part naming what the KB never mentions, though its other words are the KB's.
        ("hybrid_agent", "When does the circuit breaker open, and does hybrid search run on OpenSearch?",
         "does hybrid search run on OpenSearch?", "Nothing in the knowledge base answers this part"),
    ],
)
def test_a_part_nothing_answers_is_named_as_not_found(alice, kb, extractive, agent, question, missing, said):
    ingest_docs(kb, DOCS)

    result, events = _ask(alice, question, agent, extractive)

    found, not_found = _answer_parts(result.answer)
    assert re.search(f"{said}[:：] ?{re.escape(missing)}", not_found) and not re.search(r"\[\d+\]", not_found)
    assert re.search(r"\[\d+\]", found)
    # The found part's quotes answer their part, though not the part nothing answers.
    assert result.citations and all(c["verified"] for c in result.citations), result.citations
    assert [p.data["found"] for p in events.of("part")] == [True, False]
