from __future__ import annotations

import pytest

from chat.pipeline.intent import Intent, IntentResult
from chat.pipeline.options import ChatOptions
from chat.pipeline.replies import clarifying_question, no_evidence_reply, system_reply
from chat.pipeline.stages import (
    MAX_NAMES_CHECKED,
    NO_MATCH,
    NO_REFERENCE,
    collect_search,
    evidence_limit,
    find_ambiguity,
    number_evidence,
    recent_turns,
    retrieval_params,
    split_reply,
    unmentioned,
)
from chat.pipeline.state import Turn
from chat.pipeline.tools import Tool, ToolCall, ToolRegistry, ToolResult
from knowledge.candidates import Candidate
from knowledge.retrieval import RetrievalParams, RetrievalResult, save_params_for_kb


def intents(*pairs) -> IntentResult:
    return IntentResult(tuple(Intent(name, confidence, tool=tool) for name, confidence, tool in pairs), "rules")


@pytest.mark.parametrize(
    ("result", "reason"),
    [(intents(("KB", 0.7, "")), None), (intents(("KB", 0.69, "")), "top confidence 0.69 < 0.70"),
     (intents(("KB", 0.9, ""), ("TOOL", 0.8, "weather")), "top-2 gap 0.10 < 0.15"),
     (intents(("KB", 0.9, ""), ("TOOL", 0.75, "weather")), None),
     (intents(("KB", 0.9, ""), ("TOOL", 0.45, "weather")), None)],
)  # fmt: skip
def test_it_finds_ambiguity_by_confidence_and_top_2_gap(result, reason):
    found = find_ambiguity(result, min_confidence=0.7, min_gap=0.15, floor=0.5)

    assert (found.reason if found else None) == reason


def test_tools_the_rules_found_together_are_not_rivals_but_an_llms_close_tools_are():
    both = (("TOOL", 0.85, "weather"), ("TOOL", 0.85, "currency"))
    by_llm = IntentResult(intents(*both).intents, "llm")

    assert find_ambiguity(intents(*both), min_confidence=0.7, min_gap=0.15, floor=0.5) is None
    assert find_ambiguity(by_llm, min_confidence=0.7, min_gap=0.15, floor=0.5).reason == "top-2 gap 0.00 < 0.15"


def test_it_ignores_rivals_below_the_minimum_confidence_score():
    close = intents(("KB", 0.75, ""), ("TOOL", 0.65, "weather"))

    assert find_ambiguity(close, min_confidence=0.7, min_gap=0.15, floor=0.5) is not None
    assert find_ambiguity(close, min_confidence=0.7, min_gap=0.15, floor=0.7) is None


def test_it_keeps_the_last_n_exchanges():
    turns = [Turn("user" if i % 2 == 0 else "assistant", str(i)) for i in range(10)]

    assert [t.content for t in recent_turns(turns, 2)] == ["6", "7", "8", "9"]
    assert recent_turns(turns, 0) == ()


def candidate(chunk_id: int, doc: str = "a.md", score: float = 0.5) -> Candidate:
    return Candidate(chunk_id=chunk_id, doc_id=1, doc_name=doc, text=f"text {chunk_id}", score=score,
                     section_index="1", section_title="Intro")


def fake_retriever(results: dict[str, RetrievalResult]):
    seen = []

    def retrieve(query, kb, params):
        seen.append((query, params))
        return results[query]

    retrieve.seen = seen
    return retrieve


def test_it_merges_the_references_of_every_query_once_each_in_order():
    search = collect_search([
        RetrievalResult("q", "hybrid", candidates=[candidate(1), candidate(2)]),
        RetrievalResult("part", "hybrid", candidates=[candidate(2), candidate(3)], warnings=["w"]),
    ])

    assert [c.chunk_id for c in search.references] == [1, 2, 3] and search.reason == "" and search.warnings == ["w"]


@pytest.mark.parametrize(
    ("results", "reason"),
    [([RetrievalResult("q", "hybrid", reason="the knowledge base has no ready documents")],
      "the knowledge base has no ready documents"),
     ([RetrievalResult("q", "hybrid")], NO_MATCH)],
)  # fmt: skip
def test_it_says_why_there_is_no_evidence(results, reason):
    search = collect_search(results)

    assert search.references == [] and search.reason == reason


def test_it_tells_a_gate_that_refused_everything_from_no_match():
    from knowledge.gate import GateResult

    result = RetrievalResult("q", "hybrid", candidates=[candidate(1)], gate=GateResult((), ()))

    assert collect_search([result]).reason == NO_REFERENCE


