"""The offline extractive provider: quotes, citations, disclaimer, zh/en, streaming."""

from __future__ import annotations

import re

import pytest

from agentic_rag.llm import CompletionOptions, ExtractiveProvider, Message
from agentic_rag.llm.coverage import Quoted, asked_names, lacks_fact
from agentic_rag.llm.extractive import DISCLAIMER, NO_EVIDENCE, find_evidence, find_question, find_question_terms
from agentic_rag.llm.units import split_sentences

OPTIONS = CompletionOptions()
EN_DOCUMENTS = """<documents>
<document id="1" source="pipeline.md">The pipeline has eight stages. Stage one loads the conversation memory.
Shortcuts skip stages when the answer is already clear.</document>
<document id="2" source="breaker.md" score="0.82">The circuit breaker opens when the failure rate exceeds 10%.
After 5 minutes it becomes half-open &amp; sends a probe. Version 3.5 added the probe.</document>
</documents>"""
ZH_DOCUMENTS = """<documents>
<document id="7">熔断器在失败率超过10%时打开。五分钟后进入半开状态！半开时发送探测请求。</document>
<document id="8">流水线共有八个阶段。第一阶段加载会话记忆。</document>
</documents>"""


def conversation(documents: str, question: str) -> list[Message]:
    system = f"Answer only from the documents. Cite them as [n].\n{documents}"
    return [
        Message("system", system),
        Message("user", "Hi"),
        Message("assistant", "Hello!"),
        Message("user", question),
    ]


def quoted_sentences(answer: str) -> list[tuple[str, str]]:
    """(sentence, doc id) pairs of an answer's body, its disclaimer line removed."""
    body = answer.split("\n\n", 1)[1]
    return [(text.strip(), doc_id) for text, doc_id in re.findall(r"(.+?)\s?\[(\w+)\]", body)]


def source_texts(messages: list[Message]) -> dict[str, str]:
    return {evidence.doc_id: evidence.text for evidence in find_evidence(messages)}


def test_it_quotes_the_sentences_that_answer_the_question_with_citations():
    messages = conversation(EN_DOCUMENTS, "When does the circuit breaker open?")
    answer = ExtractiveProvider().complete(messages, OPTIONS).text
    quotes = quoted_sentences(answer)
    assert quotes[0] == ("The circuit breaker opens when the failure rate exceeds 10%.", "2")
    assert all(doc_id in {"1", "2"} for _, doc_id in quotes)


@pytest.mark.parametrize(
    ("documents", "question"),
    [
        (EN_DOCUMENTS, "How many stages does the pipeline have, and what does the breaker probe?"),
        (ZH_DOCUMENTS, "熔断器什么时候打开？半开状态做什么？"),
    ],
)
def test_it_quotes_verbatim_so_quote_verification_passes(documents, question):
    messages = conversation(documents, question)
    answer = ExtractiveProvider().complete(messages, OPTIONS).text
    sources = source_texts(messages)
    quotes = quoted_sentences(answer)
    assert len(quotes) >= 2
    for sentence, doc_id in quotes:
        assert sentence in sources[doc_id]


def test_it_unescapes_the_xml_of_the_evidence_before_quoting():
    messages = conversation(EN_DOCUMENTS, "What happens after 5 minutes, half-open?")
    answer = ExtractiveProvider().complete(messages, OPTIONS).text
    assert "After 5 minutes it becomes half-open & sends a probe. [2]" in answer


def test_it_opens_with_the_disclaimer_in_the_question_language():
    provider = ExtractiveProvider()
    english = provider.complete(conversation(ZH_DOCUMENTS, "When does the breaker open?"), OPTIONS).text
    chinese = provider.complete(conversation(ZH_DOCUMENTS, "熔断器什么时候打开？"), OPTIONS).text
    assert english.splitlines()[0] == DISCLAIMER["en"]
    assert chinese.splitlines()[0] == DISCLAIMER["zh"]
    assert "熔断器在失败率超过10%时打开。[7]" in chinese


@pytest.mark.parametrize(("question", "language"), [("What is RRF?", "en"), ("什么是RRF？", "zh")])
def test_it_says_it_has_no_evidence_when_the_prompt_has_none(question, language):
    answer = ExtractiveProvider().complete([Message("user", question)], OPTIONS).text
    assert answer == f"{DISCLAIMER[language]}\n\n{NO_EVIDENCE[language]}"


