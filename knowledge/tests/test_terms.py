"""Bilingual term pairs mined from a KB's own documents, and the cross-language search they give."""

from __future__ import annotations

import pytest
from django.test import TestCase
from hypothesis import given

from agentic_rag.tests.linear_time_support import DOCUMENT_CHARS, cpu_seconds, linear_time_settings, long_texts
from knowledge.fusion import CROSS_LANG_TERMS
from knowledge.ingest import delete_document, run_ingestion, submit_document
from knowledge.models import TermPair
from knowledge.retrieval import RetrievalParams, retrieve
from knowledge.terms import mine_term_pairs, term_map


def test_it_pairs_a_chinese_name_with_the_identifier_in_its_parentheses():
    pairs = mine_term_pairs("│ │ ├─ 候选融合排序(fusion_rank.py)\n│ │ └─ 质量门控(quality_gate.py)")

    assert pairs[("质量门控", "quality gate")] == 1
    assert pairs[("融合排序", "fusion rank")] == 1


def test_it_pairs_an_english_phrase_with_the_chinese_in_its_full_width_parentheses():
    pairs = mine_term_pairs("检索结果用 Reciprocal Rank Fusion（倒数排名融合）合并。流式输出（SSE）逐词推送。")

    assert ("倒数排名融合", "Reciprocal Rank Fusion") in pairs
    assert ("流式输出", "SSE") in pairs


def test_it_keeps_the_term_not_the_clause_before_the_parentheses():
    pairs = mine_term_pairs("Agent 只负责数据检索（retrieval），不负责生成。")

    assert list(pairs) == [("数据检索", "retrieval")]


def test_a_note_in_parentheses_is_not_a_translation():
    text = "调用会抛出 AttributeError（这是刻意设计的强约束）。权重 (weight=0.5)。来源 (KB/MCP/SYSTEM)。"

    assert not mine_term_pairs(text)


def test_the_map_keeps_one_chinese_term_per_english_term_and_the_most_stated_one():
    rows = [("守望进程", "Sentinel Watcher", 3), ("哨兵", "Sentinel Watcher", 1), ("门控", "quality gate", 2)]

    mapped = term_map(rows, CROSS_LANG_TERMS)

    assert mapped == {"守望进程": "Sentinel Watcher"}  # quality gate is a built-in term already


def test_a_single_lowercase_word_counts_only_when_stated_twice():
    assert term_map([("非流式生成", "general", 1)]) == {}
    assert term_map([("数据检索", "retrieval", 2)]) == {"数据检索": "retrieval"}


@linear_time_settings(max_examples=10)
@given(text=long_texts(DOCUMENT_CHARS))
def test_it_mines_a_long_text_in_linear_time(text):
    mine_term_pairs("预热（warm up）")  # jieba loads its dictionary on first use
    pairs, seconds = cpu_seconds(mine_term_pairs, text)
    assert seconds < 1.5
    assert len(pairs) <= 500


def test_runs_that_almost_make_a_pair_are_mined_quickly():
    for text in ("中" * DOCUMENT_CHARS + "(", "word " * (DOCUMENT_CHARS // 5) + "（", "（a" * (DOCUMENT_CHARS // 2)):
        assert cpu_seconds(mine_term_pairs, text)[1] < 1.5


def _ingest(kb, name, text):
    queued: list[int] = []
    with TestCase.captureOnCommitCallbacks(execute=True):
        outcome = submit_document(kb, name, text.encode(), enqueue=queued.append)
    run_ingestion(queued[0])
    return outcome.document


SENTINEL = "# 巡检\n\n守望进程（Sentinel Watcher）每 30 秒巡检一次全部节点，发现失联即告警。"
OTHER = "# Notes\n\nThe watcher of the build server checks nothing every night; sentinel values mark the end."


@pytest.mark.django_db
def test_an_english_question_finds_the_chinese_passage_through_the_pair_its_document_states(kb):
    document = _ingest(kb, "巡检.md", SENTINEL)
    _ingest(kb, "notes.md", OTHER)
    kb.refresh_from_db()

    result = retrieve("How often does the Sentinel Watcher run?", kb, RetrievalParams(mode="bm25"))

    assert TermPair.objects.filter(document=document, chinese="守望进程").exists()
    assert result.candidates[0].doc_name == "巡检.md"


@pytest.mark.django_db
def test_a_deleted_documents_pairs_leave_its_kb(kb):
    document = _ingest(kb, "巡检.md", SENTINEL)

    delete_document(document)

    assert not TermPair.objects.filter(kb=kb).exists()


def test_a_constant_or_a_tool_named_after_a_clause_is_not_a_translation():
    text = "工具出错或超时（CHAT_TOOL_TIMEOUT_S）时降级。页面支持拖拽多文件上传（HTMX），每行有按钮。"

    assert not mine_term_pairs(text)


def test_the_kb_map_leaves_words_that_are_translated_one_way_to_the_built_in_list():
    assert term_map([("事件", "llm interrupted", 2)], {"事件": "event"}) == {}
