from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from evaluation import tuning
from evaluation.metrics import METRIC_KEYS
from evaluation.models import EvaluationRun, GoldenQuestion, Split
from evaluation.runner import RankBM25Ranker, document_ranking, load_questions
from evaluation.tuning import WEIGHTS, fusion_grid
from knowledge.candidates import Candidate
from knowledge.fusion import FusionParams
from knowledge.models import KnowledgeBase
from knowledge.retrieval import params_for_kb

pytestmark = pytest.mark.django_db


def _evaluate(*args) -> tuple[str, int]:
    out = io.StringIO()
    try:
        call_command("evaluate", *args, stdout=out, stderr=out)
    except SystemExit as exit_:
        return out.getvalue(), exit_.code
    return out.getvalue(), 0


def test_it_writes_the_json_contract_with_the_rank_bm25_baseline(imported_kb, tmp_path):
    path = tmp_path / "out.json"

    out, code = _evaluate("--kb", "tiny", "--mode", "bm25", "--baseline", "rank-bm25", "--json", str(path))

    assert code == 0
    result = json.loads(path.read_text())
    assert set(result) == {"mode", "metrics", "qps", "latency_ms", "baseline"}
    assert result["mode"] == "bm25"
    assert tuple(result["metrics"]) == METRIC_KEYS
    assert set(result["latency_ms"]) == {"p50", "p95"}
    assert set(result["baseline"]) == {"name", "metrics", "qps"}
    assert result["baseline"]["name"] == "rank-bm25"
    # Same tokens, same BM25 formula: the keyword leg and the reference rank alike.
    assert result["metrics"] == pytest.approx(result["baseline"]["metrics"])
    # Every tiny question names its passage's words: the keyword leg finds them first.
    assert result["metrics"]["hit@5"] == 1.0 and result["metrics"]["mrr@10"] == 1.0
    assert result["qps"] > 0 and result["baseline"]["qps"] > 0
    assert "retrieve:bm25" in out and "rank-bm25" in out and "ndcg@10" in out


def test_it_stores_a_run_with_its_parameters(imported_kb):
    _evaluate("--kb", "tiny", "--mode", "hybrid")

    run = EvaluationRun.objects.get()
    assert (run.kb, run.mode, run.split, run.questions, run.baseline) == (imported_kb, "hybrid", "all", 5, None)
    assert run.params["mode"] == "hybrid" and run.params["postprocess"] is False and run.params["gate"] is None
    # An untuned KB over hashing vectors: weighted fusion leaning on BM25, no rerank.
    assert run.params["fusion"]["mode"] == "weighted" and run.params["rerank"] is False
    assert run.params["chunk_depth"] == 30
    assert set(run.per_question) == {"q1", "q2", "q3", "q4", "q5"}
    assert set(run.metrics) == set(METRIC_KEYS) and {"p50", "p95"} <= set(run.latency)


@pytest.mark.parametrize("mode", ["vector", "hybrid", "multipath"])
def test_it_evaluates_every_mode_with_a_null_baseline(imported_kb, mode):
    out, code = _evaluate("--kb", "tiny", "--mode", mode, "--json", "-")

    result = json.loads(out)
    assert code == 0 and result["mode"] == mode and result["baseline"] is None
    assert 0 < result["metrics"]["ndcg@10"] <= 1


def _hold_out(*qids: str) -> None:
    # The tiny set's ids all hash to "train"; real sets split about 70/30.
    GoldenQuestion.objects.filter(qid__in=qids).update(split=Split.TEST)


def test_it_evaluates_only_the_asked_split(imported_kb):
    _hold_out("q1", "q3")

    _evaluate("--kb", "tiny", "--mode", "bm25", "--split", "test")

    run = EvaluationRun.objects.get()
    assert (run.split, run.questions, set(run.per_question)) == ("test", 2, {"q1", "q3"})


def test_it_exits_1_below_a_fail_under_threshold(imported_kb):
    out, code = _evaluate("--kb", "tiny", "--mode", "bm25", "--fail-under", "ndcg@10=1.01", "hit@5=0.5")
    assert code == 1
    assert "below threshold: ndcg@10" in out and "hit@5" not in out.split("below threshold")[-1]

    out, code = _evaluate("--kb", "tiny", "--mode", "bm25", "--fail-under", "ndcg@10=0.3")
    assert code == 0 and "below threshold" not in out


def test_it_rejects_an_unknown_fail_under_metric(imported_kb):
    with pytest.raises(CommandError, match="unknown metric 'ndcg@3'"):
        _evaluate("--kb", "tiny", "--fail-under", "ndcg@3=0.5")
    with pytest.raises(CommandError, match="is not METRIC=NUMBER"):
        _evaluate("--kb", "tiny", "--fail-under", "ndcg@10=high")


def test_it_rejects_an_unknown_kb(db):
    with pytest.raises(CommandError, match="knowledge base 'nowhere' does not exist"):
        _evaluate("--kb", "nowhere")


def test_it_rejects_a_kb_without_a_golden_set(kb):
    with pytest.raises(CommandError, match="has no golden set: import one"):
        _evaluate("--kb", kb.slug, "--mode", "bm25")
    assert not EvaluationRun.objects.exists()


