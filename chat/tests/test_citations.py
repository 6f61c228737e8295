from __future__ import annotations

import pytest

from agentic_rag.llm import CompletionOptions, ExtractiveProvider
from chat.pipeline.citations import check_citations, display_answer, find_citations, verify_quote
from chat.pipeline.prompt import assemble_prompt
from chat.pipeline.state import EvidenceItem

EVIDENCE = (
    EvidenceItem(1, "KB", "hybrid.md", "Hybrid search fuses BM25 and vectors. RRF uses k = 60.", 3, 30, "1 Hybrid"),
    EvidenceItem(2, "KB", "施工.md", "按照 GB 50204-2015 执行混凝土结构验收。架桥机进场前应完成技术交底。", 4, 40, "1 施工准备"),
    EvidenceItem(3, "TOOL", "calculator", "2 + 2 = 4"),
)


def test_it_cites_the_sentence_before_each_mark():
    answer = "(Extractive answer.)\n\nHybrid search fuses BM25 and vectors. [1] RRF uses k = 60. [1][2]"

    found = [(c.n, c.quote) for c in find_citations(answer)]

    assert found == [(1, "Hybrid search fuses BM25 and vectors."), (1, "RRF uses k = 60."), (2, "RRF uses k = 60.")]


def test_it_reads_chinese_marks_and_number_lists():
    answer = "架桥机进场前应完成技术交底。[2]按照 GB 50204-2015 执行混凝土结构验收。[1, 2]"

    found = [(c.n, c.quote) for c in find_citations(answer)]

    assert found == [(2, "架桥机进场前应完成技术交底。"), (1, "按照 GB 50204-2015 执行混凝土结构验收。"),
                     (2, "按照 GB 50204-2015 执行混凝土结构验收。")]


def test_it_maps_marks_to_evidence_and_verifies_their_quotes():
    answer = "Hybrid search fuses BM25 and vectors. [1] Hybrid search is the best method ever. [1] 2 + 2 = 4 [3]"

    citations = check_citations(answer, EVIDENCE)

    assert [(c.n, c.doc, c.chunk_id, c.verified) for c in citations] == [
        (1, "hybrid.md", 30, True), (1, "hybrid.md", 30, False), (3, "calculator", None, True)]
    assert citations[1].reason == "quote not found in the cited source"
    assert citations[2].source == "TOOL"


def test_it_flags_a_number_without_evidence():
    citations = check_citations("Something true. [7]", EVIDENCE)

    assert [(c.n, c.verified, c.reason, c.doc) for c in citations] == [(7, False, "no evidence [7]", "")]


def test_it_uses_a_cite_tags_quote_and_shows_it_as_a_mark():
    answer = ('<cite doc_id="1" quote="RRF uses k = 60">The constant is sixty.</cite> '
              '<cite doc_id="2" quote="not in the source">It is fine.</cite>')

    citations = check_citations(answer, EVIDENCE)

    assert [(c.n, c.quote, c.sentence, c.verified) for c in citations] == [
        (1, "RRF uses k = 60", "The constant is sixty.", True), (2, "not in the source", "It is fine.", False)]
    assert display_answer(answer) == "The constant is sixty. [1] It is fine. [2]"


@pytest.mark.parametrize(
    ("quote", "verified"),
    [("hybrid search FUSES bm25   and vectors", True), ("RRF uses k = 60", True), ("**RRF** uses k = 60.", True),
     ("RRF uses k = 61", False), ("", False), ("  .  ", False)],
)  # fmt: skip
def test_it_compares_quotes_ignoring_case_spacing_and_end_punctuation(quote, verified):
    assert verify_quote(quote, EVIDENCE[0].text)[0] is verified


@pytest.mark.parametrize(
    "question", ["How does hybrid search fuse results?", "架桥机进场前要做什么？", "What is RRF's k?"]
)
def test_it_always_verifies_the_extractive_generators_quotes(question):
    prompt = assemble_prompt(question, EVIDENCE)
    answer = ExtractiveProvider().complete(list(prompt.messages), CompletionOptions()).text

    citations = check_citations(answer, EVIDENCE)

    assert citations and all(c.verified for c in citations), (answer, citations)


TABLE_EVIDENCE = (
    EvidenceItem(1, "KB", "retrieval.md", "factor | weight | meaning\ncosine | 35% | vector similarity\ntitle | 20% | query terms in the name",
                 section="6.1 Five-factor scorer"),
)  # fmt: skip


def test_a_table_row_quoted_with_its_header_verifies_and_a_changed_one_does_not():
    assert verify_quote("factor: cosine, weight: 35%, meaning: vector similarity", TABLE_EVIDENCE[0].text)[0]
    assert not verify_quote("factor: cosine, weight: 25%, meaning: vector similarity", TABLE_EVIDENCE[0].text)[0]


