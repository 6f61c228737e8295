"""A Markdown .txt upload is read as Markdown, and a lead-in stays in the chunk of what it introduces."""

from __future__ import annotations

import pytest

from knowledge.chunking import ChunkingParams, chunk_document
from knowledge.parsing import heading_lines, parse_document
from knowledge.parsing.markdown import looks_like_markdown

MARKDOWN_TXT = """设计说明

# 检索服务设计

## 1. 概览
检索服务把请求分给两路召回。

## 2. 后处理
处理器依次执行:

```
去重 → 融合 → 扩窗 → 截断
```

| 参数 | 值 |
| --- | --- |
| rrf_k | 60 |
"""


def outline(name: str, text: str) -> list[tuple[str, str, str, str]]:
    return [(s.index, s.title, s.chapter_level_1, s.chapter_level_2) for s in parse_document(name, text.encode()).sections]


def test_a_txt_file_written_in_markdown_gets_the_sections_of_a_md_file():
    assert outline("design.txt", MARKDOWN_TXT) == outline("design.md", MARKDOWN_TXT)
    sections = parse_document("design.txt", MARKDOWN_TXT.encode()).sections
    assert [(s.title, s.level) for s in sections if s.title] == [("检索服务设计", 0), ("概览", 1), ("后处理", 1)]
    assert sections[-1].chapter_level_1 == "后处理"
    # Fences and the table's rule are Markdown, not text.
    assert "```" not in sections[-1].text and "--- | ---" not in sections[-1].text
    assert heading_lines("design.txt", MARKDOWN_TXT) == heading_lines("design.md", MARKDOWN_TXT)


@pytest.mark.parametrize(
    "text",
    [
        "# 只有一个井号行\n正文第一段。\n\n正文第二段。",  # one "#" line
        "1 Setup\nRun the installer.\n2 Use\nAsk a question.",  # numbered plain text
        "a | b\nc | d",  # pipes without a rule row
        "用 ``` 包住代码。\n这是普通文本。",  # one fence mark
    ],
)
def test_plain_text_is_not_taken_for_markdown(text):
    assert not looks_like_markdown(text)


def test_a_numbered_plain_text_keeps_its_numbered_headings():
    text = "1 Setup\nRun the installer.\n2 Use\nAsk a question."
    assert [s.title for s in parse_document("notes.txt", text.encode()).sections] == ["Setup", "Use"]


@pytest.mark.parametrize(
    "text",
    ["## A\nx\n## B\ny", "Run:\n```\nmake run\n```", "name | value\n--- | ---\nk | 60"],
)
def test_markdown_is_recognised_by_headings_fences_or_a_table_rule(text):
    assert looks_like_markdown(text)


def test_a_rule_under_a_sentence_is_a_rule_not_a_heading():
    text = "## 概览\n系统返回回答或直接修改文档内容。\n---\n## 架构\n两层结构。"
    assert [s.title for s in parse_document("d.md", text.encode()).sections] == ["概览", "架构"]
    assert [s.title for s in parse_document("d.md", b"Intro\n\nShort Title\n---\nBody.").sections] == ["", "Short Title"]


def test_a_lead_in_paragraph_stays_in_the_chunk_of_the_block_it_introduces():
    filler = "。".join(["检索服务按配置执行每个阶段并记录耗时"] * 12) + "。"
    code = "\n".join(f"mode={mode}: text, sources, score" for mode in ("brief", "full", "debug", "trace"))
    text = f"## 输出\n{filler}\n\n接口按模式输出不同字段:\n\n```\n{code}\n```"
    doc = parse_document("api.md", text.encode())
    # Parents are cut without overlap: a cut after the lead-in would leave it saying nothing.
    params = ChunkingParams(parent_max_chars=len(filler) + 40)
    parents = [p.text for p in chunk_document(doc, params)]
    assert len(parents) == 2
    holder = next(p for p in parents if "不同字段:" in p)
    assert "mode=trace: text, sources, score" in holder


def test_document_chat_reads_and_rewrites_the_sections_of_a_markdown_txt():
    """Document chat reads a stored document's sections through knowledge.editing: a Markdown
    .txt gets its headings' sections, each with its body as written, and one can be rewritten."""
    from knowledge.editing import file_sections, replace_section

    sections = file_sections("design.txt", MARKDOWN_TXT.encode())
    assert [(s.title, s.chapter_level_1) for s in sections if s.level == 1] == [("概览", "概览"), ("后处理", "后处理")]
    overview = next(s for s in sections if s.title == "概览")
    assert overview.source.strip() == "检索服务把请求分给两路召回。"

    new_data, _ = replace_section("design.txt", MARKDOWN_TXT.encode(), overview.position, "检索服务只走一路召回。")
    assert file_sections("design.txt", new_data)[overview.position].text == "检索服务只走一路召回。"
    assert "## 2. 后处理\n处理器依次执行:" in new_data.decode()
