from __future__ import annotations

import pytest

from knowledge.candidates import Candidate
from knowledge.fusion import (
    CROSS_LANG_TERMS,
    EXAMPLE_MARKERS,
    FusionBonuses,
    FusionParams,
    apply_example_penalty,
    expand_query,
    fuse,
    minmax,
    weighted_rrf,
)


def make_candidate(chunk_id: int, score: float = 0.0, **overrides) -> Candidate:
    fields = {"doc_id": 1, "doc_name": "guide.md", "text": f"chunk {chunk_id} text"}
    return Candidate(chunk_id=chunk_id, score=score, **(fields | overrides))


def ids(candidates: list[Candidate]) -> list[int]:
    return [candidate.chunk_id for candidate in candidates]


EVEN = {"vector": 1.0, "bm25": 1.0}


def test_it_gives_rank_one_in_two_legs_two_over_sixty_one():
    legs = {
        "vector": [make_candidate(1, 0.9), make_candidate(2, 0.8)],
        "bm25": [make_candidate(1, 7.0), make_candidate(3, 5.0)],
    }

    fused = fuse(legs, EVEN, FusionParams(mode="rrf"))

    assert ids(fused) == [1, 2, 3]
    assert fused[0].score == pytest.approx(2 / 61)
    assert fused[1].score == pytest.approx(1 / 62)
    assert fused[0].scores == {"vector": 0.9, "bm25": 7.0, "fusion": pytest.approx(2 / 61)}
    assert fused[0].sources == {"vector", "bm25"}
    assert fused[2].sources == {"bm25"}


def test_it_weights_rrf_legs_by_default_seven_to_three():
    legs = {"vector": [make_candidate(1), make_candidate(2)], "bm25": [make_candidate(2)]}

    fused = fuse(legs)

    assert ids(fused) == [2, 1]
    assert fused[0].score == pytest.approx(0.7 / 62 + 0.3 / 61)
    assert fused[1].score == pytest.approx(0.7 / 61)


def test_it_honours_rrf_k():
    fused = fuse({"bm25": [make_candidate(1)]}, {"bm25": 1.0}, FusionParams(rrf_k=10))

    assert fused[0].score == pytest.approx(1 / 11)


def test_it_sums_weighted_minmax_scores():
    legs = {
        "vector": [make_candidate(1, 0.9), make_candidate(2, 0.5), make_candidate(3, 0.1)],
        "bm25": [make_candidate(2, 12.0), make_candidate(1, 3.0)],
    }

    fused = fuse(legs, params=FusionParams(mode="weighted"))

    assert ids(fused) == [1, 2, 3]
    assert [c.score for c in fused] == pytest.approx([0.7 * 1.0, 0.7 * 0.5 + 0.3 * 1.0, 0.0])


def test_it_applies_the_vector_threshold_to_raw_cosine():
    # min-max would map 0.75 to 0 and 0.8 to 0.33; the raw cosines all clear 0.7 but one
    legs = {
        "vector": [
            make_candidate(1, 0.9),
            make_candidate(2, 0.8),
            make_candidate(3, 0.75),
            make_candidate(4, 0.69),
        ],
        "bm25": [make_candidate(5, 4.0)],
    }

    fused = fuse(legs, params=FusionParams(vector_threshold=0.7))

    assert ids(fused) == [1, 2, 3, 5]


def test_it_applies_the_bm25_threshold_after_normalisation():
    # 10 → 1.0, 8 → 0.8, 2 → 0.2 (min 0), 0 → 0.0
    legs = {
        "bm25": [
            make_candidate(1, 10.0),
            make_candidate(2, 8.0),
            make_candidate(3, 2.0),
            make_candidate(4, 0.0),
        ]
    }

    fused = fuse(legs, params=FusionParams(bm25_threshold=0.3))

    assert ids(fused) == [1, 2]


def test_it_keeps_everything_when_thresholds_are_zero():
    legs = {
        "bm25": [make_candidate(1, 10.0), make_candidate(2, 0.0)],
        "vector": [make_candidate(3, 0.01)],
    }

    assert sorted(ids(fuse(legs, params=FusionParams()))) == [1, 2, 3]


