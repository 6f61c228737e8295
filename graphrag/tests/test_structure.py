"""Typed entities and relations: from structure (headings, tables, key-value lines, code) and
from verbs in Chinese and English, under one set of relation types; co-occurrence kept weak."""

from __future__ import annotations

import pytest

from graphrag.build import build_graph, strongest_cooccurrences
from graphrag.extraction import Triple, dictionary_for, extract
from graphrag.models import Entity, EntityType, Relation
from graphrag.stats import graph_stats
from graphrag.structure import code_type, structural_facts

from .test_build import ingest

DICTIONARY = dictionary_for(["质量门控"], [])
T = EntityType


def typed(text: str) -> dict[str, str]:
    return {m.key: m.type for m in extract(text, DICTIONARY).mentions}


def relations(text: str) -> set[Triple]:
    return set(extract(text, DICTIONARY).relations)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("检索服务使用 Redis 缓存。", Triple("检索服务", "uses", "redis")),
        ("GraphRAG 调用 networkx 计算社区。", Triple("graphrag", "calls", "networkx")),
        ("LightRAG 基于 GraphRAG 实现。", Triple("lightrag", "based_on", "graphrag")),
        ("流水线包含 Celery 任务。", Triple("流水线", "contains", "celery")),
        ("DeepSearch 依赖 GraphRAG。", Triple("deepsearch", "depends_on", "graphrag")),
        ("pgvector 是一种 PostgreSQL 扩展。", Triple("pgvector", "is_a", "postgresql")),
        ("The pipeline calls Redis twice.", Triple("pipeline", "calls", "redis")),
        ("LightRAG is based on GraphRAG.", Triple("lightrag", "based_on", "graphrag")),
        ("Celery contains Redis settings.", Triple("celery", "contains", "redis")),
        ("DeepSearch depends on GraphRAG.", Triple("deepsearch", "depends_on", "graphrag")),
    ],
)
def test_verbs_in_both_languages_give_one_set_of_relation_types(text, expected):
    found = relations(text.replace("The pipeline", "StreamChatPipeline").replace("流水线", "StreamChatPipeline"))
    expected = Triple(expected.source.replace("pipeline", "streamchatpipeline").replace("流水线", "streamchatpipeline"),
                      expected.relation, expected.target)
    assert expected in found


def test_a_markdown_table_types_its_rows_and_names_relations_after_its_columns():
    text = "| 字段 | 类型 | 说明 |\n| --- | --- | --- |\n| top_k | int | 返回条数 |\n| `rerank_depth` | int | 重排深度 |"

    kinds = typed(text)

    assert kinds["topk"] == T.FIELD and kinds["rerankdepth"] == T.FIELD
    assert {Triple("topk", "has_type", "int"), Triple("rerankdepth", "has_type", "int")} <= relations(text)
    # A description column states no relation of its own.
    assert not any(t.target == "返回条数" for t in relations(text))


def test_a_table_as_the_parsers_write_it_and_a_module_column():
    text = "层 | 模块 | 职责\nL1 接入层 | `frontend` + `api/` | 用户界面"

    assert {Triple("layer1", "implemented_in", "frontend"), Triple("layer1", "implemented_in", "api")} <= relations(text)
    assert typed(text)["api"] == T.MODULE


def test_a_key_value_line_states_a_field_and_its_attributes():
    text = "字段：max_tokens，类型：int，默认值：600"

    assert typed(text)["maxtokens"] == T.FIELD
    assert {Triple("maxtokens", "has_type", "int"), Triple("maxtokens", "has_default", "600")} - relations(text) == {
        Triple("maxtokens", "has_default", "600")  # a bare number is no entity
    }
    english = "name: timeout_s, type: float"
    assert Triple("timeouts", "has_type", "float") in relations(english)


def test_headings_are_sections_and_a_sub_section_is_part_of_its_section():
    facts = structural_facts("## 2 图谱设计\n### 2.1 实体提取\n正文\n### 2.2 实体消歧\n## 3 检索")

    assert [m.surface for m in facts.mentions] == ["图谱设计", "实体提取", "实体消歧", "检索"]
    assert all(m.type == T.SECTION for m in facts.mentions)
    assert [(s.surface, r, o.surface) for s, r, o in facts.relations] == [
        ("实体提取", "part_of", "图谱设计"), ("实体消歧", "part_of", "图谱设计"),
    ]