def test_it_tunes_fusion_and_stores_the_winner(imported_kb, tmp_path):
    _hold_out("q1", "q3")
    path = tmp_path / "tune.json"

    out, code = _evaluate("--kb", "tiny", "--tune", "--json", str(path))

    assert code == 0
    report = json.loads(path.read_text())
    assert (report["train_questions"], report["test_questions"]) == (3, 2)
    assert report["grid_points"] > 50
    assert report["best_train"]["ndcg@10"] >= report["default_train"]["ndcg@10"]
    stored = KnowledgeBase.objects.get(pk=imported_kb.pk).retrieval_settings
    assert stored["mode"] == "hybrid" and stored["fusion"] == report["best"]
    assert params_for_kb(KnowledgeBase.objects.get(pk=imported_kb.pk)).fusion == FusionParams(**report["best"])
    assert "defaults" in out and "best" in out and "stored the best" in out
    on, off = (report["rerank_train"][state]["ndcg@10"] for state in ("on", "off"))
    assert report["rerank"] is (on >= off) and stored["rerank"] is report["rerank"]
    child, tag, bonus = report["path_weights"]
    assert (stored["paths"]["child_locator"], stored["paths"]["tag_match"], stored["paths"]["bonus_scale"]) == (
        child, tag, bonus
    )
    best = max(m["ndcg@10"] for m in report["path_weights_train"].values())
    assert report["path_weights_train"][f"{child:g}/{tag:g}/{bonus:g}"]["ndcg@10"] == best
    assert "multipath child-locator/tag-path weights/bonus scale" in out


@pytest.mark.parametrize(("on", "off", "stored"), [(0.5, 0.6, False), (0.6, 0.6, True), (0.7, 0.6, True)])
def test_it_turns_rerank_off_only_when_that_scores_better(imported_kb, monkeypatch, on, off, stored):
    _hold_out("q1", "q3")

    def fake_metrics(kb, questions, params):
        return {"ndcg@10": (on if params.rerank else off) if params.mode == "hybrid" else 0.5}

    monkeypatch.setattr(tuning, "_retrieve_metrics", fake_metrics)
    report = tuning.tune(imported_kb, load_questions(imported_kb))

    assert report.rerank is stored
    assert params_for_kb(KnowledgeBase.objects.get(pk=imported_kb.pk)).rerank is stored


@pytest.mark.parametrize(("embedder", "scores", "stored"), [
    ("hashing-1024", {}, (0.0, 0.0, 0.0)),  # all equal: the KB's untuned weights stay
    ("e5-small", {}, (0.8, 0.0, 0.0)),
    ("hashing-1024", {(0.8, 0.3, 1.0): 0.6, (0.4, 0.0, 0.0): 0.7}, (0.4, 0.0, 0.0)),
    ("e5-small", {(0.8, 1.2, 0.0): 0.6}, (0.8, 1.2, 0.0)),
])
def test_it_keeps_the_untuned_path_weights_unless_others_score_better(imported_kb, monkeypatch, embedder, scores, stored):
    _hold_out("q1", "q3")
    KnowledgeBase.objects.filter(pk=imported_kb.pk).update(embedder=embedder)
    imported_kb.refresh_from_db()

    def fake_metrics(kb, questions, params):
        point = (params.paths.child_locator, params.paths.tag_match, params.paths.bonus_scale)
        return {"ndcg@10": scores.get(point, 0.5) if params.mode == "multipath" else 0.5}

    monkeypatch.setattr(tuning, "_retrieve_metrics", fake_metrics)
    monkeypatch.setattr(tuning, "collect_legs", lambda kb, questions, params: [])
    report = tuning.tune(imported_kb, load_questions(imported_kb))

    assert report.path_weights == stored
    paths = params_for_kb(KnowledgeBase.objects.get(pk=imported_kb.pk)).paths
    assert (paths.child_locator, paths.tag_match, paths.bonus_scale) == stored


def test_it_refuses_to_tune_without_both_splits(imported_kb):
    GoldenQuestion.objects.update(split=Split.TRAIN)

    with pytest.raises(CommandError, match="tuning needs questions in both splits"):
        _evaluate("--kb", "tiny", "--tune")


def test_it_loads_only_questions_with_a_relevant_document(imported_kb):
    GoldenQuestion.objects.get(qid="q4").qrels.update(relevance=0)

    assert sorted(q.qid for q in load_questions(imported_kb)) == ["q1", "q2", "q3", "q5"]


def test_it_ranks_documents_by_their_best_chunk():
    chunks = [Candidate(chunk_id, doc_id, "", "") for chunk_id, doc_id in [(1, 7), (2, 9), (3, 7), (4, 8)]]

    assert document_ranking(chunks) == [7, 9, 8]
    assert document_ranking(chunks, depth=2) == [7, 9]


def test_it_builds_the_baseline_over_live_child_chunks(imported_kb):
    ranker = RankBM25Ranker(imported_kb)

    assert len(ranker.doc_ids) == 5
    top = ranker("buckling of cylindrical shells")[0]
    assert imported_kb.documents.get(pk=top).name == "d5.txt"


def test_it_puts_the_current_fusion_first_in_a_grid_of_weight_pairs():
    base = FusionParams()
    grid = fusion_grid(base, [0.1, 0.2, 0.3, 0.4, 0.5])

    assert grid[0] == base and len(grid) == len(set(grid))
    assert {point.mode for point in grid} == {"rrf", "weighted"}
    assert {point.vector_weight for point in grid} == set(WEIGHTS)
    assert all(abs(point.vector_weight + point.bm25_weight - 1) < 1e-9 for point in grid)
    assert {point.vector_threshold for point in grid} == {0.0, 0.2, 0.3}


@pytest.mark.parametrize(("stored", "flags", "expected"), [
    (False, [], "rerank off"), (True, [], "rerank on"), (True, ["--no-rerank"], "rerank off"),
])
def test_it_runs_the_kb_stored_rerank_setting_unless_told_otherwise(imported_kb, stored, flags, expected):
    KnowledgeBase.objects.filter(pk=imported_kb.pk).update(retrieval_settings={"rerank": stored})

    out, code = _evaluate("--kb", "tiny", "--mode", "hybrid", *flags)

    assert code == 0 and expected in out