def test_it_keeps_leg_positions_as_ranks_after_thresholding():
    legs = {"vector": [make_candidate(1, 0.5), make_candidate(2, 0.9)]}

    fused = fuse(legs, {"vector": 1.0}, FusionParams(vector_threshold=0.7))

    assert ids(fused) == [2]
    assert fused[0].score == pytest.approx(1 / 62)


def test_it_counts_a_repeated_hit_once_per_leg():
    legs = {"bm25": [make_candidate(1, 3.0), make_candidate(1, 2.0)]}

    fused = fuse(legs, {"bm25": 1.0})

    assert len(fused) == 1
    assert fused[0].score == pytest.approx(1 / 61)
    assert fused[0].scores["bm25"] == 3.0


def test_it_leaves_the_input_candidates_untouched():
    hit = make_candidate(1, 0.8, scores={"vector": 0.8}, sources={"vector"})

    fuse({"vector": [hit], "bm25": [make_candidate(1, 2.0)]})

    assert hit.scores == {"vector": 0.8}
    assert hit.sources == {"vector"}
    assert hit.score == 0.8


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([3.0, 1.0, 2.0], [1.0, 0.0, 0.5]),
        ([2.0, 2.0], [1.0, 1.0]),
        ([0.0, 0.0], [0.0, 0.0]),
        ([], []),
    ],
)
def test_it_minmax_normalises(scores, expected):
    import numpy as np

    assert minmax(np.array(scores)).tolist() == pytest.approx(expected)


def test_it_fuses_paths_with_weighted_rrf_and_multi_source_bonus():
    paths = {
        "parent": (1.0, [make_candidate(1), make_candidate(2)]),
        "tag": (1.2, [make_candidate(2)]),
    }

    fused = weighted_rrf(paths)

    assert ids(fused) == [2, 1]
    assert fused[0].score == pytest.approx(1.0 / 62 + 1.2 / 61 + 0.02)
    assert fused[0].scores["fusion"] == fused[0].score
    assert fused[1].score == pytest.approx(1.0 / 61)
    assert fused[0].notes == ["multi-source (parent, tag) +0.02"]
    assert fused[1].notes == []


@pytest.mark.parametrize(
    ("overrides", "keywords", "scope", "bonus", "note"),
    [
        ({"metadata": {"scope": "桥梁"}}, [], "桥梁", 0.03, "scope 桥梁 +0.03"),
        ({"tags": ("架桥机", "GB 50204-2015")}, ["架桥机"], None, 0.08, "tag exact (架桥机) +0.08"),
        ({"text": "箱梁预制场应设置排水系统"}, ["箱梁"], None, 0.03, "tag partial (箱梁) +0.03"),
        (
            {"text": "Use the Reranker here"},
            ["reranker"],
            None,
            0.03,
            "tag partial (reranker) +0.03",
        ),
        (
            {"tags": ("架桥机",), "text": "架桥机验收"},
            ["架桥机"],
            None,
            0.08,
            "tag exact (架桥机) +0.08",
        ),
        ({"metadata": {"scope": "隧道"}}, [], "桥梁", 0.0, None),
        ({"tags": ("塔吊",), "text": "无关内容"}, ["架桥机"], None, 0.0, None),
    ],
)
def test_it_adds_each_bonus_once_and_notes_it(overrides, keywords, scope, bonus, note):
    paths = {"parent": (1.0, [make_candidate(1, **overrides)])}

    [fused] = weighted_rrf(paths, keywords=keywords, scope=scope)

    assert fused.score == pytest.approx(1 / 61 + bonus)
    assert fused.notes == ([note] if note else [])


def test_it_reads_the_bonus_sizes_from_fusion_bonuses():
    paths = {"parent": (1.0, [make_candidate(1, tags=("x",))])}

    [fused] = weighted_rrf(paths, keywords=["x"], bonuses=FusionBonuses(tag_exact=0.5))

    assert fused.score == pytest.approx(1 / 61 + 0.5)


def test_a_path_at_weight_zero_neither_scores_nor_counts_as_a_source():
    paths = {
        "parent": (1.0, [make_candidate(1), make_candidate(2)]),
        "tag": (0.0, [make_candidate(2), make_candidate(3)]),
    }

    fused = weighted_rrf(paths)

    assert ids(fused) == [1, 2]
    assert fused[1].score == pytest.approx(1.0 / 62)
    assert fused[1].sources == {"parent"} and fused[1].notes == []