def test_it_says_plainly_that_nothing_answers_instead_of_quoting_noise():
    answer = ExtractiveProvider().complete(conversation(EN_DOCUMENTS, "xyzzy?"), OPTIONS).text
    assert "None of the passages found answers this question directly" in answer
    assert "[1]" not in answer and "[2]" not in answer
    assert "eight stages" not in answer


DESIGN_DOCUMENTS = """<documents kb="Design docs">
<document id="1" doc="architecture.md" section="4.2 熔断">三态熔断器:</document>
<document id="2" doc="routing.md" section="6 模型路由">模型路由按优先级选择供应商。</document>
</documents>"""


@pytest.mark.parametrize(
    ("question", "says"),
    [("熔断器是如何工作的？", "知识库「Design docs」中没有找到直接回答这个问题的内容。最接近的段落：architecture.md § 4.2 熔断；routing.md § 6 模型路由。"),
     ("xyzzy?", "Not found in the knowledge base “Design docs”: none of its passages answers this question directly. "
                "The closest passages: architecture.md § 4.2 熔断; routing.md § 6 模型路由.")],
)
def test_not_found_names_the_knowledge_base_and_the_closest_passages_instead_of_quoting_a_fragment(question, says):
    # "三态熔断器:" names the breaker and introduces a list the passage lacks: it answers nothing.
    answer = ExtractiveProvider().complete(conversation(DESIGN_DOCUMENTS, question), OPTIONS).text

    assert answer.split("\n\n", 1)[1] == says
    assert "[1]" not in answer and "三态熔断器:" not in answer


AMOUNT_DOCUMENTS = """<documents kb="Design docs">
<document id="1" doc="memory.md" section="5 记忆">对话超过 20 轮后生成摘要，原文保留最近 40%。</document>
<document id="2" doc="retention.md" section="6 长期记忆">长期记忆存储在 mem0 中，按用户隔离，按策略写入和召回。</document>
<document id="3" doc="context.md" section="7 上下文">会话记忆的上下文窗口为 4K tokens。</document>
<document id="4" doc="release.md" section="1 版本">本设计为 v2 版本，替代旧的 workflow。</document>
</documents>"""


@pytest.mark.parametrize(
    ("question", "quoted"),
    [("对话超过多少轮后生成摘要？", "20 轮"), ("会话记忆的上下文窗口有多大？", "4K tokens"),
     ("本设计是哪个版本？", "v2 版本")],
)
def test_a_question_asking_an_amount_or_a_version_is_answered_by_a_quote_holding_one(question, quoted):
    answer = ExtractiveProvider().complete(conversation(AMOUNT_DOCUMENTS, question), OPTIONS).text

    assert quoted in answer
    assert "没有找到" not in answer


@pytest.mark.parametrize("question", ["mem0 长期记忆的数据保留多久？", "How many days is mem0 long-term memory kept?"])
def test_a_question_asking_an_amount_is_not_found_when_no_quote_holds_one(question):
    # The sentence about mem0's long-term memory speaks of the subject but states no duration:
    # quoting it would read as an answer.
    answer = ExtractiveProvider().complete(conversation(AMOUNT_DOCUMENTS, question), OPTIONS).text

    assert "retention.md § 6 长期记忆" in answer
    assert "[2]" not in answer and "按策略写入和召回" not in answer


def _latency_documents(target: str) -> str:
    return f"""<documents kb="Design docs">
<document id="1" doc="slo.md" section="6 Targets">The streaming chat targets {target}.</document>
</documents>"""


def test_a_question_naming_a_metric_no_passage_mentions_is_not_found():
    # "p99" is what it asks about; a sentence about the median latency is not its answer.
    question = "What p99 latency does the streaming chat target?"
    refused = ExtractiveProvider().complete(conversation(_latency_documents("a median latency of 300 ms"), question), OPTIONS).text
    answered = ExtractiveProvider().complete(conversation(_latency_documents("a P99 latency of 800 ms"), question), OPTIONS).text

    assert "Not found" in refused and "[1]" not in refused
    assert "a P99 latency of 800 ms. [1]" in answered


def test_quotes_answering_one_part_of_a_compound_question_are_not_refused_for_the_other():
    quotes = [Quoted("长期记忆存储在 mem0 中，按用户隔离。")]
    assert lacks_fact("mem0 的数据保留多久？", quotes)
    assert not lacks_fact("长期记忆存储在哪里，保留多久？", quotes)


