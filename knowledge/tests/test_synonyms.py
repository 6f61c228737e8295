"""A question worded with a synonym of the document's word still finds and quotes its passage."""

from __future__ import annotations

import pytest

from agentic_rag.llm.reader import Passage, read
from knowledge.analysis import analyze
from knowledge.fusion import MAX_SYNONYM_VARIANTS, expand_query
from knowledge.retrieval import RetrievalParams, retrieve

from .test_terms import _ingest


def test_a_synonym_variant_follows_the_translations():
    variants = expand_query("熔断器在什么错误率下打开？")

    assert variants[0] == "熔断器在什么错误率下打开？"
    assert "熔断器在什么失败率下打开？" in variants
    assert variants.index("熔断器在什么失败率下打开？") > variants.index("circuit breaker器在什么错误率下打开？")


def test_at_most_is_asked_for_the_documents_upper_limit():
    # "单条引用最多允许多少字符" is answered by "单条引用上限: max_single_reference_chars = 1500".
    assert "单条引用上限允许多少字符？" in expand_query("单条引用最多允许多少字符？", term_map={}, one_way={})
    assert "每批最小值几条？" in expand_query("每批最少几条？", term_map={}, one_way={})


def test_english_synonyms_are_whole_words_only():
    assert "How is the failure rate computed?" in expand_query("How is the error rate computed?")
    assert expand_query("Which errors rated highest?", synonyms=(("error rate", "failure rate"),), term_map={}, one_way={}) == [
        "Which errors rated highest?"
    ]


def test_a_question_of_many_synonyms_gets_a_bounded_number_of_variants():
    query = "删除 默认 数量 分数 排名 延迟 阈值 上限"

    variants = expand_query(query, term_map={}, one_way={})

    assert 1 < len(variants) <= 1 + MAX_SYNONYM_VARIANTS


def test_the_reader_quotes_the_sentence_that_uses_the_documents_word():
    passages = [Passage("1", "三态熔断器: 失败率超过 10% 时打开，5 分钟后半开探测。熔断器的状态写入日志。", 0)]

    with_synonyms = read("熔断器在什么错误率下打开？", passages, tokenize=analyze, expand=expand_query)
    without = read("熔断器在什么错误率下打开？", passages, tokenize=analyze, expand=lambda q: expand_query(q, synonyms=()))

    assert [p.unit.text for p in with_synonyms.picks][:1] == ["三态熔断器: 失败率超过 10% 时打开，5 分钟后半开探测。"]
    assert [p.unit.text for p in with_synonyms.picks] != [p.unit.text for p in without.picks]


@pytest.mark.django_db
def test_a_search_worded_with_a_synonym_finds_the_passage(kb):
    _ingest(kb, "breaker.md", "# 熔断\n\n当失败率超过 10% 时，断路进入打开状态。")
    _ingest(kb, "other.md", "# 日志\n\n错误信息写入日志文件，按天切分。")
    kb.refresh_from_db()

    result = retrieve("什么失败率会打开", kb, RetrievalParams(mode="bm25", max_expansions=8))
    synonym = retrieve("什么错误率会打开", kb, RetrievalParams(mode="bm25", max_expansions=8))

    assert result.candidates[0].doc_name == "breaker.md"
    assert synonym.candidates[0].doc_name == "breaker.md"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("question", "answer_doc"),
    [
        ("后端进程挂掉以后靠什么脚本拉起来？", "restart.md"),
        ("How many requests per second may one user send?", "limits.md"),
    ],
)
def test_everyday_wording_of_a_crash_or_a_rate_finds_the_documents_term(kb, question, answer_doc):
    _ingest(kb, "restart.md", "# 自动重启\n\n后端进程崩溃后由 run_with_restart.sh 重启。")
    _ingest(kb, "limits.md", "# 限流\n\n三级限流: 全局 1000 QPS / 用户 10 QPS / 会话 5 QPS")
    _ingest(kb, "other.md", "# 进程\n\n后端进程以后由 start.sh 脚本读取配置，每个用户的会话单独保存，请求写入日志。")
    kb.refresh_from_db()

    found = retrieve(question, kb, RetrievalParams(mode="bm25", max_expansions=8))

    assert found.candidates[0].doc_name == answer_doc
