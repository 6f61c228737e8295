"""The gate gates by default: the rerank check of the scorer that ran, a scope the question
names, and ContextWindow(1) completing a reference cut off mid-thought."""

from __future__ import annotations

import pytest
from hypothesis import given

from agentic_rag.tests.linear_time_support import cpu_seconds, linear_time_settings, long_texts

from knowledge.candidates import Candidate
from knowledge.context_window import cut_mid_thought, with_context_window
from knowledge.gate import GateParams, apply_quality_gate, gate_for_kb, gate_trace, rejection
from knowledge.rerank import FIVE_FACTOR_KEY, FiveFactorReranker, LLMJudgeReranker
from knowledge.scope import DocumentName, Scope, Section, detect_scope, in_scope_first

DOCUMENTS = [
    DocumentName(1, "03-retrieval.md", "Retrieval Engine"),
    DocumentName(2, "quality_gate.md", "质量门控"),
    DocumentName(3, "README.md", "Agentic RAG"),
    DocumentName(4, "检索指南.pdf", "检索指南"),
]
SECTIONS = [
    Section(1, "6", "Rerank"), Section(1, "6.1", "Five factors"), Section(1, "7", "Quality gate"),
    Section(1, "7.6", "质量门控"), Section(2, "3", "部署"), Section(2, "3.2", "全栈"), Section(3, "2.3", "Apps"),
]
TEXT = "The quality gate keeps at most three references within a 4000-character budget."


def candidate(chunk_id: int, **overrides) -> Candidate:
    fields = {"doc_id": 1, "doc_name": "03-retrieval.md", "text": TEXT, "scores": {"vector": 0.8}}
    return Candidate(chunk_id=chunk_id, **(fields | overrides))


# --- the rerank check reads the scorer that ran ------------------------------------------------


def _tokens(text: str) -> list[str]:
    return text.lower().replace(".", " ").split()


def test_the_five_factor_score_is_checked_against_its_calibrated_threshold():
    texts = ["quality gate thresholds keep references", "bananas and apples", "gate", "unrelated words here"]
    candidates = [candidate(i, text=t, scores={"vector": 0.9 - i * 0.2}) for i, t in enumerate(texts)]
    ranked = FiveFactorReranker(tokenize=_tokens).rerank("quality gate thresholds", candidates)
    scores = {c.chunk_id: c.scores[FIVE_FACTOR_KEY] for c in ranked}
    threshold = (scores[0] + max(scores[1], scores[3])) / 2

    gate = apply_quality_gate(ranked, GateParams(five_factor_min=threshold, submit_top_k=5))

    assert [r.chunk_id for r in gate.references] == [0]
    reasons = {v.chunk_id: v.reason for v in gate.verdicts}
    assert reasons[1] == f"rerank (five-factor) {scores[1]:.2f} < {threshold:.2f}"


def test_the_llm_judge_score_is_checked_against_070_and_wins_over_the_five_factors():
    judged = LLMJudgeReranker(lambda query, texts: [9, 6.5, 7][: len(texts)]).rerank(
        "q", [candidate(1), candidate(2), candidate(3)]
    )
    for c in judged:
        c.scores[FIVE_FACTOR_KEY] = 0.01  # the first stage's low score: the judge that ran last decides

    gate = apply_quality_gate(judged, GateParams(five_factor_min=0.5))

    assert [r.chunk_id for r in gate.references] == [1, 3]
    assert {v.chunk_id: v.reason for v in gate.verdicts}[2] == "rerank (LLM judge) 0.65 < 0.70"


def test_a_candidate_no_scorer_reached_is_not_held_to_a_rerank_threshold():
    assert rejection(candidate(1), GateParams(five_factor_min=0.9)) is None


@pytest.mark.parametrize(("stored", "threshold"), [
    ({"five_factor_min": 0.15}, 0.15), (None, GateParams().five_factor_min), ({"five_factor_min": 7}, GateParams().five_factor_min),
])
def test_the_kbs_stored_threshold_is_used_when_sane(stored, threshold):
    assert gate_for_kb(stored).five_factor_min == threshold


def test_an_untuned_kb_gets_the_threshold_calibrated_for_its_kind_of_vectors():
    assert gate_for_kb(None, lexical=True).five_factor_min == 0.10
    assert gate_for_kb(None, lexical=False).five_factor_min == 0.25
    assert gate_for_kb({"five_factor_min": 0.3}, lexical=False).five_factor_min == 0.3


