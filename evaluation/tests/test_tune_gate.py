"""`evaluate --tune` calibrates the quality gate's five-factor threshold and stores it."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from evaluation.models import GoldenQuestion, Split
from evaluation.tuning import GATE_KEEP, choose_gate_threshold, gate_point
from knowledge.models import KnowledgeBase
from knowledge.retrieval import params_for_kb


def test_the_threshold_is_the_highest_that_keeps_the_relevant_references():
    # (question, five-factor score, from a relevant document)
    scored = [(0, 0.62, True), (0, 0.20, False), (1, 0.41, True), (1, 0.38, True), (1, 0.10, False), (2, 0.15, False)]

    threshold, points = choose_gate_threshold(scored)

    # 0.40 would drop question 1's 0.38 (2 of 3 relevant kept < GATE_KEEP); 0.35 keeps all 3.
    assert threshold == 0.35
    assert points["0.35"].relevant_kept == 1.0 and points["0.35"].noise_rejected == 1.0
    assert points["0.4"].relevant_kept == pytest.approx(2 / 3) and points["0.4"].relevant_kept < GATE_KEEP


def test_a_question_never_loses_its_last_relevant_reference():
    many = [(0, 0.9, True)] * 40
    scored = [*many, (1, 0.12, True), (1, 0.05, False)]

    threshold, _ = choose_gate_threshold(scored)

    assert threshold <= 0.1
    assert gate_point(scored, threshold).questions_kept == 1.0


@pytest.mark.parametrize("scored", [[], [(0, 0.3, False), (1, 0.8, False)]])
def test_without_relevant_references_to_calibrate_on_the_check_stays_open(scored):
    assert choose_gate_threshold(scored)[0] == 0.0


@pytest.mark.django_db
def test_tune_stores_a_calibrated_gate_threshold_that_retrieval_then_uses(imported_kb, tmp_path):
    GoldenQuestion.objects.filter(qid__in=("q1", "q3")).update(split=Split.TEST)
    path = tmp_path / "tune.json"
    out = io.StringIO()

    call_command("evaluate", "--kb", "tiny", "--tune", "--json", str(path), stdout=out, stderr=out)

    report = json.loads(path.read_text())
    threshold = report["gate"]["threshold"]
    assert report["gate"]["scored_train"] > 0
    assert report["gate"]["train"][f"{threshold:g}"]["questions_kept"] == 1.0
    stored = KnowledgeBase.objects.get(pk=imported_kb.pk).retrieval_settings
    assert stored["gate"] == {"five_factor_min": threshold}
    assert params_for_kb(KnowledgeBase.objects.get(pk=imported_kb.pk)).gate.five_factor_min == threshold
    assert "gate five-factor threshold" in out.getvalue()


@pytest.mark.django_db
def test_a_stored_threshold_does_not_outlive_the_embedder_it_was_calibrated_on(imported_kb):
    KnowledgeBase.objects.filter(pk=imported_kb.pk).update(
        retrieval_settings={"gate": {"five_factor_min": 0.4}, "embedder": imported_kb.embedder}
    )
    assert params_for_kb(KnowledgeBase.objects.get(pk=imported_kb.pk)).gate.five_factor_min == 0.4

    KnowledgeBase.objects.filter(pk=imported_kb.pk).update(embedder="e5-small")

    assert params_for_kb(KnowledgeBase.objects.get(pk=imported_kb.pk)).gate.five_factor_min != 0.4


def test_a_quote_from_the_context_window_the_evidence_showed_is_valid_and_nothing_past_it():
    from types import SimpleNamespace

    from evaluation.answers import AnswerCase, score_answer

    chunks = {10: "The breaker opens when failures pass", 11: "ten percent of calls. It then waits."}
    joined = "The breaker opens when failures pass ten percent of calls."
    evidence = [{"n": 1, "doc_id": 1, "chunk_id": 10, "chars": len(joined)}]
    citations = [{"n": 1, "chunk_id": 10, "quote": "ten percent of calls"}, {"n": 1, "chunk_id": 10, "quote": "It then waits"}]
    result = SimpleNamespace(answer="x [1]", evidence=evidence, citations=citations, shortcut="", trace_id="")
    case = AnswerCase("c", "When?", ("ten percent",), frozenset({1}))

    outcome = score_answer(case, result, 1.0, chunks.__getitem__, lambda chunk_id: chunks.get(chunk_id + 1, ""))

    assert outcome.citations == 2 and outcome.citations_valid == 1  # the joined part only, not the whole next chunk
    assert outcome.keywords_in_evidence is True
    plain = score_answer(case, result, 1.0, chunks.__getitem__)
    assert plain.citations_valid == 0