def test_a_clause_saying_where_the_question_asks_is_not_a_part_quotes_answer_instead():
    langfuse = [Quoted("特性：Langfuse 可观测性，参考项目：RAGLight，实现文件：observability.py")]
    assert lacks_fact("Agentic RAG 系统接入 Langfuse 做可观测性时，trace 的采样率设成多少？", langfuse)
    # Two parts that each ask are still read apart: one answered is not none.
    assert not lacks_fact("Langfuse 的实现文件是哪个，采样率设成多少？", langfuse)


def test_a_port_an_amount_in_seconds_or_a_vector_dimension_asked_needs_a_number_in_the_quotes():
    mem0 = [Quoted("状态类型：长期记忆，存储位置：mem0（已部分落地，可选启用）")]
    assert lacks_fact("GraphRAG Agent 里可选的 mem0 长期记忆服务默认跑在哪个端口上？", mem0)
    assert lacks_fact("Which host port does the postgres service publish?", [Quoted("否则使用：POSTGRES_HOST/POSTGRES_PORT")])
    assert not lacks_fact("Which port does the backend listen on?", [Quoted('sock.bind(("::", 5050))')])
    assert lacks_fact("What per-node timeout, in seconds, does the pipeline set?", [Quoted("每个节点按固定顺序执行。")])
    assert not lacks_fact("What per-node timeout, in seconds, does the pipeline set?", [Quoted("节点超时：30 秒")])
    assert lacks_fact("What embedding dimension do the collections use?", [Quoted("集合名：t_kngs_child，用途：精确定位")])


def test_a_vector_dimension_is_a_whole_number_not_a_weight():
    weight = [Quoted("路径：父文档向量，权重：1.0，描述：dense+sparse 混合搜索父表")]
    assert lacks_fact("What embedding vector dimension do the parent collections use?", weight)
    assert lacks_fact("父表的向量维度是多少？", weight)
    assert not lacks_fact("What embedding vector dimension do the parent collections use?", [Quoted("dense 向量：dim=1024")])


def test_a_port_stands_alone_not_inside_a_model_name_or_a_percentage():
    stack = [Quoted("技术栈: FastAPI + Milvus(向量数据库) + Redis + 蜀天云 Qwen3.5-122B，余弦占 35%")]
    assert lacks_fact("Which port does the Milvus vector database listen on?", stack)
    assert not lacks_fact("Which port does the backend listen on?", [Quoted("Route Handler → FastAPI (:5050)")])
    assert not lacks_fact("向量维度是多少？", [Quoted("embedding 维度：1024维")])


def test_the_number_of_something_asks_for_a_number():
    question = "What is the maximum number of tool calls per request?"
    assert lacks_fact(question, [Quoted("Tool 调用策略: 是否需要限制单次请求的最大 tool calls 次数？")])
    assert not lacks_fact(question, [Quoted("单次请求最多 10 次 tool calls")])


def test_a_rate_asked_for_needs_a_percentage_a_fraction_or_a_ratio_not_a_count():
    golden = [Quoted("Golden Dataset (20 题, 16 类目): 关键词匹配")]
    assert lacks_fact("最近一次 Golden Dataset 评估的关键词通过率是多少？", golden)
    assert not lacks_fact("最近一次 Golden Dataset 评估的关键词通过率是多少？", [Quoted("关键词通过率 85%")])
    assert not lacks_fact("trace 的采样率设成多少？", [Quoted("采样率：0.1")])
    assert not lacks_fact("What compression ratio does the summary reach?", [Quoted("LLM 异步摘要 (10:1 压缩比)")])


def test_a_names_release_is_not_the_amount_a_question_asks_for():
    version = [Quoted("组件：图谱，选型：networkx 3.6，理由：内存图操作 + 社区检测")]
    assert lacks_fact("社区检测算法的分辨率参数设为多少？", version)
    assert not lacks_fact("图谱用的是哪个库？", version)  # asks no amount
    # A value below 1 after a name reads as the value it more often is; a unit makes it an amount.
    assert not lacks_fact("How much does BM25 weigh?", [Quoted("Fusion weighs vectors 0.7 and BM25 0.3.")])
    assert not lacks_fact("How long is the timeout?", [Quoted("The probe waits timeout 5.5s before giving up.")])


