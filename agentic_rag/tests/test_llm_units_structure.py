"""Units keep a text's structure: a lead-in with what it introduces, rows with their header,
key-value lines as facts; headings, drawings and rules are never an answer on their own."""

from __future__ import annotations

import pytest

from agentic_rag.llm.reader import Passage, read
from agentic_rag.llm.units import readable_text, split_units

from .test_llm_reader import answer_of

PROCESSORS = """## 4.3 后处理
检索结果经过 4 个处理器依次执行:
- 去重：按内容哈希去掉重复片段
- 融合：RRF 合并两路排名
- 扩窗：补上相邻片段
- 截断：控制总长度

后处理之后进入提示词组装。"""

LAYOUT = """### 9.1 目录结构
```
server/
│ ├─ router.py
│ │ └─ 质量门控(quality_gate.py)
└─ worker.py
```
---
====
****
路由模块负责把请求分给检索 Worker。"""

FIELDS = """The summary endpoint returns different fields by mode:

```
{"mode": "brief", "text": "..."}
{"mode": "full", "text": "...", "sources": []}
```

Each field is optional."""


def kinds(text: str) -> list[tuple[str, str]]:
    return [(u.kind, u.text) for u in split_units(text)]


def test_a_lead_in_and_the_list_it_introduces_share_a_block():
    units = split_units(PROCESSORS)
    lead = next(u for u in units if u.text.endswith(":"))
    block = [u.text for u in units if u.block == lead.block]
    assert lead.is_lead_in and block[0] == lead.text
    assert block[1:] == ["去重：按内容哈希去掉重复片段", "融合：RRF 合并两路排名", "扩窗：补上相邻片段", "截断：控制总长度"]
    # The paragraph after the blank line is not part of the list.
    assert next(u for u in units if u.text.startswith("后处理之后")).block == -1


def test_a_table_ends_at_its_last_row_so_the_next_lead_in_opens_its_own():
    """Ingested Markdown keeps no blank line between a table and the lead-in under it."""
    text = "请求参数:\n字段 | 类型\n--- | ---\nuser_id | str\nSelectedSection 结构:\n字段 | 说明\n--- | ---\nindex | 章节编号\n注意：字段可选。"
    units = {u.text: u for u in split_units(text)}

    lead = units["SelectedSection 结构:"]
    assert lead.is_lead_in and lead.block != units["请求参数:"].block
    assert units["字段：index，说明：章节编号"].block == lead.block
    assert units["注意：字段可选。"].block == -1


def test_a_number_that_numbers_an_item_stays_with_it():
    assert [u.text for u in split_units("- 1. 迁移目标\n- 2. 核心架构原则\n- (3) 风险")] == ["1. 迁移目标", "2. 核心架构原则", "(3) 风险"]


def test_a_lead_in_takes_the_code_block_after_a_blank_line():
    units = split_units(FIELDS)
    lead = units[0]
    assert lead.is_lead_in
    assert [u.text for u in units if u.block == lead.block][1:] == [
        '{"mode": "brief", "text": "..."}', '{"mode": "full", "text": "...", "sources": []}',
    ]
    assert units[-1].text == "Each field is optional." and units[-1].block == -1


def test_a_line_ending_in_a_colon_with_nothing_after_it_opens_no_block_of_another_section():
    units = split_units("配置如下:\n## 5.1 其他\n另一节的内容。")
    assert [u.block for u in units[1:]] == [-1, -1]
    assert units[1].kind == "heading"


def test_headings_section_numbers_drawings_and_rules_are_not_answers():
    found = kinds(LAYOUT)
    assert ("heading", "9.1 目录结构") in found
    assert ("drawing", "│ │ └─ 质量门控(quality_gate.py)") in found
    assert not any(text in ("---", "====", "****", "") for _, text in found)
    assert [u.is_answer for u in split_units(LAYOUT)][-1] is True
    assert [kind for kind, _ in kinds("7.6 质量门控\n3.2\n第三章 总则")] == ["heading"] * 3
    # A numbered line that says something is a sentence, and a numbered item is an item.
    assert kinds("2.5 秒后重试，最多三次。")[0][0] == "sentence"
    assert kinds("1. 单向依赖: 上层只依赖下层")[0][0] == "item"