def test_it_numbers_kb_evidence_first_then_successful_tool_outputs():
    tools = [ToolResult("calculator", {"expression": "2+2"}, "4"), ToolResult("weather", {}, "", ok=False, error="x")]

    items = number_evidence([candidate(7, "b.md"), candidate(8)], tools, limit=1, url_for=lambda c: f"/c/{c.chunk_id}")

    assert [(i.n, i.source, i.doc, i.chunk_id, i.section, i.url) for i in items] == [
        (1, "KB", "b.md", 7, "1 Intro", "/c/7"), (2, "TOOL", "calculator", None, "", "")]


def test_a_kb_item_carries_its_documents_title_into_the_prompt():
    from chat.pipeline.prompt import document_element

    titled = candidate(7, "002_a04.md")
    titled.doc_title = "AI 对话功能 - 实现逻辑"
    items = number_evidence([titled], [], limit=1)

    assert items[0].title == "AI 对话功能 - 实现逻辑"
    assert document_element(items[0]).startswith('<document id="1" doc="002_a04.md" title="AI 对话功能 - 实现逻辑" section=')
    assert number_evidence([candidate(7)], [], limit=1)[0].title == ""


@pytest.mark.parametrize(("rerank", "top_k", "rerank_top_k", "limit"), [(True, 5, 3, 3), (False, 5, 3, 5), (True, 2, 5, 2)])
def test_it_keeps_rerank_top_k_items_after_rerank(rerank, top_k, rerank_top_k, limit):
    options = ChatOptions(enable_rerank=rerank, top_k=top_k, rerank_top_k=rerank_top_k)

    assert evidence_limit(options, rerank=rerank) == limit


def test_it_takes_option_defaults_from_settings(settings):
    settings.CHAT_TOP_K = 9
    settings.CHAT_ENABLE_QUERY_REWRITE = False

    options = ChatOptions(kb_slug="x")

    assert (options.top_k, options.enable_query_rewrite, options.rerank_top_k) == (9, False, 5)
    assert options.replace(top_k=2).top_k == 2


@pytest.mark.parametrize(("mode_setting", "rerank_setting", "expected"), [
    ("", None, ("multipath", False)),  # the KB's tuned settings
    ("vector", True, ("vector", True)),  # the deployment's settings override every KB
])
def test_chat_searches_with_the_kb_settings_unless_the_deployment_overrides_them(
    kb, settings, mode_setting, rerank_setting, expected
):
    save_params_for_kb(kb, RetrievalParams(mode="multipath", rerank=False))
    kb.refresh_from_db()
    settings.CHAT_SEARCH_MODE, settings.CHAT_ENABLE_RERANK = mode_setting, rerank_setting

    params = retrieval_params(kb, ChatOptions(top_k=4))

    assert (params.mode, params.rerank, params.top_k) == (*expected, 4)


def test_it_cuts_a_reply_into_stream_pieces():
    assert "".join(split_reply("x" * 50)) == "x" * 50 and len(split_reply("x" * 50)) == 3


def test_it_runs_only_the_tools_a_message_calls_and_survives_a_failing_one():
    def explode(parameters):
        raise ValueError("bad input")

    registry = ToolRegistry((
        Tool("echo", "echoes", handler=lambda p: p["text"], extract=lambda m: {"text": m} if "echo" in m else None),
        Tool("boom", "fails", handler=explode, extract=lambda m: {}),
    ))

    calls = registry.plan("echo this", ("echo", "boom", "missing"))

    assert calls == [ToolCall("echo", {"text": "echo this"}), ToolCall("boom", {})]
    assert registry.run(calls[0]).output == "echo this"
    failed = registry.run(calls[1])
    assert not failed.ok and failed.error == "ValueError: bad input"


@pytest.mark.parametrize(
    ("message", "start"),
    [("你好", "你好！"), ("hello", "Hello!"), ("help", "Pick a knowledge base"), ("谢谢", "不客气")],
)
def test_it_answers_system_messages_in_their_language(message, start):
    from chat.pipeline.intent import rule_intents

    assert system_reply(message, rule_intents(message)).startswith(start)