def test_a_who_question_needs_a_person_role_or_team_in_the_quotes():
    design = [Quoted("RouterGraph 输出 worker_name（三段）：{kb_prefix}:{agent_type}:{agent_mode}")]
    assert lacks_fact("Router 到 Worker 的迁移出问题时由哪个团队负责回滚？", design)
    assert lacks_fact("Who approved the router design?", design)
    assert not lacks_fact("Who wrote the router design?", [Quoted("作者: System Architect")])
    assert not lacks_fact("哪个团队维护 RouterGraph？", [Quoted("RouterGraph 由检索团队维护。")])
    # Over prose, "谁" asks for a person's name, which no pattern tells from other words.
    assert not lacks_fact("谁创立了这家公司？", [Quoted("张三在 1998 年创立了这家公司。")])
    # "who" inside a clause asks no person.
    assert not lacks_fact("What does a user who uploads a file see?", [Quoted("The upload row shows its progress.")])


def test_a_who_question_with_no_one_named_in_its_passages_is_not_found():
    documents = """<documents kb="Design docs">
<document id="1" doc="router.md" section="Router">The router sends each question to a worker by kb_prefix.</document>
</documents>"""
    refused = ExtractiveProvider().complete(conversation(documents, "Who approved the router design?"), OPTIONS).text
    assert "Not found" in refused and "[1]" not in refused


def test_it_quotes_a_tool_result_whole_and_first_though_it_shares_no_word():
    documents = """<documents>
<document id="1" doc="datetime" source="TOOL">Current time Asia/Tokyo: 2026-11-25 03:35:33 (Wednesday, UTC+0900)
Current time Europe/Paris: 2026-11-24 19:35:33 (Tuesday, UTC+0100)</document>
<document id="2" doc="guide.md">东京的办公室九点开门。</document>
</documents>"""
    answer = ExtractiveProvider().complete(conversation(documents, "现在东京和巴黎几点？"), OPTIONS).text
    assert "没有直接回答" not in answer
    assert quoted_sentences(answer)[:3] == [
        ("Current time Asia/Tokyo: 2026-11-25 03:35:33 (Wednesday, UTC+0900)", "1"),
        ("Current time Europe/Paris: 2026-11-24 19:35:33 (Tuesday, UTC+0100)", "1"),
        ("东京的办公室九点开门。", "2"),
    ]


def test_a_document_only_says_it_is_a_tool_result_in_its_source_attribute():
    documents = '<documents><document id="1" doc="a.md">source="TOOL" is just text here.</document></documents>'
    answer = ExtractiveProvider().complete(conversation(documents, "xyzzy?"), OPTIONS).text
    assert "None of the passages found answers" in answer


def test_it_answers_identically_every_time():
    messages = conversation(EN_DOCUMENTS, "What does stage one load, and when does the breaker open?")
    answers = {ExtractiveProvider().complete(messages, OPTIONS).text for _ in range(3)}
    streamed = {"".join(ExtractiveProvider().stream(messages, OPTIONS)) for _ in range(3)}
    assert len(answers) == 1
    assert streamed == answers


def test_it_streams_english_word_by_word():
    pieces = list(
        ExtractiveProvider().stream(conversation(EN_DOCUMENTS, "When does the breaker open?"), OPTIONS)
    )
    assert len(pieces) > 10
    assert all(len(piece.split()) == 1 for piece in pieces if piece.strip())


def test_it_streams_chinese_a_few_characters_at_a_time():
    pieces = list(ExtractiveProvider().stream(conversation(ZH_DOCUMENTS, "熔断器什么时候打开？"), OPTIONS))
    chinese = [piece for piece in pieces if re.fullmatch(r"[\u4e00-\u9fff]+", piece)]
    assert len(chinese) > 10
    assert all(len(piece) <= 2 for piece in chinese)


def test_it_uses_the_tokenizer_it_is_given():
    # A tokenizer that knows "trips" means "opens" finds the breaker sentence.
    def synonyms(text: str) -> list[str]:
        return [{"trips": "opens"}.get(word, word) for word in re.findall(r"\w+", text.lower())]

    messages = conversation(EN_DOCUMENTS, "trips?")
    plain = ExtractiveProvider().complete(messages, OPTIONS).text
    tuned = ExtractiveProvider(synonyms).complete(messages, OPTIONS).text
    assert "None of the passages found answers" in plain
    assert quoted_sentences(tuned)[0][0] == "The circuit breaker opens when the failure rate exceeds 10%."


def test_it_reads_the_question_element_and_ignores_evidence_in_the_user_turn():
    user = f"{EN_DOCUMENTS}\n<question>What does stage one load?</question>"
    answer = ExtractiveProvider().complete([Message("user", user)], OPTIONS).text
    assert quoted_sentences(answer)[0] == ("Stage one loads the conversation memory.", "1")