def test_a_hash_line_inside_a_fence_is_code_not_a_heading():
    units = split_units("```\n# start the worker\ncelery -A app worker\n```")
    assert [u.kind for u in units] == ["sentence", "sentence"]


def test_key_value_lines_and_rows_name_what_they_state():
    assert [u.key for u in split_units("rrf_k: 60\n参数：rrf_k，值：60\n超时：30 秒")] == ["rrf_k", "rrf_k", "超时"]
    lone = split_units("| rrf_k | 60 |")
    assert [(u.key, u.text) for u in lone] == [("rrf_k", "rrf_k, 60")]
    # Prose with a colon in it is not a key-value line.
    assert split_units("The gate refuses evidence when its score is low: below 0.3 it asks again.")[0].key == ""


def test_rows_are_read_with_their_header():
    text = "| 参数 | 值 | 说明 |\n| --- | --- | --- |\n| rrf_k | 60 | 融合常数 |\n| top_k | 8 | 返回条数 |"
    rows = [u for u in split_units(text) if u.kind == "row"]
    assert [u.text for u in rows] == ["参数：rrf_k，值：60，说明：融合常数", "参数：top_k，值：8，说明：返回条数"]
    assert [u.key for u in rows] == ["rrf_k", "top_k"]


def test_rules_are_left_out_of_the_readable_text_but_headings_and_drawings_stay():
    text = readable_text(LAYOUT)
    assert "9.1 目录结构" in text and "└─ 质量门控" in text
    assert "====" not in text and "****" not in text


def test_a_lead_in_is_quoted_with_the_list_it_introduces():
    body = answer_of("后处理有几个处理器？", ("4.3 后处理", PROCESSORS))
    assert body.startswith("检索结果经过 4 个处理器依次执行:")
    for item in ("去重", "融合", "扩窗", "截断"):
        assert item in body


def test_an_item_is_quoted_with_its_lead_in_and_stays_precise():
    from knowledge.analysis import analyze

    reading = read("扩窗处理器做什么？", [Passage("1", PROCESSORS, 0, "4.3 后处理")], tokenize=analyze)
    texts = [p.unit.text for p in reading.picks]
    assert texts[:2] == ["检索结果经过 4 个处理器依次执行:", "扩窗：补上相邻片段"]
    assert "截断：控制总长度" not in texts


def test_a_long_block_is_quoted_from_its_start_within_the_length_cap():
    items = "\n".join(f"- 第{n}项：这一项说明了处理流程中的一个具体步骤，并给出它的默认参数与适用范围" for n in range(1, 21))
    text = f"处理流程共有二十个步骤:\n{items}"
    reading = read("处理流程共有多少个步骤？", [Passage("1", text, 0, "流程")], tokenize=lambda t: list(t))
    texts = [p.unit.text for p in reading.picks]
    assert texts[0] == "处理流程共有二十个步骤:"
    assert texts[1].startswith("第1项") and len(texts) < 21
    assert sum(len(t) for t in texts) <= 600


@pytest.mark.parametrize(
    ("question", "text"),
    [
        ("质量门控在哪个文件？", "### 7.6 质量门控\n│ │ └─ 质量门控(quality_gate.py)"),
        ("What is in section 3.2?", "## 3.2\n3.2 Quality gate"),
    ],
)
def test_a_heading_or_a_drawing_line_alone_is_never_the_answer(question, text):
    body = answer_of(question, ("结构", text))
    assert "[1]" not in body


def test_a_key_value_line_whose_key_the_question_names_answers_it():
    from knowledge.analysis import analyze

    text = "融合参数说明如下。\nrrf_k: 60\n融合时两路结果按排名倒数相加，参数越大排名差异的影响越小。"
    reading = read("rrf_k 的默认值是多少？", [Passage("1", text, 0, "融合")], tokenize=analyze)
    assert reading.picks[0].unit.text == "rrf_k: 60"


RERANK_NODE = """功能：对检索结果重新排序

实现：

func rerank(results []Result) []Result {
    if len(results) <= 3 {
        return results
    }
    // 重排失败时沿用原来的顺序
    return byModel(results)
}

排序方式：
1. 模型打分：请重排模型给每条结果打分
2. 规则打分：按关键词命中数排序
3. 混合打分：向量分数与模型分数加权"""


