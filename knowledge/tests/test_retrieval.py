from __future__ import annotations

import dataclasses

import pytest
from django.test import TestCase

from knowledge.fusion import FusionParams
from knowledge.ingest import run_ingestion, submit_document
from knowledge.models import KnowledgeBase
from knowledge.recall import LEXICAL_PATHS, PathWeights
from knowledge.retrieval import (
    GRAPH_MODES,
    LEXICAL_FUSION,
    MODES,
    InvalidQuery,
    RetrievalParams,
    params_for_kb,
    retrieve,
    save_params_for_kb,
)

pytestmark = pytest.mark.django_db

DOCS = {
    "vectors.md": "# 1 Vector search\n\nHNSW graphs index embeddings so cosine similarity search stays fast.\n\n"
    "## 1.1 Quantisation\n\nProduct quantisation compresses vectors into short codes.",
    "keywords.md": "# 1 Keyword search\n\nBM25 ranks passages by term frequency and inverse document frequency.\n\n"
    "# 2 Tokenisation\n\nChinese text is segmented with jieba in search mode before indexing.",
    "施工.md": "# 1 施工准备\n\n按照 GB 50204-2015 执行混凝土结构验收。架桥机进场前应完成技术交底。\n\n"
    "# 2 安全措施\n\n塔吊作业必须设置警戒区，并安排专人指挥。",
}


def ingest(kb, docs=DOCS):
    for name, text in docs.items():
        queued: list[int] = []
        with TestCase.captureOnCommitCallbacks(execute=True):
            submit_document(kb, name, text.encode(), enqueue=queued.append)
        run_ingestion(queued[0])


@pytest.mark.parametrize("mode", [m for m in MODES if m not in GRAPH_MODES])  # graph modes: graphrag's tests
def test_it_finds_the_document_that_answers_in_every_mode(kb, mode):
    ingest(kb)

    result = retrieve("BM25 term frequency ranking", kb, RetrievalParams(mode=mode))

    assert result.candidates and result.candidates[0].doc_name == "keywords.md"
    assert result.reason == "" and result.timings_ms["total"] > 0
    assert [r["rank"] for r in result.results()] == list(range(1, len(result.candidates) + 1))
    assert set(result.results()[0]) == {"chunk_id", "doc_id", "doc_name", "text", "score", "scores", "section", "rank"}


def test_it_reports_each_leg_and_the_fused_scores_in_hybrid_mode(kb):
    ingest(kb)

    result = retrieve("HNSW cosine similarity", kb, RetrievalParams(mode="hybrid", postprocess=False, rerank=False))

    assert set(result.legs) == {"bm25", "vector"}
    top = result.fused[0]
    assert top.doc_name == "vectors.md"
    assert {"bm25", "vector", "fusion"} <= set(top.scores) and top.sources == {"bm25", "vector"}


def test_a_chinese_question_finds_the_english_passage_that_holds_all_its_terms(kb):
    ingest(kb, {
        "answer.md": "# Gate\n\nA shortcut is taken when the evidence falls below the threshold.",
        "shortcuts.md": "# Shortcuts\n\nEach shortcut shows a shortcut card, and the shortcut is kept in the trace.",
        "thresholds.md": "# Thresholds\n\nEach threshold is stored per KB; a threshold of 0 switches it off.",
    })

    result = retrieve("短路的阈值是多少？", kb, RetrievalParams(mode="bm25"))

    # One term translated at a time, each variant finds the document that repeats that term.
    assert [c.doc_name for c in result.candidates[:1]] == ["answer.md"]


def test_the_rerank_reads_the_english_passage_with_the_questions_translated_terms(kb):
    ingest(kb, {**DOCS, "answer.md": "# Gate\n\nA shortcut is taken when the evidence falls below the threshold."})

    result = retrieve("短路的阈值是多少？", kb, RetrievalParams(mode="hybrid", rerank=True))

    top = result.reranked[0]
    assert top.doc_name == "answer.md" and top.scores["rerank.key_terms"] == pytest.approx(1.0)


def test_it_searches_chinese_and_records_multipath_paths(kb):
    ingest(kb)

    result = retrieve("架桥机进场要求", kb, RetrievalParams(mode="multipath"))

    assert result.candidates[0].doc_name == "施工.md"
    assert {"parent_hybrid", "child_locator", "tag_match"} <= set(result.legs)
    assert all(c.level == 0 for c in result.candidates)


def test_multipath_runs_a_path_at_weight_0_only_to_show_it(kb):
    ingest(kb)
    lexical = RetrievalParams(mode="multipath", paths=LEXICAL_PATHS)

    fused_only = retrieve("架桥机进场要求", kb, lexical)
    shown = retrieve("架桥机进场要求", kb, dataclasses.replace(lexical, unfused_paths=True))

    assert set(fused_only.legs) == {"parent_hybrid"}
    assert {"parent_hybrid", "child_locator", "tag_match"} <= set(shown.legs)
    # Left out of fusion either way: the same answer.
    assert [c.chunk_id for c in fused_only.candidates] == [c.chunk_id for c in shown.candidates]