# --- scope ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("question", "doc_ids", "chapter"), [
    ("What does 03-retrieval.md say about fusion?", {1}, ""),
    ("03-retrieval 里的融合权重是多少？", {1}, ""),
    ("在《质量门控》文档中，阈值是多少？", {2}, ""),
    ("quality_gate.md 的第3章讲什么？", {2}, "3"),
    ("第三章讲了什么部署方式？", set(), "3"),
    ("What is in section 7.6?", set(), "7.6"),
    ("Explain §6.1 of the Retrieval Engine document", {1}, "6.1"),
    ("7.6 质量门控的阈值是多少？", set(), "7.6"),
    ("Chapter 6 of 03-retrieval.md", {1}, "6"),
    ("检索指南.pdf 里怎么说", {4}, ""),
])
def test_it_detects_a_named_document_or_chapter(question, doc_ids, chapter):
    scope = detect_scope(question, DOCUMENTS, SECTIONS)

    assert scope is not None
    assert (set(scope.doc_ids), scope.chapter) == (doc_ids, chapter)


@pytest.mark.parametrize("question", [
    "How does the retrieval engine rank passages?",  # a title without a cue is a topic, not a document
    "质量门控的阈值是多少？",
    "How does a numbered heading such as ### 2.3 end up next to the evidence?",  # no section cue
    "Why isn't the 0.7 / 0.3 weighting the default?",
    "What is in section 9.9?",  # the KB has no section 9.9
    "What does the readme say?",  # a word, not a file name, without quotes or a cue
])
def test_it_names_no_scope_where_the_question_names_none(question):
    assert detect_scope(question, DOCUMENTS, SECTIONS) is None


def test_a_chapter_is_looked_for_in_the_named_document_only():
    # quality_gate.md has no section 7.6: the chapter named with it names nothing there.
    scope = detect_scope("quality_gate.md section 7.6", DOCUMENTS, SECTIONS)

    assert scope is not None and scope.doc_ids == {2} and scope.chapter == ""


def test_candidates_outside_the_scope_are_rejected_with_a_reason_the_trace_shows():
    scope = Scope(frozenset({1}), ("03-retrieval.md",), "7")
    candidates = [
        candidate(1, section_index="7.6"),
        candidate(2, doc_id=3, doc_name="README.md", section_index="7.6"),
        candidate(3, section_index="6.1"),
        candidate(4, section_index="70"),
    ]

    gate = apply_quality_gate(candidates, GateParams(), scope=scope)

    reasons = {v.chunk_id: v.reason for v in gate.verdicts}
    assert [r.chunk_id for r in gate.references] == [1]
    assert reasons[2] == "outside the scope 03-retrieval.md §7: from README.md"
    assert reasons[3] == "outside the scope 03-retrieval.md §7: §6.1"
    assert reasons[4] == "outside the scope 03-retrieval.md §7: §70"
    trace = gate_trace(gate, scope)
    assert trace.startswith("scope 03-retrieval.md §7 (named in the question); 1 passed, 3 rejected")
    assert "chunk 2: outside the scope" in trace


def test_in_scope_candidates_go_first_in_their_order():
    scope = Scope(frozenset({1}), ("03-retrieval.md",))
    ranked = [candidate(1, doc_id=3), candidate(2), candidate(3, doc_id=2), candidate(4)]

    assert [c.chunk_id for c in in_scope_first(ranked, scope)] == [2, 4, 1, 3]
    assert [c.chunk_id for c in in_scope_first(ranked, None)] == [1, 2, 3, 4]


# --- ContextWindow(1) ------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "following", "cut"), [
    ("The gate rejects a candidate when its vector score is low and, as described in", "section 7. Then more.", "sentence"),
    ("文档在摄取过程中会依次经历以下几种状态，分别是排队、解析、分块和", "索引。最后是就绪。", "sentence"),
    ("The ingestion task moves a document through these states:", "- queued\n- parsing", "lead-in"),
    ("文档的状态有以下几种：", "排队、解析、就绪。", "lead-in"),
    ("setting | default\nCHAT_TOP_K | 5", "CHAT_RERANK_TOP_K | 5\n\nNext paragraph.", "table"),
    ("The gate keeps three references.", "Another sentence follows.", ""),
    ("文档摄取完成后状态变为就绪。", "下一段。", ""),
    ("setting | default\nCHAT_TOP_K | 5", "A paragraph after the table.", ""),
    ("6. Rerank", "The five-factor scorer", ""),  # a heading
    ("The scorer weights five factors (cosine, terms, title, score, Jaccard)", "Next.", ""),
    ("The gate rejects a candidate when its vector score is low and, as described in", "", ""),  # no next chunk
    ("pipeline.add(Window(1)) # 相邻 chunk 扩展", "pipeline.add(Truncate(5)) # 截断", ""),  # code
])
def test_it_finds_a_cut_mid_thought_and_nothing_else(text, following, cut):
    assert cut_mid_thought(text, following) == cut