def test_lines_of_code_are_code_even_without_their_fences():
    units = {u.text: u for u in split_units(RERANK_NODE)}
    assert units["// 重排失败时沿用原来的顺序"].is_code
    assert units["return results"].is_code  # indented as code
    assert not units["功能：对检索结果重新排序"].is_code


MEMORY_CODE = """文件: app/platform/memory.py

SUMMARY_THRESHOLD = 20 # 轮
# 超过阈值: 前 60% → LLM 摘要, 后 40% → 保留原文
# 上下文窗口: 4K tokens
# keep_recent
"""


def test_comments_under_a_line_of_code_are_comments_not_headings():
    units = {u.text: u for u in split_units(MEMORY_CODE)}
    assert units["上下文窗口: 4K tokens"].kind == "sentence"
    assert not units["上下文窗口: 4K tokens"].is_code  # a comment in words states a fact
    assert units["keep_recent"].is_code
    # A heading after prose, or after a blank line, stays a heading.
    assert split_units("功能说明如下。\n# 会话记忆\n文本")[1].kind == "heading"
    assert split_units("x = 1 # one\n\n# 会话记忆\n文本")[1].kind == "heading"


def test_a_fact_stated_in_a_comment_of_code_answers():
    from knowledge.analysis import analyze

    reading = read("会话记忆的上下文窗口有多大？", [Passage("1", MEMORY_CODE, 0, "会话记忆")], tokenize=analyze)
    assert reading.picks[0].unit.text == "上下文窗口: 4K tokens"


AGENT_STATE = """选择: 继承并扩展现有 GraphState

class RAGAgentState(TypedDict):
    # 继承现有字段
    question: str
    generation: str
    # Agent 特有字段
    tool_calls: list[ToolCall]
    should_continue: bool"""


def test_a_comment_in_words_heads_the_lines_of_code_under_it_up_to_the_next():
    units = {u.text: u for u in split_units(AGENT_STATE)}
    first, second = units["# 继承现有字段"], units["# Agent 特有字段"]
    assert first.is_lead_in and second.is_lead_in and not first.is_code
    assert units["generation: str"].block == first.block != second.block
    assert units["tool_calls: list[ToolCall]"].block == units["should_continue: bool"].block == second.block


def test_a_list_question_gets_the_comment_and_the_lines_it_heads():
    body = answer_of("RAGAgentState 新增了哪些 Agent 特有字段？", ("Decision 4: Agent State 设计", AGENT_STATE))
    assert "tool_calls" in body and "should_continue" in body and "generation" not in body


CLASS_DECLARED = """选择: 统一的 Memory 接口，内部包含三种记忆类型

class RAGAgentMemory:
    async def get_session_summary(project_id) -> str

理由:
- 封装复杂性，对 RAG Agent 暴露简单接口"""


@pytest.mark.parametrize("question", ["RAG Agent 的记忆接口类叫什么？", "Which class is the RAG agent's memory interface?"])
def test_a_question_for_a_class_name_is_answered_by_the_line_that_declares_it(question):
    body = answer_of(question, ("Memory 模块设计", CLASS_DECLARED))
    assert "class RAGAgentMemory" in body


def test_a_declaration_is_still_code_to_a_question_that_asks_no_name():
    body = answer_of("RAG Agent 的记忆模块为什么统一接口？", ("Memory 模块设计", CLASS_DECLARED))
    assert "class RAGAgentMemory" not in body


def test_a_list_question_answered_by_one_item_gets_the_lead_in_and_the_whole_list():
    from knowledge.analysis import analyze

    reading = read("重排有哪几种排序方式？混合打分怎么算？", [Passage("1", RERANK_NODE, 0, "Rerank 节点")], tokenize=analyze)
    texts = [p.unit.text for p in reading.picks]
    assert texts[0] == "排序方式："
    assert {"模型打分：请重排模型给每条结果打分", "规则打分：按关键词命中数排序", "混合打分：向量分数与模型分数加权"} <= set(texts)
    assert not any(t.startswith("//") for t in texts)


RETRY = """LLM 限流重试

问题: 模型接口返回 429 Too Many Requests。
解决: 最多重试 3 次，间隔逐次变长:

for attempt in range(3):
reply = await call_model(prompt)
if "429" in reply.error:
await asyncio.sleep(2 ** attempt + 1)  # 2s, 3s, 5s
continue"""


