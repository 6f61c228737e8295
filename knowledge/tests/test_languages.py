"""A KB's languages decide whether a question's cross-language variants are searched."""

from __future__ import annotations

import dataclasses

import pytest

from agentic_rag.embeddings import get_embedder
from knowledge.fusion import FusionParams, expand_query
from knowledge.languages import kb_languages, languages_of, needs_translation, query_language
from knowledge.models import KnowledgeBase
from knowledge.retrieval import RetrievalParams, retrieve
from knowledge.tests.test_retrieval import ingest

CHINESE_DOCS = {
    "模型.md": "# 模型部署\n\n模型部署在两台服务器上，每台服务器运行四个进程。",
    "社区.md": "# 社区活动\n\n社区每周六组织一次植树活动，居民自愿报名参加。",
}


class RecordingEmbedder:
    """The hashing embedder, noting every query text it embeds."""

    def __init__(self) -> None:
        self._inner = get_embedder("hashing-1024")
        self.name, self.dims = self._inner.name, self._inner.dims
        self.queries: list[str] = []

    def embed_query(self, text):
        self.queries.append(text)
        return self._inner.embed_query(text)

    def embed_passages(self, texts):
        return self._inner.embed_passages(texts)


def test_a_language_counts_from_a_tenth_of_the_words():
    assert languages_of(["模型 部署 服务器 进程 model"]) == {"zh", "en"}
    assert languages_of(["模型 部署 服务器 进程 运行 两 台 每 四 个 model"]) == {"zh"}
    assert languages_of(["shock wave boundary layer 2015"]) == {"en"}
    assert languages_of([]) == frozenset()


@pytest.mark.parametrize(
    ("query", "languages", "expected"),
    [
        ("模型部署在哪里？", frozenset({"zh"}), False),
        ("模型部署在哪里？", frozenset({"zh", "en"}), True),
        ("Where is the model deployed?", frozenset({"zh"}), True),
        ("Where is the model deployed?", frozenset({"en"}), False),
        ("Apple Lossless是哪个公司的格式？", frozenset({"zh"}), False),  # a Chinese question naming an English name
        ("模型部署在哪里？", frozenset(), True),  # nothing known: keep the variants
    ],
)
def test_a_question_is_translated_only_for_a_kb_holding_another_language(query, languages, expected):
    assert query_language(query) in ("zh", "en")
    assert needs_translation(query, languages) is expected


def test_a_chinese_kb_is_searched_with_the_question_alone(kb):
    ingest(kb, CHINESE_DOCS)
    kb.refresh_from_db()
    embedder = RecordingEmbedder()

    result = retrieve("社区的模型部署在哪几台服务器？", kb, RetrievalParams(mode="hybrid"), embedder=embedder)

    assert kb_languages(kb) == {"zh"}
    assert not any("community" in text or "model" in text for text in embedder.queries)
    assert result.candidates[0].doc_name == "模型.md"


def test_a_bilingual_kb_is_searched_with_the_questions_variants(kb):
    ingest(kb, {**CHINESE_DOCS, "deploy.md": "# Deployment\n\nThe model is deployed on two servers with four processes each."})
    kb.refresh_from_db()
    embedder = RecordingEmbedder()

    retrieve("社区的模型部署在几台服务器上？", kb, RetrievalParams(mode="hybrid"), embedder=embedder)

    assert kb_languages(kb) == {"zh", "en"}
    assert any("community" in text for text in embedder.queries)


def test_the_vector_leg_embeds_the_question_and_its_first_variants_only(kb):
    ingest(kb, {**CHINESE_DOCS, "deploy.md": "# Deployment\n\nThe model is deployed on two servers with four processes each."})
    kb.refresh_from_db()
    embedder = RecordingEmbedder()
    question = "社区的模型部署在哪两台服务器上？"  # asked in no other test: the query cache has not seen it
    variants = expand_query(question, limit=5)

    result = retrieve(question, kb, RetrievalParams(mode="hybrid", max_expansions=5, vector_variants=2), embedder=embedder)

    assert len(variants) > 2
    assert embedder.queries == variants[:2]  # the one-word swaps after them are the keyword leg's
    assert result.candidates


def test_the_kbs_languages_follow_its_documents(kb):
    ingest(kb, CHINESE_DOCS)
    kb.refresh_from_db()
    assert kb_languages(kb) == {"zh"}

    ingest(kb, {"deploy.md": "# Deployment\n\nThe model is deployed on two servers with four processes each, "
                             "behind one load balancer that checks their health every ten seconds."})
    kb.refresh_from_db()

    assert kb_languages(kb) == {"zh", "en"}
    assert kb_languages(KnowledgeBase(slug="unsaved")) == frozenset()


def test_an_untuned_kb_in_chinese_alone_leans_on_model_vectors():
    from knowledge.retrieval import (
        CHINESE_HYBRID_RERANK_DEPTH,
        CHINESE_MODEL_FUSION,
        LEXICAL_FUSION,
        MODEL_FUSION,
        MODEL_HYBRID_RERANK_DEPTH,
        default_fusion,
        default_hybrid_rerank_depth,
    )

    assert default_fusion("e5-small", frozenset({"zh"})) == CHINESE_MODEL_FUSION
    assert CHINESE_MODEL_FUSION.vector_weight > CHINESE_MODEL_FUSION.bm25_weight
    assert default_fusion("e5-small", frozenset({"zh", "en"})) == MODEL_FUSION
    assert default_fusion("e5-small", frozenset({"en"})) == MODEL_FUSION
    assert default_fusion("e5-small") == MODEL_FUSION
    assert default_fusion("hashing-1024", frozenset({"zh"})) == LEXICAL_FUSION
    assert default_hybrid_rerank_depth("e5-small", frozenset({"zh"})) == CHINESE_HYBRID_RERANK_DEPTH
    assert default_hybrid_rerank_depth("e5-small", frozenset({"zh", "en"})) == MODEL_HYBRID_RERANK_DEPTH
    assert default_hybrid_rerank_depth("hashing-1024", frozenset({"zh"})) is None


def test_params_for_a_chinese_kb_over_model_vectors_use_the_chinese_fusion_until_tuned(kb):
    from knowledge.models import SearchEntry
    from knowledge.retrieval import CHINESE_HYBRID_RERANK_DEPTH, CHINESE_MODEL_FUSION, params_for_kb, save_params_for_kb

    ingest(kb, CHINESE_DOCS)
    # As if re-embedded by a model (the entries' tokens are what the languages are read from).
    SearchEntry.objects.filter(kb=kb).update(embedder="e5-small")
    KnowledgeBase.objects.filter(pk=kb.pk).update(embedder="e5-small")
    kb.refresh_from_db()

    assert params_for_kb(kb).fusion == CHINESE_MODEL_FUSION
    assert params_for_kb(kb).hybrid_rerank_depth == CHINESE_HYBRID_RERANK_DEPTH

    tuned = dataclasses.replace(params_for_kb(kb), fusion=FusionParams(mode="rrf"))
    save_params_for_kb(kb, tuned)
    assert params_for_kb(kb).fusion == FusionParams(mode="rrf")
