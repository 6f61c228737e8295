"""The seeds dev set (its two fixture halves), the unanswerable and per-language scoring, the
Markdown report, and `manage.py seeds_eval` on a tiny corpus written to tmp_path."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from agentic_rag.llm.extractive import NO_EVIDENCE, NOT_ANSWERED
from chat.pipeline import ChatResult
from chat.pipeline.state import language_of
from evaluation.answers import AnswerCase, metric_counts, score_answer, summarise
from evaluation.datasets import DatasetError, import_dataset, read_golden
from evaluation.models import EvaluationRun, GoldenQuestion
from evaluation.report import Table, invoked_as, render_report
from evaluation.seeds import gold_span_dataset
from knowledge.models import Document, KnowledgeBase

FIXTURES = Path(settings.BASE_DIR) / "evaluation" / "fixtures"
HALVES = ("seeds-dev-tune", "seeds-dev-report")
LATER_TUNES = ("seeds-dev-tune-2", "seeds-dev-tune-3", "seeds-dev-tune-4", "seeds-dev-tune-5")  # written later, for kinds of question the first tune half lacks
# The stems of the five seed documents the set is written about (the files are not read here).
SEED_STEMS = {"000_b7072f0cb85062cc", "001_02ed504b2d4d2a6b", "002_a043e8a7a0c2f32e",
              "003_bafda717e700b0d7", "004_2f1a288a46289e98"}


def _half(name: str) -> list[dict]:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))["questions"]


def _stratum(item: dict) -> tuple[str, bool, bool]:
    return (item["lang"], len(item["relevant"]) >= 2, item["category"] == "unanswerable")


# --- the fixture halves ---------------------------------------------------------------------


def test_the_halves_are_golden_files_that_say_what_they_are():
    for name in HALVES:
        data = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
        assert data["name"] == name and "dev set" in data["description"].lower()
        if "report" in name:
            assert "never" in data["description"]
        assert len(read_golden(FIXTURES / f"{name}.json").questions) == len(data["questions"])


def test_the_set_has_its_sizes_languages_two_document_and_unanswerable_questions():
    questions = _half(HALVES[0]) + _half(HALVES[1])
    assert len(questions) >= 84
    languages = Counter(q["lang"] for q in questions)
    assert languages["en"] == languages["zh"] == len(questions) // 2
    assert sum(len(q["relevant"]) >= 2 for q in questions) >= 16
    assert sum(q["category"] == "unanswerable" for q in questions) >= 12
    for q in questions:
        assert language_of(q["question"]) == q["lang"], q["id"]


def test_no_question_is_in_both_halves_and_each_stratum_is_split_evenly():
    tune, report = _half(HALVES[0]), _half(HALVES[1])
    assert not {q["id"] for q in tune} & {q["id"] for q in report}
    assert not {q["question"] for q in tune} & {q["question"] for q in report}
    tune_strata, report_strata = Counter(map(_stratum, tune)), Counter(map(_stratum, report))
    assert set(tune_strata) == set(report_strata)
    for stratum in tune_strata:
        assert abs(tune_strata[stratum] - report_strata[stratum]) <= 1, stratum


@pytest.mark.parametrize("name", LATER_TUNES)
def test_a_later_tuning_set_is_apart_from_every_other_set_and_balanced_in_language(name):
    later = _half(name)
    data = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    assert data["name"] == name and "TUNE set" in data["description"]
    others = [q for other in (*HALVES, *LATER_TUNES) if other != name for q in _half(other)]
    assert not {q["id"] for q in later} & {q["id"] for q in others}
    assert not {q["question"] for q in later} & {q["question"] for q in others}
    languages = Counter(q["lang"] for q in later)
    assert languages["en"] == languages["zh"]
    assert sum(q["category"] == "unanswerable" for q in later) >= 4
    for q in later:
        assert language_of(q["question"]) == q["lang"], q["id"]


def test_relevant_documents_are_seed_stems_and_unanswerable_questions_name_none():
    for q in _half(HALVES[0]) + _half(HALVES[1]) + [q for name in LATER_TUNES for q in _half(name)]:
        assert set(q["relevant"]) <= SEED_STEMS, q["id"]
        if q["category"] == "unanswerable":
            assert q["relevant"] == {} and q["expected_keywords"] == [], q["id"]
        else:
            assert q["relevant"] and q["expected_keywords"], q["id"]
        if len(q["relevant"]) >= 2:
            assert set(q["relevant"].values()) == {2}, q["id"]  # each document holds a part


# --- scoring --------------------------------------------------------------------------------


def _result(answer: str, *, shortcut=None, cited: bool = False) -> ChatResult:
    citations = ({"n": 1, "chunk_id": 7, "doc_id": 1, "quote": answer},) if cited else ()
    evidence = ({"n": 1, "chunk_id": 7, "doc_id": 1},) if cited else ()
    return ChatResult(trace_id="t", answer=answer, shortcut=shortcut, citations=citations, evidence=evidence)


def _unanswerable(question: str = "What p99 latency does the pipeline target?") -> AnswerCase:
    return AnswerCase("u", question, (), frozenset(), category="unanswerable")


@pytest.mark.parametrize(("result", "said"), [
    (_result("I found nothing in the knowledge base that answers this.", shortcut="C"), True),
    (_result(f"(Extractive answer.)\n\n{NOT_ANSWERED['en']} The closest are in: a.md."), True),
    (_result(f"（抽取式回答）\n\n{NO_EVIDENCE['zh']}"), True),
    (_result("The pipeline targets under 2 s for retrieval. [1]", cited=True), False),
    (_result("Not found in the knowledge base “seeds”: none of its passages answers this question directly."), True),
    (_result("知识库「seeds」中没有找到直接回答这个问题的内容。"), True),
    (_result("**1. How many GPUs?**\n\nNothing in the knowledge base answers this part: How many GPUs?"), True),
    # An answer that quotes nothing and does not say so is not a refusal.
    (_result("The cluster has eight GPUs."), False),
    # Quoting a passage is answering, whatever else the answer says.
    (_result(f"{NOT_ANSWERED['en']} Stage 6 takes <2s. [1]", cited=True), False),
])  # fmt: skip
def test_an_unanswerable_question_passes_when_the_answer_says_nothing_was_found(result, said):
    outcome = score_answer(_unanswerable(), result, 5.0, lambda chunk_id: "")

    assert outcome.said_not_found is said
    assert outcome.keyword_pass is None and outcome.source_pass is None and outcome.source_recall is None
    assert outcome.passed is said


def test_answerable_questions_have_no_said_so_and_unanswerable_count_in_no_keyword_or_source_rate():
    answered = AnswerCase("a", "How many stages?", ("8",), frozenset({1}), needed_docs=frozenset({1}))
    outcomes = [
        score_answer(answered, _result("There are 8 stages. [1]", cited=True), 1.0, lambda chunk_id: "x"),
        score_answer(_unanswerable(), _result("Stage 6 takes <2s. [1]", cited=True), 1.0, lambda chunk_id: "x"),
    ]
    assert outcomes[0].said_not_found is None

    metrics = summarise(outcomes)

    assert metrics["keyword_pass"] == 1.0 and metrics["source_pass"] == 1.0
    assert metrics["unanswerable_said_so"] == 0.0
    assert metric_counts(outcomes)["keyword_pass"] == 1 and metric_counts(outcomes)["unanswerable_said_so"] == 1


def test_keyword_pass_is_broken_down_by_language_and_over_two_document_questions():
    def outcome(qid, question, needed, answer):
        case = AnswerCase(qid, question, ("60",), frozenset(needed), needed_docs=frozenset(needed))
        return score_answer(case, _result(answer), 1.0, lambda chunk_id: "")

    outcomes = [
        outcome("e1", "What is the RRF constant?", {1}, "k = 60"),
        outcome("e2", "What is the RRF constant and the top k?", {1, 2}, "no figure"),
        outcome("z1", "RRF 常数是多少？", {1}, "k=60"),
        outcome("z2", "RRF 常数和 top k 分别是多少？", {1, 2}, "k=60"),
        outcome("z3", "融合用什么常数？", {2}, "不知道"),
    ]

    metrics, counts = summarise(outcomes), metric_counts(outcomes)

    assert (metrics["keyword_pass_en"], counts["keyword_pass_en"]) == (0.5, 2)
    assert (metrics["keyword_pass_zh"], counts["keyword_pass_zh"]) == (pytest.approx(2 / 3, abs=1e-4), 3)
    assert (metrics["keyword_pass_two_doc"], counts["keyword_pass_two_doc"]) == (0.5, 2)
    assert metrics["unanswerable_said_so"] is None


# --- reading and importing ------------------------------------------------------------------


def test_an_unanswerable_question_may_name_no_document_but_others_may_not(tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"name": "s", "questions": [
        {"id": "u1", "category": "unanswerable", "question": "How many GPUs?", "relevant": {}},
    ]}), encoding="utf-8")
    assert read_golden(path).questions[0].category == "unanswerable"

    path.write_text(json.dumps({"name": "s", "questions": [
        {"id": "q1", "category": "number", "question": "How many GPUs?", "relevant": {}},
    ]}), encoding="utf-8")
    with pytest.raises(DatasetError, match="relevant"):
        read_golden(path)


@pytest.mark.django_db
def test_a_golden_set_names_documents_by_stem_and_keeps_unanswerable_questions(kb, tmp_path):
    from knowledge.batch import FileToIngest, ingest_file

    for name, text in (("design.md", "# Design\n\nThe breaker opens at 10%."), ("notes.txt", "Notes: k = 60.")):
        file = tmp_path / name
        file.write_text(text, encoding="utf-8")
        ingest_file(kb, FileToIngest(str(file), name, file), on_progress=lambda progress: None)
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"name": "stems", "questions": [
        {"id": "q1", "question": "When does the breaker open?", "relevant": {"design": 2}, "expected_keywords": ["10%"]},
        {"id": "q2", "question": "What is k?", "relevant": {"notes.txt": 2}, "expected_keywords": ["60"]},
        {"id": "q3", "question": "What is the RRF constant?", "relevant": {"notes": 2, "design": 2}},
        {"id": "u1", "category": "unanswerable", "question": "How many GPUs?", "relevant": {}},
        {"id": "x1", "question": "Not in this KB", "relevant": {"elsewhere": 2}},
    ]}), encoding="utf-8")

    report = import_dataset(kb, read_golden(path))

    assert (report.questions, report.skipped_questions) == (4, 1)
    docs = dict(Document.objects.filter(kb=kb).values_list("pk", "name"))
    stored = {q.qid: sorted(docs[r.document_id] for r in q.qrels.all()) for q in GoldenQuestion.objects.all()}
    assert stored == {"q1": ["design.md"], "q2": ["notes.txt"], "q3": ["design.md", "notes.txt"], "u1": []}


# --- the report -----------------------------------------------------------------------------


def test_a_report_carries_the_date_commit_command_and_tables():
    from datetime import UTC, datetime

    text = render_report(
        "Seeds dev set", [Table("Answers", ("KB", "keyword pass"), (("seeds-md", "0.5000 (2)"),))],
        command="manage.py seeds_eval --seeds s", commit="abc123", when=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )

    assert text.startswith("# Seeds dev set")
    assert "2026-01-02 03:04:05 UTC" in text and "`abc123`" in text and "`manage.py seeds_eval --seeds s`" in text
    assert "| KB | keyword pass |\n| --- | --- |\n| seeds-md | 0.5000 (2) |" in text


# --- the command ----------------------------------------------------------------------------

SEEDS = {
    "breaker.txt": "# 熔断器\n\n## 状态\n\n熔断器在失败率超过 10% 时打开，5 分钟后进入半开状态。\n",
    "fusion.txt": "# 融合\n\n## RRF\n\n混合检索用 RRF 融合两路结果，常数 k=60。\n\n## 去重\n\n候选文本短于 20 个字符时丢弃。\n",
}
GOLDEN = {"name": "tiny-seeds", "questions": [
    {"id": "e1", "lang": "en", "category": "number", "question": "What constant does RRF use?",
     "relevant": {"fusion": 2}, "expected_keywords": ["60"]},
    {"id": "z1", "lang": "zh", "category": "threshold", "question": "熔断器在失败率超过多少时打开？",
     "relevant": {"breaker": 2}, "expected_keywords": ["10%"]},
    {"id": "z2", "lang": "zh", "category": "two-doc", "question": "熔断器多久后半开？RRF 的常数是多少？",
     "relevant": {"breaker": 2, "fusion": 2}, "expected_keywords": ["5 分钟", "60"]},
    {"id": "u1", "lang": "en", "category": "unanswerable", "question": "How many GPUs does the cluster have?",
     "relevant": {}, "expected_keywords": []},
]}  # fmt: skip


@pytest.fixture
def seeds_dir(tmp_path) -> Path:
    folder = tmp_path / "seeds"
    folder.mkdir()
    for name, text in SEEDS.items():
        (folder / name).write_text(text, encoding="utf-8")
    (tmp_path / "tiny.json").write_text(json.dumps(GOLDEN, ensure_ascii=False), encoding="utf-8")
    return folder


def _seeds_eval(*args) -> str:
    out = io.StringIO()
    call_command("seeds_eval", *args, stdout=out, stderr=out)
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_seeds_eval_ingests_both_forms_scores_the_set_and_writes_a_report(alice, seeds_dir, tmp_path):
    report = tmp_path / "out" / "seeds.md"

    out = _seeds_eval("--seeds", str(seeds_dir), "--set", str(tmp_path / "tiny.json"), "--user", "alice",
                      "--report", str(report))

    for form in ("md", "txt"):
        kb = KnowledgeBase.objects.get(slug=f"seeds-{form}")
        assert sorted(kb.documents.values_list("name", flat=True)) == [f"breaker.{form}", f"fusion.{form}"]
        assert kb.golden_sets.get().questions.count() == 4
        assert f"seeds-{form}: 2 of 2 files ingested, embedder hashing-1024" in out
    assert EvaluationRun.objects.filter(mode="answers").count() == 2
    for metric in ("keyword_pass_en", "keyword_pass_zh", "keyword_pass_two_doc", "unanswerable_said_so"):
        assert re.search(rf"{metric}\s+\d\.\d{{4}}\s+\(n=\d\)", out), metric
    assert "keyword_pass_two_doc" in out and "(n=1)" in out
    text = report.read_text(encoding="utf-8")
    assert "commit: `" in text and "seeds_eval" in text
    assert re.search(r"\| seeds-md \| tiny-seeds \| 4 \| \d\.\d{4} \(3\) \|", text)
    assert re.search(r"\| seeds-txt \| tiny-seeds \| 4 \|", text)


@pytest.mark.django_db(transaction=True)
def test_seeds_eval_replaces_a_kb_of_the_same_name(alice, seeds_dir, tmp_path):
    args = ("--seeds", str(seeds_dir), "--set", str(tmp_path / "tiny.json"), "--user", "alice", "--as", "txt")
    _seeds_eval(*args)
    first = KnowledgeBase.objects.get(slug="seeds-txt").pk

    _seeds_eval(*args)

    kb = KnowledgeBase.objects.get(slug="seeds-txt")
    assert kb.pk != first and kb.documents.count() == 2
    assert not KnowledgeBase.objects.filter(slug="seeds-md").exists()


@pytest.mark.django_db(transaction=True)
def test_seeds_eval_hides_the_failures_of_the_report_half(alice, seeds_dir, tmp_path):
    report_half = dict(GOLDEN, name="tiny-report")
    (tmp_path / "tiny-report.json").write_text(json.dumps(report_half, ensure_ascii=False), encoding="utf-8")

    out = _seeds_eval("--seeds", str(seeds_dir), "--set", str(tmp_path / "tiny-report.json"), "--user", "alice",
                      "--as", "md")

    assert "FAIL" not in out and "not listed: report half" in out


def test_gold_span_questions_take_every_gold_answer_as_alternatives(tmp_path):
    squad = {"data": [{"title": "T", "paragraphs": [
        {"context": "长城东起山海关，西至嘉峪关。", "qas": [
            {"id": "q1", "question": "长城东起哪里？", "answers": [{"text": "山海关"}, {"text": "东起山海关"}, {"text": "山海关"}]},
            {"id": "q2", "question": "长城西至哪里？", "answers": [{"text": "嘉峪关"}]},
        ]},
        {"context": "长城在1987年列入世界遗产。", "qas": [
            {"id": "q3", "question": "哪一年列入？", "answers": [{"text": "1987年"}]},
        ]},
    ]}]}  # fmt: skip
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")

    dataset = gold_span_dataset(path, limit=2)
    past_them = gold_span_dataset(path, limit=2, offset=2)

    assert [q.expected_keywords for q in dataset.questions] == [(["山海关", "东起山海关"],), (["嘉峪关"],)]
    assert len(dataset.passages) == 2
    # A tuning slice asks the questions after the reported ones, over the same paragraphs.
    assert [q.id for q in past_them.questions] == ["q3"] and len(past_them.passages) == 2
    assert past_them.name != dataset.name


@pytest.mark.django_db(transaction=True)
def test_seeds_eval_cmrc_reports_the_share_of_answers_holding_a_gold_span(alice, tmp_path):
    squad = {"data": [{"title": "长城", "paragraphs": [
        {"context": "长城是中国古代的军事防御工程，东起山海关，西至嘉峪关。", "qas": [
            {"id": "q1", "question": "长城东起哪里？", "answers": [{"text": "山海关"}]},
        ]},
        {"context": "黄河是中国第二长河，全长约五千四百六十四公里。", "qas": [
            {"id": "q2", "question": "黄河全长多少公里？", "answers": [{"text": "五千四百六十四公里"}, {"text": "约五千四百六十四公里"}]},
            {"id": "q3", "question": "黄河是第几长河？", "answers": [{"text": "第二"}]},
        ]},
    ]}]}  # fmt: skip
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")

    out = _seeds_eval("--cmrc", str(path), "--limit", "2", "--user", "alice")

    assert re.search(r"answer holds a gold span: \d\.\d{4} \(2 questions\)", out)
    kb = KnowledgeBase.objects.get(slug="cmrc-gold-span")
    assert kb.documents.count() == 2 and GoldenQuestion.objects.filter(golden_set__kb=kb).count() == 2


@pytest.mark.django_db(transaction=True)
def test_evaluate_answers_writes_its_report_and_prints_the_breakdowns(alice, seeds_dir, tmp_path):
    _seeds_eval("--seeds", str(seeds_dir), "--set", str(tmp_path / "tiny.json"), "--user", "alice", "--as", "md")
    report = tmp_path / "evaluate.md"
    out = io.StringIO()

    call_command("evaluate", "--kb", "seeds-md", "--answers", "--user", "alice", "--report", str(report), stdout=out)

    assert re.search(r"keyword_pass_two_doc\s+\d\.\d{4}\s+\(n=1\)", out.getvalue())
    assert re.search(r"unanswerable_said_so\s+\d\.\d{4}\s+\(n=1\)", out.getvalue())
    text = report.read_text(encoding="utf-8")
    assert text.startswith("# Answers on seeds-md") and "- commit: `" in text
    assert re.search(r"\| keyword_pass_en \| \d\.\d{4} \| 1 \|", text)
    assert re.search(r"\| keyword_pass_zh \| \d\.\d{4} \| 2 \|", text)


def test_a_report_names_the_command_as_typed_or_as_it_would_be_typed():
    flags = {"seeds": "--seeds", "form": "--as", "sets": "--set", "report": "--report", "verbosity": "-v"}
    options = {"seeds": Path("seeds"), "form": "txt", "sets": [Path("a.json"), Path("b.json")], "report": "",
               "cmrc": None, "verbosity": 1}
    typed = ["/x/manage.py", "seeds_eval", "--seeds", "seeds", "--as", "txt"]
    assert invoked_as("seeds_eval", options, flags, argv=typed) == "manage.py seeds_eval --seeds seeds --as txt"
    # Called from code (pytest, a script), sys.argv is not the command's: it is rebuilt from its options.
    assert invoked_as("seeds_eval", options, flags, argv=["pytest", "-q"]) == (
        "manage.py seeds_eval --seeds seeds --as txt --set a.json --set b.json"
    )
