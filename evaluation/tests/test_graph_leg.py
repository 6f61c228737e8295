"""The graph leg earns its place per KB: its evaluation's verdict is stored, auto mode follows
it (the workers that add the leg on their own search plain hybrid when it did not help), and
the KB's settings page says which."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from chat.agent_support import graph_mode
from chat.graph_agent import GraphAgentWorker
from evaluation import graph_leg
from evaluation.graph_leg import judge_graph_leg
from evaluation.runner import EvalQuestion
from graphrag.build import build_graph
from graphrag.tests.test_build import DOCS, ingest
from knowledge.graph_leg import graph_leg_helps, graph_leg_verdict
from knowledge.models import Document
from knowledge.retrieval import RetrievalResult

pytestmark = pytest.mark.django_db

QUESTIONS = [EvalQuestion("q1", "What does GraphRAG use?", "test", {1: 1})]


class FakeEvaluation:
    def __init__(self, recall: float) -> None:
        self.report = type("Report", (), {"metrics": {"recall@10": recall, "ndcg@10": recall / 2}})()


def fake_evaluate(recalls: dict[str, float]):
    calls = []

    def evaluate(kb, questions, *, mode, **overrides):
        calls.append(mode)
        return FakeEvaluation(recalls[mode])

    return evaluate, calls


@pytest.mark.parametrize(("with_graph", "helps"), [(0.60, True), (0.50, False), (0.40, False)])
def test_the_verdict_is_whether_the_leg_raised_recall_and_it_is_stored(kb, monkeypatch, with_graph, helps):
    evaluate, calls = fake_evaluate({"hybrid": 0.50, "hybrid+graph": with_graph})
    monkeypatch.setattr(graph_leg, "evaluate", evaluate)
    type(kb).objects.filter(pk=kb.pk).update(retrieval_settings={"mode": "hybrid", "rerank": False})

    verdict = judge_graph_leg(kb, QUESTIONS)

    assert sorted(calls) == ["hybrid", "hybrid+graph"] and verdict.helps is helps
    kb.refresh_from_db()
    stored = graph_leg_verdict(kb)
    assert stored["helps"] is helps and stored["hybrid"] == 0.5 and stored["hybrid+graph"] == with_graph
    assert kb.retrieval_settings["rerank"] is False  # the KB's other settings stay
    assert graph_leg_helps(kb) is helps


def test_auto_mode_drops_the_leg_where_the_kb_found_it_no_help(kb, monkeypatch):
    ingest(kb)
    build_graph(kb)
    assert graph_leg_helps(kb) and graph_mode(kb) == "hybrid+graph"  # never judged: the leg stays

    monkeypatch.setattr(graph_leg, "evaluate", fake_evaluate({"hybrid": 0.5, "hybrid+graph": 0.4})[0])
    judge_graph_leg(kb, QUESTIONS)
    kb.refresh_from_db()

    assert graph_mode(kb) == "hybrid"
    modes = []

    def retriever(query, kb_, params):
        modes.append(params.mode)
        return RetrievalResult(query=query, mode=params.mode)

    GraphAgentWorker(kb.slug).retrieve_with_trace("What does GraphRAG use?", kb=kb, retriever=retriever)
    assert modes == ["hybrid"]

    monkeypatch.setattr(graph_leg, "evaluate", fake_evaluate({"hybrid": 0.5, "hybrid+graph": 0.7})[0])
    judge_graph_leg(kb, QUESTIONS)
    kb.refresh_from_db()
    assert graph_mode(kb) == "hybrid+graph"


def test_the_settings_page_says_whether_auto_mode_uses_the_leg(kb, alice_client, monkeypatch):
    url = reverse("knowledge-settings", args=[kb.slug])
    assert "--judge-graph-leg" in alice_client.get(url).content.decode()

    monkeypatch.setattr(graph_leg, "evaluate", fake_evaluate({"hybrid": 0.297, "hybrid+graph": 0.23})[0])
    judge_graph_leg(kb, QUESTIONS)
    html = alice_client.get(url).content.decode()

    assert 'data-graph-leg="off"' in html and "0.297" in html and "0.23" in html

    monkeypatch.setattr(graph_leg, "evaluate", fake_evaluate({"hybrid": 0.9306, "hybrid+graph": 0.9653})[0])
    judge_graph_leg(kb, QUESTIONS)
    assert 'data-graph-leg="on"' in alice_client.get(url).content.decode()


def test_the_leg_is_judged_on_real_retrieval(kb):
    """Through `retrieve` in both modes, no fake: the verdict holds the two figures it measured."""
    ingest(kb, {**DOCS})
    build_graph(kb)
    documents = dict(Document.objects.filter(kb=kb).values_list("name", "pk"))
    questions = [
        EvalQuestion("a", "What does StreamChatPipeline use for sessions?", "test", {documents["pipeline.md"]: 1}),
        EvalQuestion("b", "Which broker does Celery use?", "test", {documents["ops.md"]: 1}),
    ]

    verdict = judge_graph_leg(kb, questions)

    assert verdict.questions == 2
    assert 0.0 <= verdict.hybrid["recall@10"] <= 1.0 and 0.0 <= verdict.hybrid_graph["recall@10"] <= 1.0
    assert verdict.helps is (verdict.hybrid_graph["recall@10"] > verdict.hybrid["recall@10"])


def test_bridge_questions_join_an_article_to_the_one_it_names_and_hide_that_name(tmp_path):
    from evaluation.multidoc import bridge_dataset

    def article(title, text, *questions):
        return {"title": title, "paragraphs": [{"context": text, "qas": [
            {"id": f"{title}-{n}", "question": q, "answers": [{"text": "x", "answer_start": 0}]} for n, q in enumerate(questions)
        ]}]}

    data = {"data": [
        article("林肯郡", "林肯郡位于英格兰，西邻诺丁汉郡。", "林肯郡在哪里？"),
        article("诺丁汉郡", "诺丁汉郡隶属于英国，行政总部在西布里奇福德。", "诺丁汉郡隶属于哪个国家？", "行政总部在哪？", "第三问？"),
        article("某书", "这本书写到诺丁汉郡和林肯郡。", "作者是谁？"),  # names two articles: no bridge
        article("无关", "一段与两者都无关的文字。", "这是什么？"),
    ]}
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")

    dataset = bridge_dataset([path], distractors=0)

    texts = {q.text for q in dataset.questions}
    assert texts == {"林肯郡中提到的那个条目，它隶属于哪个国家？", "林肯郡中提到的那个条目：行政总部在哪？"}
    assert all(len(q.relevant) == 2 for q in dataset.questions)
    assert {p.text.split("\n")[0] for p in dataset.passages} == {"林肯郡", "诺丁汉郡"}  # no distractor kept
    assert len(bridge_dataset([path]).passages) == 4