def test_code_lines_ending_in_a_colon_stay_in_the_block_of_their_lead_in():
    units = split_units(RETRY)
    lead = next(u for u in units if u.is_lead_in)
    assert lead.text == "解决: 最多重试 3 次，间隔逐次变长:"
    members = [u.text for u in units if u.block == lead.block][1:]
    assert members[0] == "for attempt in range(3):" and members[-1] == "continue"
    assert [u for u in units if u.is_lead_in] == [lead]


def test_a_lead_in_to_code_is_quoted_with_the_code():
    body = answer_of("限流时最多重试几次，间隔怎么变？", ("2.7 LLM 限流重试", RETRY))
    assert "解决: 最多重试 3 次，间隔逐次变长:" in body and "# 2s, 3s, 5s" in body


MEMORY_SETTINGS = ("会话记忆", "压缩比: 10:1\n上下文窗口: 4K tokens\n摘要格式: 用户咨询了XX,结论是YY")


def test_an_amount_is_not_taken_from_lines_that_do_not_name_what_the_question_asks_about():
    body = answer_of("长期记忆的数据保留多少天？", ("长期记忆", "长期记忆存放在向量库中，按用户隔离。"), MEMORY_SETTINGS)
    assert "没有" in body and "[2]" not in body


def test_an_amount_said_where_its_subject_is_named_answers():
    body = answer_of("会话记忆的上下文窗口有多大？", MEMORY_SETTINGS)
    assert "4K tokens[1]" in body


def test_a_word_the_tokenizer_splits_into_characters_names_the_subject():
    from agentic_rag.llm.coverage import Quoted, speaks_of
    from knowledge.analysis import analyze

    assert speaks_of("子块大概多大？", Quoted("中文约 200–400 个汉字", "子块"), analyze)
    assert not speaks_of("子块大概多大？", Quoted("全局 QPS: 1000", "限流"), analyze)


STAGES = """1. **String Recall**: 精确/包含/Jaccard/编辑距离/缩写 (阈值 0.3)
2. **Vector Rerank**: embedding cosine 重排 (阈值 0.75)
3. **NIL Detection**: 低于 0.5 → 新实体"""


def test_a_list_under_a_heading_or_opening_a_passage_is_one_block_without_a_lead_in():
    under = split_units(f"### 3.1 实体消歧三阶段\n{STAGES}\n后面的说明。")
    items = [u for u in under if u.kind == "item"]
    assert len({u.block for u in items}) == 1 and items[0].block >= 0
    assert not any(u.is_lead_in for u in under)
    assert under[-1].block == -1  # prose after the list is not part of it
    opening = split_units(STAGES)  # a chunk of the list alone: its heading is the section's title
    assert len({u.block for u in opening}) == 1 and opening[0].block >= 0
    # Prose right under a heading opens no block.
    assert [u.block for u in split_units("## 概述\n第一句。\n第二句。")[1:]] == [-1, -1]


def test_a_list_question_is_answered_by_the_whole_list_under_the_heading_that_names_it():
    from knowledge.analysis import analyze

    other = "特性：实体消歧 (3 阶段)，参考项目：graph-rag-agent，实现文件：entity_disambiguation.py"
    reading = read(
        "实体消歧分为哪三个阶段？",
        [Passage("1", STAGES, 0, "3.1 实体消歧三阶段"), Passage("2", other, 1, "参考项目")],
        tokenize=analyze,
    )
    texts = [p.unit.text for p in reading.picks]
    assert [t.split(":")[0] for t in texts[:3]] == ["String Recall", "Vector Rerank", "NIL Detection"]


def test_an_item_of_a_headings_list_that_ends_in_a_colon_introduces_the_items_under_it():
    text = "### 6.6 Agent 合同\n- 目录：agents/\n- 返回结构：\n  - context: str\n  - reference: dict"
    units = {u.text: u for u in split_units(text)}
    lead = units["返回结构："]
    assert lead.is_lead_in
    assert units["context: str"].block == units["reference: dict"].block == lead.block
    assert units["目录：agents/"].block not in (-1, lead.block)