@pytest.mark.parametrize(("factor", "bonus"), [(1.0, 0.08 + 0.02), (0.5, 0.04 + 0.01), (0.0, 0.0)])
def test_scaled_bonuses_multiply_every_bonus_and_zero_adds_no_note(factor, bonus):
    paths = {"parent": (1.0, [make_candidate(1, tags=("x",))]), "tag": (1.0, [make_candidate(1, tags=("x",))])}

    [fused] = weighted_rrf(paths, keywords=["x"], bonuses=FusionBonuses().scaled(factor))

    assert fused.score == pytest.approx(2 / 61 + bonus)
    assert len(fused.notes) == (2 if factor else 0)


def test_it_truncates_weighted_rrf_to_top_k():
    paths = {"parent": (1.0, [make_candidate(i) for i in range(40)])}

    assert len(weighted_rrf(paths)) == 30
    assert ids(weighted_rrf(paths, top_k=3)) == [0, 1, 2]
    assert len(weighted_rrf(paths, top_k=None)) == 40


def test_it_expands_chinese_terms_to_english():
    assert expand_query("短路机制是什么") == ["短路机制是什么", "shortcut机制是什么"]


def test_it_expands_english_terms_to_chinese_case_insensitively_with_plurals():
    expansions = expand_query("How do Knowledge Bases handle a Shortcut?")

    assert expansions[0] == "How do Knowledge Bases handle a Shortcut?"
    assert "How do 知识库 handle a Shortcut?" in expansions
    assert "How do Knowledge Bases handle a 短路?" in expansions
    assert expansions[1] == "How do 知识库 handle a 短路 ?"
    assert len(expansions) == 4


def test_english_terms_match_their_ed_and_ing_forms():
    assert "What happens when a file is 上传 twice?" in expand_query("What happens when a file is uploaded twice?")
    assert "Is 检索 重试 ?" in expand_query("Is retrieval retried?")
    assert expand_query("Which chunks are cached?")[1] == "Which 分块 are 缓存 ?"


def test_a_word_inside_an_identifier_is_not_translated():
    # The document writes the name as it is; retrieve_with_追踪 names nothing.
    assert expand_query("What fields does the result of retrieve_with_trace hold?") == [
        "What fields does the result of retrieve_with_trace hold?"
    ]
    assert expand_query("Is rerank2 or cache_ttl the retry setting?")[1] == "Is rerank2 or cache_ttl the 重试 setting?"


def test_it_makes_one_variant_per_term_in_mixed_queries():
    expansions = expand_query("向量检索 and rerank")

    assert expansions == [
        "向量检索 and rerank",
        "vector retrieval and rerank",  # every Chinese term translated, spaced apart
        "vector检索 and rerank",
        "向量retrieval and rerank",
        "向量检索 and 重排",
    ]


def test_a_question_in_chinese_about_english_documents_gets_every_term_translated_first():
    question = "文档对话构造的检索语句最长多少个字符？"

    assert expand_query(question, limit=2) == [question, "document chat 构造的 retrieval 语句最长多少个 character ？"]


def test_ordinary_words_are_translated_from_chinese_only():
    # "目录里的文件" reaches an English passage about a directory's files…
    assert expand_query("BEIR 目录里需要哪些文件？", limit=2)[1] == "BEIR directory 里需要哪些 file ？"
    # …while an English question keeps "files" and "directory": it shares them with English passages.
    assert expand_query("Which files does a BEIR dataset directory need?") == ["Which files does a BEIR dataset directory need?"]


def test_an_ordinary_word_is_translated_only_with_the_questions_other_known_terms():
    # Alone, its English variant would rank a Chinese corpus's rare English passages first.
    assert expand_query("十香词冤案指的是什么事件？") == ["十香词冤案指的是什么事件？"]
    # With a product term, it is translated in the all-terms variant but gets no variant of its own.
    assert expand_query("向量检索事件") == ["向量检索事件", "vector retrieval event", "vector检索事件", "向量retrieval事件"]