def test_it_words_clarifying_questions_and_no_evidence_replies():
    both = (Intent("TOOL", 0.85, tool="weather"), Intent("TOOL", 0.85, tool="currency"))

    assert clarifying_question("天气和汇率", both) == "我不太确定你的意思：你是想让我使用 weather 工具，还是使用 currency 工具？"
    assert clarifying_question("what about it?", both[:1]).startswith("Could you be more specific?")
    assert no_evidence_reply("What?", "Docs", "nothing in the knowledge base matches the query") == (
        "I found nothing in the knowledge base \u201cDocs\u201d that answers this "
        "(nothing in the knowledge base matches the query).")
    assert "没有与问题匹配的内容" in no_evidence_reply("什么？", "Docs", "nothing in the knowledge base matches the query")


def _reference(text: str, section: str = "") -> Candidate:
    return Candidate(chunk_id=1, doc_id=1, doc_name="d.md", text=text, section_title=section)


@pytest.mark.parametrize(
    ("question", "text", "section", "coverage"),
    [
        ("When does the breaker open?", "The breaker opens at 10%.", "", 1.0),
        ("What is the boiling point of ethanol?", "The breaker opens at 10%.", "", 0.0),
        ("同一个文件上传两次会怎样？", "字节相同时报告为 unchanged。", "同一个文件上传两次会怎样？", 1.0),
    ],
)
def test_evidence_coverage_is_the_share_of_the_question_one_reference_holds(question, text, section, coverage):
    from agentic_rag.llm.extractive import simple_tokenize
    from chat.pipeline.stages import evidence_coverage

    found = evidence_coverage(question, [_reference(text, section)], tokenize=simple_tokenize)
    assert found == pytest.approx(coverage)


def test_evidence_coverage_reads_a_passage_under_its_chapters_and_its_documents_title():
    from dataclasses import replace

    from agentic_rag.llm.extractive import simple_tokenize
    from chat.pipeline.stages import evidence_coverage

    question = "In the billing design, which retry strategies are there?"
    passage = replace(_reference("Exponential backoff or a fixed delay.", "Strategies"), chapter_level_1="Retry")
    alone = evidence_coverage(question, [replace(passage, chapter_level_1="")], tokenize=simple_tokenize)
    under_chapter = evidence_coverage(question, [passage], tokenize=simple_tokenize)
    titled = evidence_coverage(question, [passage], tokenize=simple_tokenize, titles={1: "Billing design"})
    other_document = evidence_coverage(question, [passage], tokenize=simple_tokenize, titles={2: "Billing design"})

    assert alone < under_chapter < titled
    assert other_document == under_chapter


@pytest.mark.parametrize("question", ["子文档集合叫什么名字？", "子文档集合又称为什么？", "子文档集合叫什么？"])
def test_evidence_coverage_leaves_out_the_words_that_ask_what_a_thing_is_called(question):
    from chat.pipeline.stages import evidence_coverage
    from knowledge.analysis import analyze

    # The row that names the collection does not repeat "叫什么名字": those words ask, they are not its subject.
    reference = [_reference("集合名 | 粒度\n`plan_child` | 子文档(段落级切片)", "集合结构")]
    subject_only = evidence_coverage("子文档集合", reference, tokenize=analyze)

    assert evidence_coverage(question, reference, tokenize=analyze) == pytest.approx(subject_only)


@pytest.mark.django_db
def test_document_titles_are_the_references_documents_titles(kb):
    from chat.pipeline.stages import document_titles
    from knowledge.models import Document

    titled = Document.objects.create(kb=kb, name="a.txt", sha256="a" * 64, metadata={"title": "Billing design"})
    untitled = Document.objects.create(kb=kb, name="b.txt", sha256="b" * 64)
    references = [
        Candidate(chunk_id=1, doc_id=titled.pk, doc_name="a.txt", text="x"),
        Candidate(chunk_id=2, doc_id=untitled.pk, doc_name="b.txt", text="y"),
    ]

    assert document_titles(references) == {titled.pk: "Billing design", untitled.pk: ""}
    assert document_titles([]) == {}


@pytest.mark.django_db
def test_document_titles_the_search_loaded_cost_no_query(kb, django_assert_num_queries):
    from chat.pipeline.stages import document_titles
    from knowledge.models import Document

    stored = Document.objects.create(kb=kb, name="b.txt", sha256="b" * 64, metadata={"title": "Stored title"})
    loaded = Candidate(chunk_id=1, doc_id=stored.pk + 1, doc_name="a.txt", text="x", doc_title="Loaded title")
    with django_assert_num_queries(0):
        assert document_titles([loaded]) == {stored.pk + 1: "Loaded title"}
    unloaded = Candidate(chunk_id=2, doc_id=stored.pk, doc_name="b.txt", text="y")
    with django_assert_num_queries(1):
        assert document_titles([loaded, unloaded]) == {stored.pk + 1: "Loaded title", stored.pk: "Stored title"}


