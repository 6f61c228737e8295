from __future__ import annotations

import time

import jieba
import pytest

from knowledge.tagging import _lexicon, _segment, extract_tags

CHUNK = (
    "混凝土浇筑前应检查模板支撑体系的稳定性，钢筋隐蔽工程验收合格后方可进行下一道工序。"
    "架桥机安装完成后须经特种设备检验机构检测合格，箱梁预制场应设置排水系统。"
    "塔吊基础施工应按照设计图纸执行，并做好沉降观测记录。"
)


def test_it_orders_standards_then_titles_then_terms():
    text = "按照 GB 50204-2015 和《混凝土结构工程施工质量验收规范》执行，采用 HNSW 索引"
    assert extract_tags(text)[:3] == ("GB 50204-2015", "混凝土结构工程施工质量验收规范", "HNSW")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("依据GB50204-2015执行", "GB 50204-2015"),
        ("见 GB/T50502—2009 第 3 章", "GB/T 50502-2009"),
        ("JGJ  33 - 2012 规定", "JGJ 33-2012"),
        ("通过 ISO 9001：2015 认证", "ISO 9001:2015"),
        ("北京地标 DB11/T 1234-2015", "DB11/T 1234-2015"),
        ("城镇道路 CJJ 2-2008", "CJJ 2-2008"),
        ("钢筋 GB/T 1499.2-2018 热轧带肋", "GB/T 1499.2-2018"),
    ],
)
def test_it_normalises_standard_numbers(text, expected):
    assert extract_tags(text)[0] == expected


def test_it_keeps_acronyms_that_only_look_like_standard_codes():
    tags = extract_tags("召回后用 BM25 与 RRF 融合，再建 HNSW 32 索引")
    assert tags[:3] == ("BM25", "RRF", "HNSW")
    assert not any(tag.startswith("BM ") for tag in tags)


def test_it_finds_camel_case_and_hyphenated_terms():
    text = "We orchestrate with LangGraph, rerank with a cross-encoder and store in PostgreSQL."
    tags = extract_tags(text)
    assert tags == ("LangGraph", "cross-encoder", "PostgreSQL")


def test_it_finds_chinese_domain_nouns():
    tags = extract_tags(CHUNK)
    assert {"架桥机", "箱梁", "塔吊", "特种设备"} <= set(tags)


def test_it_drops_generic_words_and_numbers():
    tags = extract_tags("验收标准要求进行相关工作，2024 年完成 12345 项，架桥机验收。")
    assert tags == ("架桥机",)


def test_it_dedupes_case_insensitively():
    tags = extract_tags("《RRF》说明了 RRF 的用法；rrf-fusion 与 rrf-fusion 相同，RRF 再次出现")
    assert [tag.casefold() for tag in tags].count("rrf") == 1
    assert tags.count("rrf-fusion") == 1


def test_it_caps_tags_at_the_limit():
    text = " ".join(f"GB {50000 + i}-2015" for i in range(10))
    assert extract_tags(text, limit=3) == ("GB 50000-2015", "GB 50001-2015", "GB 50002-2015")
    assert len(extract_tags(text + CHUNK)) == 8


def test_it_returns_nothing_for_text_without_terms():
    assert extract_tags("the and of 的 了 是，。") == ()


@pytest.mark.parametrize(
    "run",
    [
        CHUNK.replace("，", "").replace("。", ""),
        "研究生命起源的科学家在南京市长江大桥上讨论结婚的和尚未结婚的问题",
        "深基坑开挖前应编制专项施工方案并组织专家论证",
        "龘靐齉爩鱻麤",  # characters jieba's dictionary does not know
        "桥",
    ],
)
def test_it_segments_chinese_exactly_like_jieba(run):
    # _segment is a faster copy of jieba's no-HMM cut; tags depend on it staying identical.
    assert _segment(run, _lexicon()) == jieba.lcut(run, HMM=False)


def test_it_tags_a_chunk_fast_after_warm_up():
    chunks = [f"{CHUNK}第{i}段，按照 GB 50204-2015 执行，采用 HNSW 索引。" for i in range(300)]
    extract_tags(chunks[0])
    started = time.perf_counter()
    for chunk in chunks:
        extract_tags(chunk)
    per_chunk_ms = (time.perf_counter() - started) * 1000 / len(chunks)
    # The budget is < 1 ms; the assertion leaves room for a busy test machine.
    assert per_chunk_ms < 2.0
