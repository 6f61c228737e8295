"""manage.py evaluate --answers: golden questions through the chat pipeline, answers scored."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import TestCase

from chat.models import Conversation, Trace
from evaluation.models import EvaluationRun, GoldenQuestion
from knowledge.ingest import submit_document
from knowledge.tasks import enqueue_ingestion

pytestmark = pytest.mark.django_db(transaction=True)

DOCS = {
    "breaker.md": "# 1 Circuit breaker\n\nThe circuit breaker opens when more than 10% of calls fail within "
    "the window. It stays open for five minutes, then lets one probe through.",
    "fusion.md": "# 1 Fusion\n\nfactor | weight\ncosine | 35%\ntitle | 20%\n\nRRF uses the constant k = 60.",
}
GOLDEN = {
    "name": "answers",
    "questions": [
        {"id": "a1", "question": "When does the circuit breaker open?", "relevant": {"breaker.md": 2},
         "expected_keywords": ["10%"], "expected_shortcut": None},
        {"id": "a2", "question": "What weight does the cosine factor get?", "relevant": {"fusion.md": 2},
         "expected_keywords": ["35%"]},
        {"id": "a3", "question": "What is the boiling point of ethanol?", "relevant": {},
         "expected_keywords": [], "expected_shortcut": "C"},
        # The documents do not say this: a failure the report must show with its trace.
        {"id": "a4", "question": "How long does the circuit breaker stay open?", "relevant": {"fusion.md": 2},
         "expected_keywords": ["ten minutes"]},
    ],
}  # fmt: skip


@pytest.fixture
def answers_kb(kb, tmp_path):
    for name, text in DOCS.items():
        with TestCase.captureOnCommitCallbacks(execute=True):
            submit_document(kb, name, text.encode(), enqueue=enqueue_ingestion)
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(GOLDEN), encoding="utf-8")
    call_command("import_dataset", "--format", "golden", str(path), "--kb", kb.slug, stdout=io.StringIO())
    return kb


def _evaluate(*args) -> tuple[str, int]:
    out = io.StringIO()
    try:
        call_command("evaluate", *args, stdout=out, stderr=out)
    except SystemExit as exit_:
        return out.getvalue(), exit_.code
    return out.getvalue(), 0


def test_it_imports_a_not_found_question_with_its_expected_shortcut(answers_kb):
    stored = dict(GoldenQuestion.objects.values_list("qid", "expected_shortcut"))
    assert stored == {"a1": "none", "a2": "", "a3": "C", "a4": ""}


def test_it_scores_answers_and_writes_the_json_contract(answers_kb, tmp_path):
    path = tmp_path / "answers.json"

    out, code = _evaluate("--kb", answers_kb.slug, "--answers", "--json", str(path))

    assert code == 0, out
    report = json.loads(path.read_text())
    assert set(report["metrics"]) == {
        "keyword_pass", "keywords_in_evidence", "source_pass", "source_recall", "citation_valid", "route_accuracy",
        "unanswerable_said_so", "keyword_pass_en", "keyword_pass_zh", "keyword_pass_two_doc",
    }
    assert set(report["latency_ms"]) == {"p50", "p95"}
    # a1, a2 hold their keyword, a4 does not; a3 expects none.
    assert report["metrics"]["keyword_pass"] == pytest.approx(2 / 3, abs=1e-4)
    # a1 and a3 state a shortcut: none and C, both taken.
    assert report["metrics"]["route_accuracy"] == 1.0
    assert report["metrics"]["citation_valid"] == 1.0
    (failure,) = report["failures"]
    assert failure["question"] == "How long does the circuit breaker stay open?"
    assert "missing keywords ['ten minutes']" in failure["why"]
    assert Trace.objects.filter(trace_id=failure["trace_id"]).exists()
    assert failure["trace_url"] == f"/traces/{failure['trace_id']}/"


def test_it_stores_the_run_with_its_configuration_and_leaves_no_conversations(answers_kb):
    _evaluate("--kb", answers_kb.slug, "--answers")

    run = EvaluationRun.objects.get()
    assert run.mode == "answers" and run.questions == 4
    assert run.params["generator"] == "extractive" and run.params["retrieval"]["mode"]
    assert run.per_question["a3"]["shortcut"] == "C"
    assert not Conversation.objects.exists()


def test_it_exits_1_under_a_threshold_and_rejects_retrieval_metrics(answers_kb):
    out, code = _evaluate("--kb", answers_kb.slug, "--answers", "--fail-under", "keyword_pass=0.9")
    assert code == 1 and "below threshold: keyword_pass" in out

    with pytest.raises(Exception, match="unknown metric 'ndcg@10'"):
        call_command("evaluate", "--kb", answers_kb.slug, "--answers", "--fail-under", "ndcg@10=0.5")


def test_a_keyword_may_list_alternatives():
    from chat.pipeline import ChatResult
    from evaluation.answers import AnswerCase, score_answer

    case = AnswerCase("q", "Can an encrypted PDF be imported?", (["加密", "encrypted"], "PDF"), frozenset())
    result = ChatResult(trace_id="t", session_id="s", conversation_id=1, answer="Encrypted PDFs fail.", status="done")

    assert score_answer(case, result, 1.0, lambda chunk_id: "").keyword_pass is True
    other = AnswerCase("q", "?", (["加密", "locked"],), frozenset())
    assert score_answer(other, result, 1.0, lambda chunk_id: "").keyword_pass is False


def test_keywords_in_evidence_tell_a_retrieval_miss_from_a_reader_miss():
    from types import SimpleNamespace

    from evaluation.answers import AnswerCase, score_answer, summarise

    chunks = {10: "The breaker opens above 10% failures.", 20: "It stays open for 5 minutes."}
    evidence = [{"n": 1, "doc_id": 1, "chunk_id": 10}, {"n": 2, "doc_id": 1, "chunk_id": 20}]
    result = SimpleNamespace(answer="It opens [1].", evidence=evidence, citations=[], shortcut="", trace_id="")
    shown = AnswerCase("r1", "How long, and when?", ("10%", ["5 minutes", "five minutes"]), frozenset())
    unseen = AnswerCase("r2", "When does it close?", ("10%", "half-open"), frozenset())

    left_out = score_answer(shown, result, 1.0, chunk_text=chunks.__getitem__)
    never_found = score_answer(unseen, result, 1.0, chunk_text=chunks.__getitem__)

    assert (left_out.keyword_pass, left_out.keywords_in_evidence) == (False, True)
    assert left_out.why == ["missing keywords ['10%', ['5 minutes', 'five minutes']]"]
    assert (never_found.keyword_pass, never_found.keywords_in_evidence) == (False, False)
    assert never_found.why == ["missing keywords ['10%', 'half-open'] (['half-open'] not in the evidence)"]
    assert summarise([left_out, never_found])["keywords_in_evidence"] == 0.5

    # A passage the gate cut to its budget is read as far as the prompt held it.
    cut = [{"n": 1, "doc_id": 1, "chunk_id": 20, "chars": len("It stays open")}]
    result = SimpleNamespace(answer="It stays open [1].", evidence=cut, citations=[], shortcut="", trace_id="")
    minutes = AnswerCase("r3", "How long?", ("5 minutes",), frozenset())
    assert score_answer(minutes, result, 1.0, chunk_text=chunks.__getitem__).keywords_in_evidence is False


def test_source_recall_is_the_share_of_the_needed_documents_cited():
    from types import SimpleNamespace

    from evaluation.answers import AnswerCase, score_answer

    case = AnswerCase("m1", "A and B?", (), frozenset({1, 2, 3}), needed_docs=frozenset({1, 2}))
    evidence = [{"n": 1, "doc_id": 1, "chunk_id": 10}, {"n": 2, "doc_id": 3, "chunk_id": 30}, {"n": 3, "doc_id": 2, "chunk_id": 20}]
    citations = [{"n": 1, "chunk_id": 10, "quote": ""}, {"n": 2, "chunk_id": 30, "quote": ""}]  # [3] not cited
    result = SimpleNamespace(answer="x [1] [2]", evidence=evidence, citations=citations, shortcut="", trace_id="")

    outcome = score_answer(case, result, 1.0, chunk_text=lambda chunk_id: "")

    assert outcome.source_pass is True and outcome.source_recall == 0.5


def test_answers_can_be_asked_through_a_chosen_agent(answers_kb, tmp_path):
    path = tmp_path / "answers.json"

    out, code = _evaluate("--kb", answers_kb.slug, "--answers", "--agent", "deep_research_agent", "--json", str(path))

    report = json.loads(path.read_text())
    assert code == 0, out
    assert report["config"]["chat"]["agent_type"] == "deep_research_agent"
    assert report["metrics"]["keyword_pass"] == pytest.approx(2 / 3, abs=1e-4)


def test_rates_per_category_tell_reader_misses_apart():
    from chat.pipeline import ChatResult
    from evaluation.answers import AnswerCase, by_category, score_answer

    result = ChatResult(trace_id="t", session_id="s", conversation_id=1, answer="It opens above 10%.", status="done")
    cases = [
        AnswerCase("a", "When does it open?", ("10%",), frozenset(), category="number"),
        AnswerCase("b", "How long does it stay open?", ("5 minutes",), frozenset(), category="number"),
        AnswerCase("c", "Which states are there?", ("half-open",), frozenset(), category="list"),
        AnswerCase("d", "Who wrote it?", (), frozenset(), category="name"),  # no keyword: not counted
    ]
    evidence = {"b": "It stays open for 5 minutes."}
    outcomes = [score_answer(case, result, 1.0, lambda chunk_id: "") for case in cases]
    for outcome in outcomes:  # what retrieval had handed the reader
        outcome.keywords_in_evidence = outcome.qid in evidence or outcome.keyword_pass

    rows = by_category(outcomes)

    assert rows == {"list": (0.0, 0.0, 1), "number": (0.5, 1.0, 2)}
