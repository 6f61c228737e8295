from __future__ import annotations

import hashlib
import random

import pytest

from knowledge.chunking import (
    ChildDraft,
    ChunkingParams,
    chunk_document,
    count_tokens,
    split_sentences,
)
from knowledge.parsing import ParsedDocument, Section
from knowledge.tagging import extract_tags

ZH_SENTENCES = [
    "混凝土浇筑前应检查模板支撑体系的稳定性。",
    "钢筋隐蔽工程验收合格后方可进行下一道工序，并留存影像资料。",
    "架桥机安装完成后须经特种设备检验机构检测合格。",
    "箱梁预制场应设置完善的排水系统，雨季施工时加强巡查；",
    "塔吊基础施工应按照设计图纸执行，并做好沉降观测记录！",
    "高处作业人员必须系挂安全带？",
]
EN_SENTENCES = [
    "The retriever fuses dense and sparse results with reciprocal rank fusion.",
    "Each child chunk is embedded on its own, e.g. with a small multilingual model.",
    "Parents carry the full section text so that the answer has enough context.",
    "Version 3.5 of the index stores HNSW graphs with sixteen links per node.",
    "Tags such as GB 50204-2015 are matched with a simple LIKE query!",
]


def _document(*sections: Section) -> ParsedDocument:
    return ParsedDocument("doc", tuple(sections))


def _section(text: str, index: str = "1", title: str = "概述") -> Section:
    return Section(index, title, 1, title, "", text)


def _random_text(sentences: list[str], count: int, paragraph_every: int) -> str:
    """Return `count` sentences drawn with a fixed seed, in paragraphs of `paragraph_every`."""
    rng = random.Random(7)
    picked = [rng.choice(sentences) for _ in range(count)]
    paragraphs = [picked[i : i + paragraph_every] for i in range(0, count, paragraph_every)]
    joiner = "" if sentences[0][-1] in "。！？；" else " "
    return "\n\n".join(joiner.join(paragraph) for paragraph in paragraphs)


def _children(text: str, params: ChunkingParams | None = None) -> list[ChildDraft]:
    parents = chunk_document(_document(_section(text)), params or ChunkingParams())
    return [child for parent in parents for child in parent.children]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("先检查模板。再浇筑混凝土！合格吗？是；", ["先检查模板。", "再浇筑混凝土！", "合格吗？", "是；"]),
        (
            "Use e.g. HNSW. The ratio is 3.5 here. Follow GB 50204-2015. Done! Really?",
            [
                "Use e.g. HNSW.",
                "The ratio is 3.5 here.",
                "Follow GB 50204-2015.",
                "Done!",
                "Really?",
            ],
        ),
        ("他说：“注意安全。”然后离开。", ["他说：“注意安全。”", "然后离开。"]),
        ("No final stop", ["No final stop"]),
    ],
)
def test_it_splits_sentences_keeping_punctuation(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("按照 GB 50204-2015 执行", 7), ("混凝土", 3), ("three English words", 3), ("", 0)],
)
def test_it_counts_cjk_characters_and_latin_words_as_tokens(text, expected):
    assert count_tokens(text) == expected


def _sizes_per_parent(text: str) -> list[list[int]]:
    parents = chunk_document(_document(_section(text)))
    return [[child.token_count for child in parent.children] for parent in parents]


def test_it_keeps_long_chinese_children_within_bounds():
    sizes = _sizes_per_parent(_random_text(ZH_SENTENCES, 400, paragraph_every=9))
    assert sum(map(len, sizes)) > 20
    assert max(map(max, sizes)) <= 400
    # Only a parent's last child holds a remainder and may be short.
    assert min(size for parent in sizes for size in parent[:-1]) >= 200


def test_it_keeps_long_english_children_within_bounds():
    sizes = _sizes_per_parent(_random_text(EN_SENTENCES, 300, paragraph_every=7))
    assert sum(map(len, sizes)) > 10
    assert max(map(max, sizes)) <= 300
    assert min(size for parent in sizes for size in parent[:-1]) >= 150


def test_it_repeats_the_last_sentence_at_the_start_of_the_next_child():
    children = _children(_random_text(ZH_SENTENCES, 120, paragraph_every=40))
    assert len(children) >= 3
    for previous, current in zip(children, children[1:], strict=False):
        assert current.text.startswith(split_sentences(previous.text)[-1])


