"""The Clarifier: which questions it asks about (and which it leaves alone), and its run through the chat."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from chat.clarifier import (
    Asked,
    DocRef,
    KbRef,
    clarify,
    dangling_pronoun,
    scope_mentions,
    tied_kbs,
)
from chat.clarifier_lookups import ReadableLibrary
from chat.models import Message, Trace
from chat.pipeline import ChatOptions, ChatRequest, run_chat
from knowledge.models import KnowledgeBase

from .conftest import ingest_docs

DOCS_KB = KbRef("docs", "Project docs")
OTHER_KB = KbRef("ops", "Operations")
FIXTURES = Path(__file__).resolve().parents[2] / "evaluation" / "fixtures"
REPO_DOCS = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "docs").glob("*.md"))


@dataclass
class FakeLibrary:
    docs: list[DocRef] = field(default_factory=list)
    with_content: list[KbRef] = field(default_factory=lambda: [DOCS_KB, OTHER_KB])
    chapter_numbers: set[str] = field(default_factory=set)
    chapter_titles: list[str] = field(default_factory=lambda: ["Architecture", "Ingestion", "Retrieval", "Chat"])
    sections: dict[str, list[str]] = field(default_factory=dict)  # term -> section titles

    def documents(self) -> list[DocRef]:
        return self.docs

    def kbs_with_content(self) -> list[KbRef]:
        return self.with_content

    def has_chapter(self, kb: str, number: str) -> bool:
        return number in self.chapter_numbers

    def chapters(self, kb: str) -> list[str]:
        return self.chapter_titles

    def subjects(self, kb: str, terms: Sequence[str]) -> list[str]:
        return next((self.sections[t] for t in terms if t in self.sections), [])


def asked(message: str, *, history: bool = False, kb: KbRef | None = DOCS_KB, chosen: bool = True,
          ranked: tuple[tuple[str, float], ...] = ()) -> Asked:
    return Asked(message, history, kb, chosen, ranked)


def run(question: Asked, library: FakeLibrary | None = None):
    return clarify(question, library or FakeLibrary(), min_score=0.15, max_gap=0.02)


# --- a pronoun with nothing before it -------------------------------------------------------------


@pytest.mark.parametrize("message, word", [
    ("它的默认值是多少？", "它"), ("那它的阈值呢？", "它"), ("这个怎么配置？", "这个"), ("他们用什么数据库？", "他们"),
    ("为什么它会失败？", "它"), ("这是什么？", "这"),
    ("It fails on upload, why?", "It"), ("They said the index is stale. Is it?", "They"),
    ("What does it do?", "it"), ("How does that work?", "that"), ("This is slow, can it be faster?", "This"),
])
def test_it_finds_a_pronoun_that_opens_a_first_question(message, word):
    assert dangling_pronoun(message, has_history=False) == word
    assert dangling_pronoun(message, has_history=True) == ""  # an earlier turn can be what it means


@pytest.mark.parametrize("message", [
    "这个系统支持哪些文件格式？", "其他格式呢？", "那怎么配置 Redis？", "那么索引多久备份一次？", "其中哪一个更快？", "How does hybrid search work?",
    "This project uses which database?", "That setting lives where?", "Which documents should I read first?",
    "Where do the tags come from, and when does the tag path ignore one of those tag keywords?",
])
def test_a_demonstrative_before_a_noun_or_a_long_question_is_no_dangling_pronoun(message):
    assert dangling_pronoun(message, has_history=False) == ""


def test_a_pronoun_is_asked_about_with_the_sections_that_hold_the_rest_of_the_question():
    library = FakeLibrary(sections={"默认值": ["Weights", "Reranking", "Chunk sizes", "Gate"]})
    found = run(asked("它的默认值是多少？"), library)
    assert found.kind == "pronoun" and "“它”" in found.question
    assert [c.label for c in found.choices] == ["Weights", "Reranking", "Chunk sizes"]  # at most three
    assert found.choices[0].message == "Weights 的默认值是多少？" and found.choices[0].kb == "docs"


def test_an_english_pronoun_is_spelled_out_in_the_choices():
    found = run(asked("What does it do?"), FakeLibrary(chapter_titles=["Hybrid search"]))
    assert found.kind == "pronoun" and found.question.startswith("What does “it” refer to?")
    assert found.choices[0].message == "What does Hybrid search do?"


def test_a_follow_up_pronoun_is_not_asked_about():
    assert run(asked("它的默认值是多少？", history=True)) is None


def test_a_first_question_with_no_word_to_search_for_offers_the_kbs_topics():
    found = run(asked("是什么？"))
    assert found.kind == "vague" and [c.message for c in found.choices] == [
        "Architecture 是什么？", "Ingestion 是什么？", "Retrieval 是什么？"]
    assert run(asked("是什么？", history=True)) is None


# --- an empty scope --------------------------------------------------------------------------------


def test_a_document_in_another_kb_offers_that_kb():
    library = FakeLibrary(docs=[DocRef(DOCS_KB, "03-retrieval.md"), DocRef(OTHER_KB, "runbook.md")])
    found = run(asked("在 runbook.md 里怎么重启服务？"), library)
    assert found.kind == "scope" and "runbook.md" in found.question
    assert [(c.label, c.kb, c.message) for c in found.choices] == [("Operations", "ops", "在 runbook.md 里怎么重启服务？")]
    assert run(asked("在 runbook.md 里怎么重启服务？", kb=OTHER_KB), library) is None  # it is where it is asked


def test_a_document_nobody_holds_offers_the_nearest_names():
    library = FakeLibrary(docs=[DocRef(DOCS_KB, name) for name in REPO_DOCS])
    found = run(asked("What does 03-retreival.md say about fusion?"), library)
    assert found.kind == "scope"
    assert found.choices[0].label == "03-retrieval.md"
    assert found.choices[0].message == "What does 03-retrieval.md say about fusion?"


def test_a_file_of_a_kind_no_kb_holds_is_one_the_documents_describe_not_a_missing_document():
    library = FakeLibrary(docs=[DocRef(DOCS_KB, name) for name in REPO_DOCS])
    for question in ("Which host port does the postgres service in docker-compose.yaml publish?",
                     "config.json 里的 timeout 是多少？", "What does deploy.yml run first?"):
        assert run(asked(question), library) is None, question
    assert run(asked("What does deploy-guide.pdf say about ports?"), library).kind == "scope"


def test_a_chapter_the_kb_lacks_offers_its_chapters():
    found = run(asked("第12章讲了什么？"), FakeLibrary(chapter_numbers={"1", "2"}))
    assert found.kind == "scope" and "第12章" in found.question
    assert [c.message for c in found.choices][:2] == ["「Architecture」一节讲了什么？", "「Ingestion」一节讲了什么？"]
    assert run(asked("第2章讲了什么？"), FakeLibrary(chapter_numbers={"1", "2"})) is None


def test_a_chosen_kb_that_holds_nothing_offers_the_kbs_that_hold_something():
    empty = KbRef("empty", "Empty")
    found = run(asked("How are chunks sized?", kb=empty))
    assert found.kind == "scope" and "Empty" in found.question
    assert [c.kb for c in found.choices] == ["docs", "ops"]


def test_a_book_title_is_a_subject_not_a_scope():
    assert scope_mentions("《红楼梦》的作者是谁？") == []
    assert [m.name for m in scope_mentions("《部署指南》里怎么配置 Redis？")] == ["部署指南"]
    assert [m.name for m in scope_mentions("What does chapter 2.1 say?")] == ["2.1"]
    assert [m.name for m in scope_mentions("第二十一章")] == ["21"]


# --- two KBs equally likely ------------------------------------------------------------------------


def test_two_kbs_scored_alike_are_offered_when_the_router_chose():
    question = asked("How do we restart the service?", kb=DOCS_KB, chosen=False,
                     ranked=(("docs", 0.41), ("ops", 0.40), ("misc", 0.2)))
    found = run(question)
    assert found.kind == "kb" and [(c.kb, c.label) for c in found.choices] == [("docs", "Project docs"), ("ops", "Operations")]
    assert run(asked("How do we restart the service?", ranked=question.ranked)) is None  # the user chose a KB


@pytest.mark.parametrize("ranked, tied", [
    ((("a", 0.5), ("b", 0.49), ("c", 0.485)), ["a", "b", "c"]),
    ((("a", 0.5), ("b", 0.45)), []),
    ((("a", 0.1), ("b", 0.1)), []),  # nothing the router would route to
    ((("a", 0.5),), []),
])
def test_tied_kbs_are_those_within_the_gap_above_the_floor(ranked, tied):
    assert tied_kbs(ranked, min_score=0.15, max_gap=0.02) == tied


# --- no false alarms -------------------------------------------------------------------------------


def fixture_questions() -> list[str]:
    return [q["question"] for path in sorted(FIXTURES.glob("*.json")) for q in json.loads(path.read_text())["questions"]]


def test_no_question_of_the_evaluation_sets_is_taken_for_ambiguous():
    questions = fixture_questions()
    assert len(questions) > 100
    library = FakeLibrary(docs=[DocRef(DOCS_KB, name) for name in REPO_DOCS],
                          sections={"默认": ["Weights"], "search": ["Hybrid"]})
    asked_about = [q for q in questions if run(asked(q), library) is not None]
    assert asked_about == []


# --- the look-ups, against the database ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_library_sees_only_what_the_user_may_read(docs_kb, alice, bob):
    secret = KnowledgeBase.objects.create(slug="bob-kb", name="Bob's KB", owner=bob)
    ingest_docs(secret, {"secret.md": "# 1 Secret\n\nThe launch code is 1234."})
    library = ReadableLibrary(alice)
    assert {d.name for d in library.documents()} == {"hybrid.md", "breaker.md", "施工.md"}
    assert [kb.slug for kb in library.kbs_with_content()] == ["alice-kb"]
    assert library.has_chapter("alice-kb", "1") and not library.has_chapter("alice-kb", "7")
    assert "Hybrid search" in library.chapters("alice-kb")
    assert library.subjects("alice-kb", ["weighted"]) == ["Weights"]
    assert library.subjects("bob-kb", ["launch"]) == []  # another user's KB is not looked into
    found = clarify(Asked("在 secret.md 里写了什么？", False, KbRef("alice-kb", "Alice's KB"), True), library,
                    min_score=0.15, max_gap=0.02)
    assert all(choice.kb != "bob-kb" for choice in found.choices) and "Bob" not in found.question


# --- through the chat ------------------------------------------------------------------------------


def plan_execute(alice, message: str, **options) -> ChatRequest:
    return ChatRequest(alice, None, message, ChatOptions(kb_slug="alice-kb", agent_type="plan_execute_agent", **options))


@pytest.mark.django_db(transaction=True)
def test_plan_execute_asks_instead_of_guessing_and_the_trace_keeps_it(docs_kb, alice, extractive, events):
    result = run_chat(plan_execute(alice, "它的权重是多少？"), emit=events, llm=extractive)
    clarify_event = events.one("clarify")
    assert clarify_event.stage == "guide" and clarify_event.data["kind"] == "pronoun"
    assert clarify_event.data["agent_type"] == "plan_execute_agent"
    choices = clarify_event.data["choices"]
    assert 1 <= len(choices) <= 3 and choices[0] == {"label": "Weights", "message": "Weights 的权重是多少？", "kb": "alice-kb"}
    assert events.stage_end("guide")["shortcut"] == "A"
    assert not events.of("retrieval") and not events.of("plan")  # nothing was searched on a guess
    assert result.shortcut == "A" and result.clarification["choices"] == choices
    assert result.answer == clarify_event.data["question"]
    answer = Message.objects.get(role="assistant")
    assert answer.debug["clarification"]["kind"] == "pronoun"
    assert Trace.objects.get().shortcut == "A"


@pytest.mark.django_db(transaction=True)
def test_a_reply_to_the_clarifier_is_answered_not_asked_again(docs_kb, alice, extractive, events):
    result = run_chat(plan_execute(alice, "它的权重是多少？", clarified=True), emit=events, llm=extractive)
    assert not events.of("clarify") and result.clarification is None
    assert events.of("plan") and result.shortcut != "A"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("agent_type", ["hybrid_agent", "auto"])
def test_other_agents_do_not_ask(docs_kb, alice, extractive, events, agent_type):
    options = ChatOptions(kb_slug="alice-kb", agent_type=agent_type)
    run_chat(ChatRequest(alice, None, "它的权重是多少？", options), emit=events, llm=extractive)
    assert not events.of("clarify")


@pytest.mark.django_db(transaction=True)
def test_a_clear_question_goes_through_the_plan(docs_kb, alice, extractive, events):
    result = run_chat(plan_execute(alice, "How does hybrid search fuse the rankings?"), emit=events, llm=extractive)
    assert not events.of("clarify") and events.of("plan") and "reciprocal rank fusion" in result.answer


@pytest.mark.django_db(transaction=True)
def test_plan_execute_asks_which_kb_when_two_fit_alike(docs_kb, alice, extractive, events):
    twin = KnowledgeBase.objects.create(slug="alice-twin", name="Alice's twin", owner=alice)
    ingest_docs(twin)  # the same documents: the router scores both alike
    options = ChatOptions(kb_slug=None, agent_type="plan_execute_agent")
    result = run_chat(ChatRequest(alice, None, "How does hybrid search fuse the rankings?", options), emit=events,
                      llm=extractive)
    clarification = events.one("clarify").data
    assert clarification["kind"] == "kb" and result.shortcut == "A"
    assert sorted(c["kb"] for c in clarification["choices"]) == ["alice-kb", "alice-twin"]
    assert {c["message"] for c in clarification["choices"]} == {"How does hybrid search fuse the rankings?"}


@pytest.mark.django_db(transaction=True)
def test_plan_execute_asks_about_a_document_the_kb_does_not_hold(docs_kb, alice, extractive, events):
    run_chat(plan_execute(alice, "What does hybird.md say about the weights?"), emit=events, llm=extractive)
    clarification = events.one("clarify").data
    assert clarification["kind"] == "scope"
    assert clarification["choices"][0] == {
        "label": "hybrid.md", "message": "What does hybrid.md say about the weights?", "kb": "alice-kb"}