def test_it_prefers_the_longest_term():
    terms = {
        "知识": "knowledge",
        "知识库": "knowledge base",
        "检索": "retrieval",
        "混合检索": "hybrid search",
    }

    assert expand_query("知识库", terms) == ["知识库", "knowledge base"]
    assert expand_query("混合检索", terms) == ["混合检索", "hybrid search"]
    assert expand_query("a knowledge base", terms) == ["a knowledge base", "a 知识库"]


@pytest.mark.parametrize("query", ["backstage pass", "今天天气很好", "", "entityx"])
def test_it_leaves_queries_without_terms_alone(query):
    assert expand_query(query) == [query]


def test_it_limits_expansions():
    assert len(expand_query("检索 向量 重排", limit=2)) == 2


@pytest.mark.parametrize(
    ("zh", "en"),
    [
        ("短路", "shortcut"),
        ("阶段", "stage"),
        ("检索", "retrieval"),
        ("向量", "vector"),
        ("知识库", "knowledge base"),
        ("重排", "rerank"),
        ("分块", "chunk"),
        ("嵌入", "embedding"),
        ("意图", "intent"),
        ("改写", "rewrite"),
        ("路由", "router"),
        ("工具", "tool"),
        ("记忆", "memory"),
        ("图谱", "graph"),
        ("社区", "community"),
        ("实体", "entity"),
        ("评估", "evaluation"),
        ("限流", "rate limit"),
        ("熔断", "circuit breaker"),
    ],
)
def test_it_ships_the_product_terms_both_ways(zh, en):
    assert CROSS_LANG_TERMS[zh] == en
    assert f"问 {en} 呢" in expand_query(f"问 {zh} 呢")
    assert f"about {zh}" in expand_query(f"about {en}")


def test_it_ships_about_fifty_unambiguous_pairs():
    assert len(CROSS_LANG_TERMS) >= 45
    assert len(set(CROSS_LANG_TERMS.values())) == len(CROSS_LANG_TERMS)


@pytest.mark.parametrize("marker", EXAMPLE_MARKERS)
def test_it_halves_example_chunks(marker):
    example = make_candidate(1, 1.0, text=f"Some prompt.\n{marker.upper()} query → answer")
    plain = make_candidate(2, 0.6, text="The shortcut C skips prompt assembly.")

    ranked = apply_example_penalty([example, plain])

    assert ids(ranked) == [2, 1]
    assert example.score == pytest.approx(0.5)
    assert plain.score == 0.6
    assert example.notes == [f"example penalty ×0.5 ({marker})"]
    assert plain.notes == []


@pytest.mark.parametrize("text", [
    '**示例惩罚**: 检测 "examples:", "few-shot", "scenario" 等标记 → 50% 分数惩罚',
    'EXAMPLE_MARKERS = ["examples:", "few-shot", "scenario 1:"]',
    "The gate skips chunks marked `few-shot`.",
])
def test_a_chunk_that_names_the_markers_in_quotes_is_not_an_example(text):
    described = make_candidate(1, 1.0, text=text)
    used = make_candidate(2, 1.0, text=f"{text}\nExamples: query → answer")

    apply_example_penalty([described, used])

    assert described.score == 1.0 and described.notes == []
    assert used.score == pytest.approx(0.5)


def test_it_takes_custom_markers_and_factor():
    example = make_candidate(1, 1.0, text="示例：用户问……")
    sample = make_candidate(2, 1.0, text="sample query: what is RRF?")

    apply_example_penalty([example, sample], markers=["示例：", "Sample Query:"], factor=0.25)

    assert example.score == pytest.approx(0.25)
    assert sample.score == pytest.approx(0.25)


def test_over_hashing_vectors_bm25_ranks_and_the_vectors_only_add_what_it_missed():
    from knowledge.retrieval import default_fusion

    legs = {  # as retrieval passes them: the keyword leg first
        "bm25": [make_candidate(1, 9.0), make_candidate(2, 6.0), make_candidate(3, 1.0)],
        "vector": [make_candidate(4, 0.9), make_candidate(3, 0.8), make_candidate(5, 0.7), make_candidate(1, 0.1)],
    }

    fused = fuse(legs, params=default_fusion("hashing-1024"))

    assert ids(fused) == [1, 2, 3, 4, 5]  # BM25's order, then the vector leg's own finds in its order