def test_multipaths_parent_hybrid_fuses_as_the_kbs_settings_say(kb):
    ingest(kb)

    result = retrieve("BM25 term frequency ranking", kb, RetrievalParams(mode="multipath", fusion=FusionParams(mode="rrf")))

    best = result.legs["parent_hybrid"][0]
    assert best.doc_name == "keywords.md" and best.sources == {"bm25", "vector"}
    # First in both legs: RRF's 0.7/61 + 0.3/61, not weighted fusion's normalised 1.0.
    assert best.scores["fusion"] == pytest.approx(1 / 61)


def test_the_configured_second_rerank_stage_runs_after_the_five_factor_scorer(kb, settings):
    ingest(kb, {**DOCS, "more.md": "# 1 More\n\nBM25 and cosine rankings both use term statistics.\n\n"
                                    "# 2 Even more\n\nRanking by term frequency is classic."})
    settings.RERANK_SECOND_STAGE = "hashing-1024"

    result = retrieve("BM25 term frequency ranking", kb, params_for_kb(kb, mode="hybrid", postprocess=False))

    assert len(result.reranked) >= 4
    assert all("rerank.embedding" in c.scores for c in result.reranked[:4])
    assert result.warnings == [] and "rerank.second" in result.timings_ms


def test_an_unavailable_second_rerank_stage_is_a_warning_not_a_failed_search(kb, settings):
    ingest(kb, {**DOCS, "more.md": "# 1 More\n\nBM25 and cosine rankings both use term statistics.\n\n"
                                    "# 2 Even more\n\nRanking by term frequency is classic."})
    settings.RERANK_SECOND_STAGE = "no-such-embedder"

    result = retrieve("BM25 term frequency ranking", kb, params_for_kb(kb, mode="hybrid", postprocess=False))

    assert result.candidates[0].doc_name == "keywords.md"
    assert any("second stage 'no-such-embedder' is unavailable" in w for w in result.warnings)
    assert "rerank" in result.timings_ms and "rerank.second" not in result.timings_ms


def test_it_never_returns_chunks_of_another_kb(kb, bob):
    ingest(kb)
    other = KnowledgeBase.objects.create(slug="bobs", name="Bob's", owner=bob)
    ingest(other, {"secret.md": "# 1 Secret\n\nBM25 term frequency ranking is secret here."})

    for mode in MODES:
        result = retrieve("BM25 term frequency ranking secret", kb, RetrievalParams(mode=mode, top_k=10))
        assert "secret.md" not in {c.doc_name for c in result.candidates}


def test_it_rejects_an_empty_query(kb):
    with pytest.raises(InvalidQuery, match="empty"):
        retrieve("   ", kb)


def test_it_truncates_a_very_long_query_and_says_so(kb):
    ingest(kb)

    result = retrieve("BM25 " * 2000, kb, RetrievalParams(max_query_chars=1000))

    assert len(result.query) == 1000
    assert any("truncated" in warning for warning in result.warnings)


def test_it_explains_an_empty_knowledge_base(kb):
    result = retrieve("anything", kb)

    assert result.candidates == [] and "no ready documents" in result.reason


def test_it_handles_a_query_of_punctuation_and_emoji(kb):
    ingest(kb)

    result = retrieve("？？！！ 🙂🙂", kb, RetrievalParams(mode="bm25"))

    assert result.candidates == [] and result.reason


def test_it_sees_new_documents_after_the_kb_changes(kb):
    ingest(kb)
    before = retrieve("quantum chromodynamics gluon", kb, RetrievalParams(mode="bm25"))

    ingest(kb, {"physics.md": "# 1 QCD\n\nQuantum chromodynamics describes gluon interactions."})
    after = retrieve("quantum chromodynamics gluon", kb, RetrievalParams(mode="bm25"))

    assert "physics.md" not in {c.doc_name for c in before.candidates}
    assert after.candidates[0].doc_name == "physics.md"


def test_kb_params_cut_queries_at_the_setting(kb, settings):
    settings.RETRIEVAL_MAX_QUERY_CHARS = 40

    result = retrieve("concrete " * 20, kb, params_for_kb(kb))

    assert len(result.query) == 40
    assert result.warnings == ["the query was truncated to its first 40 characters"]