def test_it_does_not_overlap_when_asked_not_to():
    text = "".join(f"第{i}句说明了一个独立的施工要点，内容各不相同。" for i in range(60))
    children = _children(text, ChunkingParams(overlap_sentences=0))
    assert "".join(c.text for c in children) == text


def test_it_keeps_whole_paragraphs_when_they_fit():
    paragraphs = [f"第{i}段。" + "模板支撑体系检查要点说明" * 10 for i in range(12)]
    children = _children("\n\n".join(paragraphs), ChunkingParams(overlap_sentences=0))
    pieces = [piece for c in children for piece in c.text.split("\n\n")]
    assert pieces == paragraphs


def test_it_hard_splits_a_sentence_longer_than_the_max():
    sentence = "无标点的超长句子" * 150  # 1200 CJK characters, no sentence end
    children = _children(sentence, ChunkingParams(overlap_sentences=0))
    assert all(c.token_count <= 400 for c in children)
    assert "".join(c.text for c in children) == sentence


def test_it_measures_mixed_text_with_english_limits_when_mostly_english():
    text = _random_text(EN_SENTENCES, 200, paragraph_every=6).replace("index", "索引")
    children = _children(text)
    assert max(c.token_count for c in children) <= 300
    assert sum(c.token_count for c in children) / len(children) < 300


def test_it_prefixes_the_section_title_to_the_parent_only():
    parents = chunk_document(_document(_section("模板安装应牢固。\n\n支撑间距不大于 1.2 m。")))
    assert parents[0].text == "概述\n\n模板安装应牢固。\n\n支撑间距不大于 1.2 m。"
    assert parents[0].children[0].text == "模板安装应牢固。\n\n支撑间距不大于 1.2 m。"


def test_it_copies_section_fields_and_numbers_chunks_across_the_document():
    doc = _document(
        Section("", "", 0, "", "", "前言。"),
        Section("2", "施工部署", 1, "施工部署", "", ""),  # heading only: skipped
        Section("2.1", "施工准备", 2, "施工部署", "施工准备", _random_text(ZH_SENTENCES, 60, 5)),
    )
    parents = chunk_document(doc)
    assert [p.index for p in parents] == [0, 1]
    assert (parents[1].section_index, parents[1].section_title) == ("2.1", "施工准备")
    assert (parents[1].chapter_level_1, parents[1].chapter_level_2) == ("施工部署", "施工准备")
    child_indices = [c.index for p in parents for c in p.children]
    assert child_indices == list(range(len(child_indices)))
    assert len(child_indices) > 2


def test_it_splits_a_long_section_into_several_parents_at_paragraph_boundaries():
    paragraphs = [f"第{i}段。" + "施工准备内容" * 30 for i in range(20)]
    params = ChunkingParams(parent_max_chars=1000)
    parents = chunk_document(_document(_section("\n\n".join(paragraphs))), params)
    assert len(parents) > 3
    bodies = [p.text.removeprefix("概述\n\n") for p in parents]
    assert all(p.text.startswith("概述\n\n") for p in parents)
    assert all(len(body) <= 1000 for body in bodies)
    assert [piece for body in bodies for piece in body.split("\n\n")] == paragraphs


def test_it_hashes_token_counts_and_tags_each_chunk():
    text = "按照 GB 50204-2015 和《混凝土结构工程施工质量验收规范》执行，采用 HNSW 索引。"
    parent = chunk_document(_document(_section(text)))[0]
    child = parent.children[0]
    assert child.sha256 == hashlib.sha256(child.text.encode("utf-8")).hexdigest()
    assert parent.sha256 == hashlib.sha256(parent.text.encode("utf-8")).hexdigest()
    assert child.token_count == count_tokens(child.text)
    assert child.tags == extract_tags(child.text)
    assert child.tags[:3] == ("GB 50204-2015", "混凝土结构工程施工质量验收规范", "HNSW")


def test_it_gives_a_parent_the_union_of_its_childrens_tags_capped_at_twelve():
    paragraphs = [f"执行 GB {50000 + i}-2015 的规定。" + "模板支撑检查说明" * 40 for i in range(15)]
    parent = chunk_document(_document(_section("\n\n".join(paragraphs))))[0]
    union = list(dict.fromkeys(tag for child in parent.children for tag in child.tags))
    assert len(union) > 12
    assert parent.tags == tuple(union[:12])


def test_it_returns_no_parents_for_a_document_without_text():
    assert chunk_document(_document(_section("  \n\n "), Section("1", "空", 1, "空", "", ""))) == []
