from __future__ import annotations

import pytest

from graphrag.disambiguation import (
    EntityIndex,
    edit_similarity,
    initials,
    link,
    name_vectors,
    string_similarity,
)
from graphrag.extraction import Triple, dictionary_for, extract, find_mentions, normalise

DICTIONARY = dictionary_for(["3.2 Quality gate", "质量门控", "A very long heading that is a whole sentence of words"], ["向量检索"])


def relations(text: str) -> set[Triple]:
    return set(extract(text, DICTIONARY).relations)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("StreamChatPipeline uses Redis for sessions.", Triple("streamchatpipeline", "uses", "redis")),
        ("DeepSearch depends on GraphRAG.", Triple("deepsearch", "depends_on", "graphrag")),
        ("LightRAG extends GraphRAG with dual-level keys.", Triple("lightrag", "extends", "graphrag")),
        ("pgvector is an extension of PostgreSQL.", Triple("pgvector", "is_a", "postgresql")),
        ("The Quality gate supports HyDE.", Triple("qualitygate", "supports", "hyde")),
        ("Milvus replaces FAISS here.", Triple("milvus", "replaces", "faiss")),
        ("DeepSearch 依赖 GraphRAG 的社区摘要。", Triple("deepsearch", "depends_on", "graphrag")),
        ("质量门控使用 BM25 的分数。", Triple("质量门控", "uses", "bm25")),
        ("混合检索融合向量检索和 BM25。", Triple("混合检索", "integrates_with", "向量检索")),
        ("Stage 5 → Shortcut B", Triple("stage5", "triggers", "shortcutb")),
    ],
)
def test_it_reads_the_relation_a_sentence_states(text, expected):
    assert expected in relations(text)


def test_relations_stay_within_a_sentence_and_co_occurrence_within_a_paragraph():
    extraction = extract("Redis keeps sessions. Celery runs tasks.\n\nDocker ships Milvus.", DICTIONARY)

    assert not extraction.relations
    pairs = set(extraction.co_occurrences)
    assert ("celery", "redis") in pairs and ("docker", "milvus") in pairs
    assert ("milvus", "redis") not in pairs


def test_special_patterns_give_canonical_stages_layers_and_priorities():
    mentions = find_mentions("阶段 5 与 Stage 5 相同；L2 应用层在 P0 任务中。短路 C 很少触发。", DICTIONARY)

    by_key = {m.key: m.type for m in mentions}
    assert by_key["stage5"] == "stage" and by_key["layer2"] == "layer"
    assert by_key["p0"] == "priority" and by_key["shortcutc"] == "shortcut"
    assert sum(m.key == "stage5" for m in mentions) == 2


def test_the_dictionary_takes_short_headings_and_types_known_terms():
    mentions = {m.key: m.type for m in find_mentions("The quality gate sends Redis data to Neo4j via Celery.", DICTIONARY)}

    assert mentions["qualitygate"] == "concept"
    assert mentions["redis"] == "storage" and mentions["neo4j"] == "storage" and mentions["celery"] == "framework"
    assert not any("sentence" in key for key in mentions)


def test_chinese_noun_phrases_come_from_jieba_and_generic_nouns_do_not():
    keys = {m.key for m in find_mentions("知识库的文档经过解析器切分，结果写入数据库。", DICTIONARY)}

    assert {"知识库", "解析器"} <= keys
    assert "结果" not in keys


def test_spellings_of_one_name_share_a_key():
    assert normalise("bge-m3") == normalise("BGE M3") == normalise("bge_m3")


def test_string_measures_follow_the_seed():
    assert string_similarity("graphrag", "graphrag") == 1.0
    assert initials("StreamChatPipeline") == "scp"
    assert string_similarity("scp", "streamchatpipeline", candidate_name="StreamChatPipeline") == 0.9
    assert string_similarity("rerank", "reranker") == 0.8
    assert edit_similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)


def test_disambiguation_links_variants_and_keeps_strangers_apart():
    index = EntityIndex(name_vectors)
    for name in ["StreamChatPipeline", "Reranker", "PostgreSQL"]:
        index.add(normalise(name), name)

    assert link("streamchatpipeline", "streamchatpipeline", index).key == "streamchatpipeline"
    assert not link("scp", "SCP", index).new  # abbreviation 0.9, then the name vectors
    assert link("rabbitmq", "RabbitMQ", index).new  # nothing alike: NIL, a new entity
    assert link("postgres", "Postgres", index).key == "postgresql"