def test_it_wraps_its_answer_as_json_when_asked():
    messages = conversation(EN_DOCUMENTS, "When does the breaker open?")
    data = ExtractiveProvider().complete_json(messages, OPTIONS, '"answer": string')
    assert data["answer"].startswith(DISCLAIMER["en"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Version 3.5 shipped. See example.com for more! Next?",
            ["Version 3.5 shipped.", "See example.com for more!", "Next?"],
        ),
        (
            "第一句。第二句！第三句？第四句；“引号。”结尾",
            # "；" joins clauses of one sentence: they stay together
            ["第一句。", "第二句！", "第三句？", "第四句；“引号。”", "结尾"],
        ),
    ],
)
def test_it_splits_chinese_and_english_sentences(text, expected):
    assert split_sentences(text) == expected


def test_the_knowledge_bases_name_is_read_from_the_documents_opening_in_linear_time():
    import time

    from agentic_rag.llm.extractive import find_kb_name

    assert find_kb_name([Message("user", DESIGN_DOCUMENTS)]) == "Design docs"
    started = time.process_time()
    assert find_kb_name([Message("user", "<documents " * 20_000)]) == ""
    assert time.process_time() - started < 0.5  # searched from every opening, it takes seconds


TEMPERATURES = """<documents kb="Seeds">
<document id="3" source="pipeline.md" section="动态温度">- 知识问答: 0.1
- 摘要总结: 0.3
- 代码生成: 0.2
- 创意写作: 0.7</document>
</documents>"""
CODE_QUESTION = "What temperature is used when generating code?"


def _asked_with(terms: str) -> list[Message]:
    opening = f'<question terms="{terms}">' if terms else "<question>"
    return [Message("system", "Answer from the documents."), Message("user", f"{TEMPERATURES}\n{opening}{CODE_QUESTION}</question>")]


def test_the_questions_words_in_the_documents_language_pick_the_unit_that_states_them():
    # The chat passes an English question's words in the KB's Chinese (knowledge.lexicon) as the
    # terms of <question>: a Chinese line shares no English word with the question otherwise.
    reader = ExtractiveProvider()

    with_terms = quoted_sentences(reader.complete(_asked_with("代码生成 温度"), OPTIONS).text)
    without = reader.complete(_asked_with(""), OPTIONS).text

    assert with_terms and with_terms[0] == ("代码生成: 0.2", "3")
    assert "代码生成: 0.2" not in without


def test_the_terms_are_read_from_the_question_element_and_not_taken_for_the_question():
    messages = _asked_with("代码生成 &quot;温度&quot;")

    assert find_question(messages) == CODE_QUESTION
    assert find_question_terms(messages) == '代码生成 "温度"'
    assert find_question_terms(conversation(EN_DOCUMENTS, "When does the breaker open?")) == ""


@pytest.mark.parametrize(
    ("question", "names"),
    [
        ("文档对话系统为什么选择 Kafka 作为消息队列？", ["Kafka"]),
        ("next-show 的 worker_name 是什么？", ["next-show", "worker_name"]),
        ("Heuco在西班牙语中是什么意思？", ["Heuco"]),  # written against the Chinese words
        ("How does document chat handle scanned PDFs?", ["PDF"]),
        ("Which RabbitMQ queue does LangGraph use?", ["RabbitMQ", "LangGraph"]),
        ("What p99 latency does the gate target?", ["p99"]),
        # A capitalised word is not a name: the first word of a question, or the asker's emphasis.
        ("Which Title weight does the Reranker use?", []),
        # English inside a Chinese question is read as English: "rankings" names nothing.
        ("请问 How does hybrid search fuse the rankings?", []),
    ],
)
def test_the_names_a_question_asks_about_are_acronyms_inner_capitals_and_latin_words_in_chinese(question, names):
    assert asked_names(question) == names


def test_a_line_of_code_that_opens_a_block_is_a_statement_not_a_lead_in():
    from agentic_rag.llm.coverage import is_fragment

    assert not is_fragment('async for mode, payload in workflow.astream(state, stream_mode=["updates", "custom"]):')
    assert not is_fragment('if stream or response_mode == "sse":')
    assert is_fragment("使用 LangGraph 的双流模式同时接收两种数据:")  # a lead-in waits for its block
    assert is_fragment("The ingestion task moves a document through these states:")
