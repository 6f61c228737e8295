from __future__ import annotations

import pytest

from knowledge.candidates import Candidate
from knowledge.gate import GateParams, Verdict, apply_quality_gate, rejection

TEXT = "混凝土浇筑前应检查模板支撑体系的稳定性。"


def make_candidate(chunk_id: int, **overrides) -> Candidate:
    fields = {"doc_id": 1, "doc_name": "guide.md", "text": TEXT, "scores": {"vector": 0.8}}
    return Candidate(chunk_id=chunk_id, **(fields | overrides))


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"text": "  \n"}, "empty text"),
        ({"scores": {"vector": 0.31}}, "vector 0.31 < 0.45 and no fused source hit"),
        (
            {"scores": {"vector": 0.31, "fusion": 0.02}},
            "vector 0.31 < 0.45 and no fused source hit",
        ),
        (
            {"scores": {"fusion": 0.0}, "sources": {"bm25"}},
            "no vector score and no fused source hit",
        ),
        ({"scores": {}}, "no vector score and no fused source hit"),
        ({"text": "2. Keyword leg (BM25)", "section_title": "Keyword leg (BM25)"}, "only its section's heading"),
        ({"scores": {"vector": 0.9, "rerank.model": 0.52}}, "rerank (LLM judge) 0.52 < 0.70"),
        (
            {"scores": {"vector": 0.2, "fusion": 0.03, "rerank.model": 0.69}, "sources": {"tag"}},
            "rerank (LLM judge) 0.69 < 0.70",
        ),
    ],
)
def test_it_rejects_with_a_reason(overrides, reason):
    result = apply_quality_gate([make_candidate(7, **overrides)], GateParams())

    assert result.verdicts == (Verdict(7, False, reason),)
    assert result.references == ()


@pytest.mark.parametrize(
    "overrides",
    [
        {"scores": {"vector": 0.45}},
        {"scores": {"vector": 0.31, "fusion": 0.02}, "sources": {"parent", "tag"}},
        {"scores": {"rrf": 0.016}, "sources": {"bm25"}},
        {"scores": {"vector": 0.9, "rerank.model": 0.70}},
        # A keyword hit normalised to 0 as its leg's last (min-max) still shares a term with the query.
        {"scores": {"bm25": 1.43, "vector": 0.0, "fusion": 0.0}, "sources": {"bm25", "vector"}},
    ],
)
def test_it_passes_on_vector_or_fused_hits_and_rerank(overrides):
    result = apply_quality_gate([make_candidate(7, **overrides)], GateParams())

    assert result.verdicts == (Verdict(7, True, "passed"),)
    assert [r.chunk_id for r in result.references] == [7]


def test_it_reads_thresholds_from_params():
    candidate = make_candidate(1, scores={"vector": 0.5, "rerank.model": 0.6})

    assert not apply_quality_gate([candidate], GateParams(vector_min=0.6)).verdicts[0].passed
    assert apply_quality_gate([candidate], GateParams(rerank_min=0.5)).verdicts[0].passed


@pytest.mark.parametrize(
    ("metadata", "scope", "require", "passed"),
    [
        ({"scope": "桥梁"}, "桥梁", True, True),
        ({"scope": "隧道"}, "桥梁", True, False),
        ({}, "桥梁", True, False),
        ({"scope": "隧道"}, "桥梁", False, True),
        ({"scope": "隧道"}, None, True, True),
        ({"scope": "隧道", "source_scope_valid": True}, "桥梁", True, True),
        ({"scope": "桥梁", "source_scope_valid": False}, "桥梁", True, False),
    ],
)
def test_it_checks_scope_when_required(metadata, scope, require, passed):
    params = GateParams(require_scope=require)

    [verdict] = apply_quality_gate(
        [make_candidate(1, metadata=metadata)], params, scope=scope
    ).verdicts

    assert verdict.passed is passed
    assert verdict.reason == ("passed" if passed else "scope mismatch")


def test_it_submits_at_most_three():
    candidates = [make_candidate(i, text="字" * 1200) for i in range(5)]

    result = apply_quality_gate(candidates)

    assert [r.chunk_id for r in result.references] == [0, 1, 2]
    assert [v.reason for v in result.verdicts] == ["passed"] * 3 + ["beyond submit_top_k 3"] * 2
    assert result.total_chars == 3600


def test_it_cuts_references_to_1500_chars_within_4000():
    candidates = [make_candidate(i, text=f"{i}" * 2000) for i in range(3)]

    result = apply_quality_gate(candidates)

    assert [len(r.text) for r in result.references] == [1500, 1500, 1000]
    assert result.total_chars == 4000
    assert [v.reason for v in result.verdicts] == [
        "passed, cut to 1500 of 2000 chars",
        "passed, cut to 1500 of 2000 chars",
        "passed, cut to 1000 of 2000 chars",
    ]
    assert result.references[2].text == "2" * 1000
    assert candidates[0].text == "0" * 2000  # the candidates themselves are not cut
    assert result.references[0].notes == ["cut to 1500 of 2000 chars"]


def test_it_drops_what_the_total_budget_cannot_hold():
    candidates = [make_candidate(i, text="字" * 1500) for i in range(4)]
    params = GateParams(submit_top_k=5, max_reference_chars=3100)

    result = apply_quality_gate(candidates, params)

    # 3100 - 3000 leaves 100 chars, under the 200-char minimum for a cut reference
    assert [v.reason for v in result.verdicts] == [
        "passed",
        "passed",
        "over the 3100-char budget",
        "over the 3100-char budget",
    ]
    assert result.total_chars == 3000


def test_it_still_accepts_a_short_reference_that_fits_the_remaining_budget():
    candidates = [
        make_candidate(1, text="字" * 1500),
        make_candidate(2, text="字" * 1500),
        make_candidate(3, text="短" * 80),
    ]

    result = apply_quality_gate(candidates, GateParams(max_reference_chars=3100))

    assert [v.passed for v in result.verdicts] == [True, True, True]
    assert result.total_chars == 3080


def test_it_keeps_rejected_candidates_out_of_the_budget():
    candidates = [
        make_candidate(1, scores={"vector": 0.1}, text="字" * 1500),
        *(make_candidate(i, text="字" * 1300) for i in (2, 3, 4)),
    ]

    result = apply_quality_gate(candidates)

    assert [r.chunk_id for r in result.references] == [2, 3, 4]
    assert result.verdicts[0].passed is False


def test_it_holds_the_five_factor_score_to_its_own_threshold_not_the_judges():
    # A plain "rerank" (a second stage's overwritten total) is not what the check reads.
    assert rejection(make_candidate(1, scores={"vector": 0.9, "rerank": 0.3}), GateParams()) is None
    five_factor = make_candidate(2, scores={"vector": 0.9, "rerank": 0.3, "rerank.five_factor": 0.3})

    assert rejection(five_factor, GateParams(five_factor_min=0.25)) is None
    assert rejection(five_factor, GateParams(five_factor_min=0.35)) == "rerank (five-factor) 0.30 < 0.35"