def test_evidence_coverage_counts_a_translated_question():
    from agentic_rag.llm.extractive import simple_tokenize
    from chat.pipeline.stages import evidence_coverage
    from knowledge.fusion import expand_query

    reference = [_reference("熔断阈值为 10%。")]
    plain = evidence_coverage("熔断 threshold", reference, tokenize=simple_tokenize)
    expanded = evidence_coverage("熔断 threshold", reference, tokenize=simple_tokenize, expand=expand_query)
    assert expanded > plain


def test_a_chinese_question_is_measured_on_an_english_passage_by_what_it_could_hold():
    from chat.pipeline.stages import evidence_coverage
    from knowledge.analysis import analyze
    from knowledge.fusion import expand_query

    question = "一个社区超过多少个成员时会再拆成下一级子社区？"
    english = [_reference("A community of more than 40 members is split once more into level-1 communities.")]
    chinese = [_reference("社区的成员很多。")]  # holds the same two terms, in Chinese
    held_in_english = evidence_coverage(question, english, tokenize=analyze, expand=expand_query)
    held_in_chinese = evidence_coverage(question, chinese, tokenize=analyze, expand=expand_query)

    assert held_in_english >= 0.35 > held_in_chinese  # the chat's default min_evidence_coverage
    # One shared glossary word is not enough to count the untranslated words half.
    one_word = [_reference("Members of a knowledge base read its documents.")]
    assert evidence_coverage(question, one_word, tokenize=analyze, expand=expand_query) < 0.35


@pytest.mark.parametrize(
    ("question", "text", "cosine", "held"),
    [
        ("How much traffic do the three shortcuts save?", "3 条短路 (A/B/C) 跳过不必要的阶段,节省 15-25% 流量。", 0.27, True),
        # Too far in meaning: the words decide.
        ("How much traffic do the three shortcuts save?", "3 条短路 (A/B/C) 跳过不必要的阶段,节省 15-25% 流量。", 0.20, False),
        # In the question's own language the words are there to count: the cosine does not stand in.
        ("告警消息发往哪个值班群？", "3 条短路 (A/B/C) 跳过不必要的阶段,节省 15-25% 流量。", 0.90, False),
    ],
)
def test_a_passage_in_another_language_passes_the_evidence_gate_on_the_encoders_cosine(question, text, cosine, held):
    from dataclasses import replace

    from chat.pipeline.stages import gate_part, held_across_languages
    from knowledge.analysis import analyze
    from knowledge.fusion import expand_query

    reference = replace(_reference(text), scores={"crosslingual": cosine})

    assert held_across_languages(question, [reference]) is held
    kept, _ = gate_part(question, [reference], minimum=0.99, limit=3, tokenize=analyze, expand=expand_query)
    assert bool(kept) is held


def test_a_parts_evidence_comes_in_the_parts_order_with_tools_where_they_stood():
    from chat.pipeline.stages import evidence_for_part
    from chat.pipeline.state import EvidenceItem

    evidence = (
        EvidenceItem(1, "KB", "a.md", "the first part's best passage"),
        EvidenceItem(2, "TOOL", "calculator", "2 + 2 = 4"),
        EvidenceItem(3, "KB", "b.md", "another passage of the first part"),
        EvidenceItem(4, "KB", "c.md", "the second part's best passage"),
        EvidenceItem(5, "KB", "d.md", "the second part's next passage"),
    )

    part = evidence_for_part(evidence, [4, 1, 5])

    # The reader weighs a passage by its place: the second part's best comes first.
    assert [item.n for item in part] == [4, 2, 1, 5]


def test_names_a_question_asks_about_are_looked_up_a_bounded_number_of_times():
    looked_up: list[str] = []

    def in_kb(name: str) -> bool:
        looked_up.append(name)
        return name != "Kafka"

    pasted = " ".join(f"getValue{n}()" for n in range(300))  # a question of pasted code
    assert unmentioned(f"Why does {pasted} fail?", in_kb) == ""
    assert len(looked_up) == MAX_NAMES_CHECKED
    looked_up.clear()
    assert unmentioned("为什么选择 Kafka 而不是 RabbitMQ？", in_kb) == "the knowledge base never mentions Kafka"
    assert looked_up == ["RabbitMQ", "Kafka"]