@pytest.mark.parametrize(
    ("embedder", "expected"),
    [
        ("hashing-1024", ("weighted", 0.0, 1.0, False, (1.0, 0.0, 0.0, 0.0, 0.0))),
        ("e5-small", ("weighted", 0.4, 0.6, True, (1.0, 0.8, 0.0, 0.5, 0.0))),
    ],
)
def test_an_untuned_kb_searches_as_its_embedder_suits(kb, embedder, expected):
    kb.embedder = embedder

    params = params_for_kb(kb)

    paths = params.paths
    path_weights = (paths.parent_hybrid, paths.child_locator, paths.tag_match, paths.same_chapter, paths.bonus_scale)
    assert (params.fusion.mode, params.fusion.vector_weight, params.fusion.bm25_weight, params.rerank, path_weights) == expected


@pytest.mark.parametrize(
    ("embedder", "depths"),
    [
        ("e5-small", {"hybrid": 5, "vector": 20, "multipath": 20}),
        ("openai:text-embedding-3-small", {"hybrid": 5, "vector": 20, "multipath": 20}),
        ("hashing-1024", {"hybrid": 20, "vector": 20, "multipath": 20}),
    ],
)
def test_an_untuned_kb_over_model_vectors_reranks_only_fusions_head(kb, embedder, depths):
    kb.embedder = embedder

    measured = {mode: params_for_kb(kb, mode=mode).head_to_rerank for mode in depths}
    # The playground switches modes on the KB's params rather than asking for new ones.
    switched = {mode: dataclasses.replace(params_for_kb(kb), mode=mode).head_to_rerank for mode in depths}

    assert measured == switched == depths


def test_a_tuned_kb_keeps_its_fusion_and_rerank_over_the_embedders_defaults(kb):
    KnowledgeBase.objects.filter(pk=kb.pk).update(embedder="e5-small")
    kb.refresh_from_db()
    tuned = FusionParams(mode="rrf", vector_weight=0.2, bm25_weight=0.8)
    save_params_for_kb(kb, RetrievalParams(mode="hybrid", rerank=False, fusion=tuned))
    kb.refresh_from_db()

    params = params_for_kb(kb)

    assert params.fusion == tuned and params.rerank is False
    assert params_for_kb(kb, hybrid_rerank_depth=3).head_to_rerank == 3


def test_hybrid_reranks_only_the_head_its_depth_names(kb):
    ingest(kb)
    params = RetrievalParams(mode="hybrid", postprocess=False, top_k=30, example_penalty=False, hybrid_rerank_depth=4)

    result = retrieve("vector search keyword BM25 cosine tokenisation quantisation", kb, params)

    assert len(result.fused) > 4
    fused_ids = [c.chunk_id for c in result.fused]
    reranked_ids = [c.chunk_id for c in result.reranked]
    assert sorted(reranked_ids[:4]) == sorted(fused_ids[:4]) and reranked_ids[4:] == fused_ids[4:]
    assert all("rerank" in c.scores for c in result.reranked[:4])
    assert not any("rerank" in c.scores for c in result.reranked[4:])


def test_settings_tuned_for_one_embedder_do_not_carry_over_to_the_next(kb):
    KnowledgeBase.objects.filter(pk=kb.pk).update(embedder="e5-small")
    save_params_for_kb(kb, RetrievalParams(mode="hybrid", rerank=False, fusion=FusionParams(vector_weight=0.4, bm25_weight=0.6)))
    kb.refresh_from_db()
    assert kb.retrieval_settings["embedder"] == "e5-small"
    assert params_for_kb(kb).fusion.vector_weight == 0.4 and params_for_kb(kb).rerank is False

    KnowledgeBase.objects.filter(pk=kb.pk).update(embedder="hashing-1024")  # the KB moved to other vectors
    kb.refresh_from_db()

    params = params_for_kb(kb)
    assert (params.fusion.vector_weight, params.rerank, params.mode) == (LEXICAL_FUSION.vector_weight, False, "hybrid")
    assert params.paths == LEXICAL_PATHS


def test_it_stores_and_loads_per_kb_params(kb):
    fusion = FusionParams(mode="weighted", vector_weight=0.4, bm25_weight=0.6)
    paths = PathWeights(tag_match=0.3, bonus_scale=0.0)
    save_params_for_kb(kb, RetrievalParams(mode="hybrid", fusion=fusion, rerank=False, paths=paths))
    kb.refresh_from_db()

    params = params_for_kb(kb, top_k=7)

    assert params.fusion.mode == "weighted" and params.fusion.bm25_weight == 0.6
    assert params.top_k == 7 and params.mode == "hybrid" and params.rerank is False
    assert params.paths == paths


def test_it_keeps_the_order_when_rerank_fails(kb, monkeypatch):
    ingest(kb)

    def explode(self, query, candidates):
        raise RuntimeError("scorer down")

    monkeypatch.setattr("knowledge.rerank.FiveFactorReranker.rerank", explode)
    params = RetrievalParams(mode="hybrid", postprocess=False, top_k=10)
    result = retrieve("search", kb, params)

    assert any("rerank skipped" in warning for warning in result.warnings)
    assert [c.chunk_id for c in result.candidates] == [c.chunk_id for c in result.fused][:10]