def test_a_faithful_quote_that_does_not_address_the_question_is_not_verified():
    answer = "factor: title, weight: 20%, meaning: query terms in the name [1]"

    on_topic = check_citations(answer, TABLE_EVIDENCE, "What weight does the title factor get?")
    off_topic = check_citations(answer, TABLE_EVIDENCE, "Who won the 2018 World Cup?")

    assert [c.verified for c in on_topic] == [True]
    assert [(c.verified, c.reason) for c in off_topic] == [(False, "the sentence does not address the question")]


def test_a_sentence_is_read_in_its_section_when_judging_whether_it_answers():
    evidence = (EvidenceItem(1, "KB", "faq.md", "字节完全相同时报告为 unchanged。", section="2.4 同一个文件上传两次会怎样？"),)
    citations = check_citations("字节完全相同时报告为 unchanged。[1]", evidence, "同一个文件上传两次会怎样？")
    assert [c.verified for c in citations] == [True]


def test_a_sentence_with_a_semicolon_inside_brackets_is_quoted_whole():
    # The reader never cuts a unit at "；" or inside brackets; the check must read it the same way,
    # or the quote is the fragment after "；" and the sentence is judged on that fragment alone.
    sentence = "标签供多路召回的“标签匹配”路径使用（权重 1.2，相似度打 0.7 折；关键词完全命中标签加 0.08）。"
    evidence = (EvidenceItem(1, "KB", "02-ingestion.md", f"每个块的 tags 由几类来源组成。\n\n{sentence}", section="标签"),)

    citations = check_citations(f"{sentence}[1]", evidence, "标签匹配路径的权重是多少？")

    assert [(c.quote, c.verified) for c in citations] == [(sentence, True)]


BREAKER = (
    EvidenceItem(1, "KB", "architecture.md", "三态熔断器:\n- CLOSED\n- OPEN", section="4.2 熔断"),
    EvidenceItem(2, "KB", "architecture.md", "特性：三态熔断器+首包探测，参考项目：ragent，实现文件：model_router.py",
                 section="6 模型路由"),
    EvidenceItem(3, "KB", "architecture.md", "熔断器在失败率超过 10% 时打开，5 分钟后进入半开状态并发送一次探测请求。",
                 section="4.2 熔断"),
    EvidenceItem(4, "KB", "pipeline.md", "The pipeline has 8 stages. Each stage records its time.", section="2 Stages"),
)


def test_verbatim_quotes_that_do_not_say_how_it_works_are_not_verified():
    # Quoted faithfully, and both name the breaker: neither says how it works.
    answer = "三态熔断器:[1]特性：三态熔断器+首包探测，参考项目：ragent，实现文件：model_router.py[2]"

    citations = check_citations(answer, BREAKER, "熔断器是如何工作的？")

    assert [(c.verified, c.status) for c in citations] == [(False, "may_not_answer")] * 2
    assert citations[0].reason == "the question asks how and no quote says how"


@pytest.mark.parametrize("quote", ["三态熔断器:", "4.2 熔断", "│ │ └─ 熔断器(model_router.py)"])
def test_a_lead_in_a_heading_or_a_tree_line_alone_answers_nothing(quote):
    evidence = (EvidenceItem(1, "KB", "architecture.md", f"{quote}\n其余内容。", section="4.2 熔断器状态"),)

    citations = check_citations(f"{quote}[1]", evidence, "熔断器有几种状态？")

    assert [(c.status, c.reason) for c in citations] == [
        ("may_not_answer", "the quotes only introduce a list, name a section or draw a tree")]


def test_a_quote_that_says_how_it_works_is_verified():
    answer = "熔断器在失败率超过 10% 时打开，5 分钟后进入半开状态并发送一次探测请求。[3]"

    citations = check_citations(answer, BREAKER, "熔断器是如何工作的？")

    assert [(c.verified, c.status, c.reason) for c in citations] == [(True, "verified", "")]


@pytest.mark.parametrize(
    ("question", "answer", "reason"),
    [("How many nodes does the graph hold?", "The pipeline has 8 stages. [4]",
      "the quotes do not speak of what the question asks about"),
     ("How many stages does the pipeline have?", "Each stage records its time. [4]",
      "the question asks for a number and the quotes hold none")],
)
def test_quotes_missing_the_subject_or_the_asked_for_fact_may_not_answer(question, answer, reason):
    citations = check_citations(answer, BREAKER, question)

    assert [(c.status, c.reason) for c in citations] == [("may_not_answer", reason)]


def test_a_quote_missing_from_its_source_stays_unverified_beside_the_others():
    answer = "The pipeline has 8 stages. [4] The pipeline has 9 stages. [4]"

    citations = check_citations(answer, BREAKER, "How many stages does the pipeline have?")

    assert [c.status for c in citations] == ["verified", "unverified"]
    assert [c.as_dict()["status"] for c in citations] == ["verified", "unverified"]
    assert [c.as_verification()["verified"] for c in citations] == [True, False]