def test_code_identifiers_get_code_types():
    kinds = typed("The gate lives in knowledge/gate.py and quality_gate.py; call retrieve() or `EntityIndex`. "
                  "Use `knowledge.retrieval` and `pipeline/`; set `top_k`. Next.js renders.")

    assert kinds["knowledgegatepy"] == T.FILE and kinds["qualitygatepy"] == T.FILE
    assert kinds["retrieve"] == T.FUNCTION and kinds["entityindex"] == T.CLASS
    assert kinds["knowledgeretrieval"] == T.MODULE and kinds["pipeline"] == T.MODULE
    assert kinds["topk"] == T.FIELD
    assert kinds["nextjs"] != T.FILE  # a framework's name, not a file
    assert code_type("and/or") is None and code_type("e.g") is None


def test_a_file_contains_the_function_written_after_it():
    text = "**文件**: `app/graphrag/graph_builder.py` → `_extract()`"

    assert Triple("appgraphraggraphbuilderpy", "contains", "extract") in relations(text)


def test_chinese_names_are_typed_as_people_places_and_organisations():
    kinds = typed("北京大学位于北京。鲁迅出生于绍兴。")

    assert kinds["北京大学"] == T.ORGANIZATION and kinds["北京"] == T.PLACE and kinds["鲁迅"] == T.PERSON
    assert {Triple("北京大学", "located_in", "北京"), Triple("鲁迅", "born_in", "绍兴")} <= relations("北京大学位于北京。鲁迅出生于绍兴。")


def test_co_occurrence_pairs_each_name_with_its_next_two_only():
    names = " ".join(["Redis", "Celery", "Docker", "Milvus", "Neo4j", "FAISS"])

    pairs = set(extract(names, DICTIONARY).co_occurrences)

    assert ("celery", "redis") in pairs and ("docker", "redis") in pairs
    assert ("milvus", "redis") not in pairs and len(pairs) <= 2 * 6


def test_a_document_keeps_few_co_occurrences_and_never_more_than_its_stated_relations():
    together = {(1, n): [10, 11] for n in range(2, 8)} | {(2, 3): [10], (4, 5): [12], (6, 7): [12]}
    explicit = {(1, "uses", 2): [10], (4, "calls", 5): [12], (6, "contains", 7): [12], (3, "uses", 4): [11]}

    kept = strongest_cooccurrences(together, explicit, per_entity=2)

    assert len(kept) <= len(explicit)
    assert (1, 2) not in kept and (4, 5) not in kept  # a stated relation already joins them
    degree = {}
    for a, b in kept:
        degree[a] = degree.get(a, 0) + 1
        degree[b] = degree.get(b, 0) + 1
    assert max(degree.values()) <= 2
    assert (1, 3) in kept  # the pairs seen in most chunks first
    assert strongest_cooccurrences(together, {}, per_entity=2) == {}


@pytest.mark.django_db
def test_a_built_graph_is_mostly_stated_relations_and_typed_entities(kb):
    docs = {
        "design.md": "# 1 Retrieval\n\n## 1.1 Gate\n\n"
        "The gate lives in `knowledge/gate.py` and calls `apply_quality_gate()`. GraphRAG uses Redis. "
        "Celery Docker Milvus Neo4j FAISS Qdrant Chroma MinIO RabbitMQ Elasticsearch are named together.\n\n"
        "| field | type |\n| --- | --- |\n| top_k | int |\n| rerank_depth | int |\n\n"
        "## 1.2 图谱\n\nGraphRAG 调用 networkx 计算社区，LightRAG 基于 GraphRAG。",
    }
    ingest(kb, docs)

    build_graph(kb)
    stats = graph_stats(kb)

    assert stats.explicit_relations >= stats.relations - stats.explicit_relations > 0
    assert stats.explicit_share >= 0.5
    co_occurs = Relation.objects.filter(kb=kb, relation="co_occurs")
    assert all(r.weight == Relation.CO_OCCURRENCE < Relation.EXPLICIT for r in co_occurs)
    per_entity: dict[int, int] = {}
    for relation in co_occurs:
        for end in (relation.source_id, relation.target_id):
            per_entity[end] = per_entity.get(end, 0) + 1
    assert max(per_entity.values(), default=0) <= 2
    kinds = dict(Entity.objects.filter(kb=kb).values_list("key", "type"))
    assert kinds["knowledgegatepy"] == T.FILE and kinds["applyqualitygate"] == T.FUNCTION and kinds["topk"] == T.FIELD
    assert kinds["gate"] == T.SECTION
    assert Relation.objects.filter(kb=kb, relation="part_of", source__key="gate", target__key="retrieval").exists()
    assert Relation.objects.filter(kb=kb, relation="calls", source__key="graphrag", target__key="networkx").exists()
    assert stats.concept_share < 0.5
