"""hybrid+graph follows the titles the best documents mention to the documents they name."""

from __future__ import annotations

import dataclasses

import pytest

from graphrag.build import build_graph
from graphrag.search import graph_index, linked_documents
from graphrag.tests.test_build import ingest
from graphrag.titles import title_line
from knowledge.models import Document
from knowledge.retrieval import RetrievalParams, retrieve

pytestmark = pytest.mark.django_db

LINK_NOTE = "graph: a document the best hits name by its title"

# A bridge: the question names 海宁西站 to ask about the station its article names (余杭站),
# whose article shares almost no word with the question; the distractors share many.
BRIDGE = {
    "haining.txt": "海宁西站\n海宁西站是沪杭客运专线上的一座车站，位于浙江省海宁市。车站以北可换乘前往余杭站的城际列车。",
    "yuhang.txt": "余杭站\n余杭站于2013年7月1日随沪杭客运专线一并投入运营，地下一层为出站通道与公交枢纽。",
    **{
        f"other-{n}.txt": f"{name}\n{name}是一座小型车站，开通的年份见档案。"
        for n, name in enumerate(["临平南站", "桐乡站", "嘉善南站", "松江南站"])
    },
}
QUESTION = "海宁西站中提到的那个条目，它是哪一年开通的？"


def documents(result) -> list[str]:
    return list(dict.fromkeys(c.doc_name for c in result.candidates))


def test_a_title_line_is_short_alone_on_its_line_and_not_a_sentence():
    assert title_line("余杭站\n余杭站是一座车站。") == "余杭站"
    assert title_line("  Lincolnshire \nA county in England.") == "Lincolnshire"
    assert title_line("本文描述摄取流程。\n第二行") is None  # a sentence
    assert title_line("只有一行") is None  # nothing follows it
    assert title_line("这一行太长了" * 10 + "\n正文") is None


def test_hybrid_plus_graph_adds_the_article_the_best_hit_names_by_its_title(kb):
    ingest(kb, BRIDGE)
    build_graph(kb)
    params = RetrievalParams(mode="hybrid", top_k=4, postprocess=False, gate=None)

    hybrid = retrieve(QUESTION, kb, params)
    both = retrieve(QUESTION, kb, dataclasses.replace(params, mode="hybrid+graph"))

    assert documents(hybrid)[0] == "haining.txt" and "yuhang.txt" not in documents(hybrid)
    assert documents(both)[0] == "haining.txt" and "yuhang.txt" in documents(both)
    linked = [c for c in both.candidates if LINK_NOTE in c.notes]
    assert [c.doc_name for c in linked] == ["yuhang.txt"]
    assert "graph_links" in both.timings_ms
    # Without following titles, the leg does not reach it: the link is what found it.
    walk_only = retrieve(QUESTION, kb, dataclasses.replace(params, mode="hybrid+graph", graph_link_docs=0))
    assert not any(LINK_NOTE in c.notes for c in walk_only.candidates)


def test_only_the_best_documents_titles_are_followed(kb):
    ingest(kb, BRIDGE)
    build_graph(kb)
    ids = dict(Document.objects.filter(kb=kb).values_list("name", "id"))

    assert [d for d, _, _ in linked_documents(kb, [ids["haining.txt"]])] == [ids["yuhang.txt"]]
    # Already among the best: nothing to add. A distractor names no other title.
    assert linked_documents(kb, [ids["haining.txt"], ids["yuhang.txt"]]) == []
    assert linked_documents(kb, [ids["other-0.txt"]]) == []


def test_a_title_two_documents_share_leads_nowhere(kb):
    ingest(kb, {
        "a.txt": "概述文档\n第一篇。\n更多正文在这里。",
        "b.txt": "概述文档\n第二篇。\n另一段正文。",
        "c.txt": "索引\n参见概述文档了解全部内容。",
    })
    build_graph(kb)
    ids = dict(Document.objects.filter(kb=kb).values_list("name", "id"))

    assert linked_documents(kb, [ids["c.txt"]]) == []


def test_where_no_document_names_another_hybrid_plus_graph_ranks_as_before(kb):
    # Markdown documents whose headings nobody else writes: the links add nothing, and
    # hybrid+graph keeps exactly the ranking it had without them.
    ingest(kb)
    build_graph(kb)
    assert graph_index(kb).titles_named_by == {}
    params = RetrievalParams(mode="hybrid+graph", top_k=10, postprocess=False, gate=None)
    for question in ("Which relation does LightRAG have?", "What does LightRAG build on?", "How is the graph stored?"):
        with_links = retrieve(question, kb, params)
        without = retrieve(question, kb, dataclasses.replace(params, graph_link_docs=0))
        assert [c.chunk_id for c in with_links.candidates] == [c.chunk_id for c in without.candidates]
        assert not any(LINK_NOTE in c.notes for c in with_links.candidates)