def test_a_cut_reference_gets_the_rest_of_its_thought_and_shows_it():
    cut = candidate(
        1, text="Chunks are split into parents and children, and each child keeps a pointer to",
        metadata={"context_after": "its parent chunk. The parent is what the prompt sees.\nMore text."},
    )
    whole = candidate(2, metadata={"context_after": "Something else entirely."})

    gate = apply_quality_gate([cut, whole], GateParams())

    completed, untouched = gate.references
    assert completed.text.endswith("keeps a pointer to its parent chunk.")
    assert completed.metadata["context_window"] == "its parent chunk."
    assert "context window" in completed.notes[-1]
    assert untouched.text == TEXT
    assert "with 17 chars of the next chunk" in gate.verdicts[0].reason


def test_a_lead_in_gets_the_lines_that_follow_it():
    lead = candidate(1, text="文档的状态有以下几种：", metadata={"context_after": "- 排队\n- 解析\n- 就绪"})

    assert with_context_window(lead).text == "文档的状态有以下几种：\n- 排队\n- 解析\n- 就绪"


def test_a_table_that_completes_a_line_keeps_its_header_on_a_line_of_its_own():
    diagram = candidate(1, text="Stage 7 (Prompt Assembly)\nStage 8 (Streaming Output) ── SSE", metadata={
        "context_after": "阶段 | 名称 | 目标耗时\nS2 | Query Rewrite | <500ms",
    })

    assert with_context_window(diagram).text.endswith("── SSE\n阶段 | 名称 | 目标耗时\nS2 | Query Rewrite | <500ms")


def test_the_lines_an_overlapping_next_chunk_repeats_are_not_joined_again():
    overlapping = candidate(1, text="后处理流水线:\npipeline.add(Dedup()) # 去重\npipeline.add(Window(1)) # 相邻 chunk 扩展", metadata={
        "context_after": "pipeline.add(Window(1)) # 相邻 chunk 扩展\npipeline.add(Truncate(5)) # 截断",
    })

    overlapping_prose = candidate(2, text="第一句话。\n第二句话说到一半", metadata={
        "context_after": "第二句话说到一半\n就断开了。后面还有。",
    })

    assert with_context_window(overlapping).text == overlapping.text  # a line of code ends whole
    assert with_context_window(overlapping_prose).text == "第一句话。\n第二句话说到一半就断开了。"


def test_a_key_and_its_value_in_the_next_chunk_start_a_line_of_their_own():
    # The chunk ends a section; the next chunk opens the next section with "文件: …".
    probe = candidate(1, text="三态熔断器:\n首包探测: 发送 \"hi\" (5s 超时) → 成功才发全量请求", metadata={
        "context_after": "文件: app/platform/memory.py\n短期记忆保留最近 20 轮。",
    })

    joined = with_context_window(probe).text

    assert "成功才发全量请求\n文件: app/platform/memory.py" in joined  # not "…全量请求文件: …"


def test_the_context_window_can_be_turned_off_and_respects_the_budget():
    cut = candidate(1, text="a" * 1490 + " and", metadata={"context_after": "the rest of it. More."})

    assert apply_quality_gate([cut], GateParams(context_window=False)).references[0].text == cut.text
    # Joined, it would be cut by the 1500-char budget: the reference stays as it was.
    assert apply_quality_gate([cut], GateParams()).references[0].text == cut.text


@linear_time_settings(max_examples=30)
@given(text=long_texts(3000))
def test_a_long_chunk_and_its_neighbour_are_joined_in_bounded_time(text):
    lines = "\n".join("x" for _ in range(8000))
    # Every opening of the next chunk matches all but the last line of this one's end.
    chunk = candidate(1, text=f"{text}\n{lines}\ny", metadata={"context_after": f"{lines}\n{text}"})

    joined, seconds = cpu_seconds(lambda _: with_context_window(chunk), "")

    assert joined.text.startswith(chunk.text)
    assert seconds < 0.25, seconds
