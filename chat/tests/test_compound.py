"""Compound questions cut into questions of their own, and questions that ask one thing left whole."""

from __future__ import annotations

import pytest
from hypothesis import given

from agentic_rag.tests.linear_time_support import MESSAGE_CHARS, cpu_seconds, linear_time_settings, long_texts
from chat.pipeline.compound import answer_parts, part_not_found, split_question
from knowledge.analysis import analyze


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        # Two clauses, each a question of its own.
        ("熔断器的失败率阈值是多少？限流用什么算法？", ["熔断器的失败率阈值是多少？", "限流用什么算法？"]),
        ("熔断器的失败率阈值是多少，以及限流用什么算法？", ["熔断器的失败率阈值是多少", "限流用什么算法？"]),
        ("GraphRAG 依赖什么，以及 LightRAG 扩展了什么？", ["GraphRAG 依赖什么", "LightRAG 扩展了什么？"]),
        ("文档状态有哪些？多进程下进度怎么送到浏览器？", ["文档状态有哪些？", "多进程下进度怎么送到浏览器？"]),
        ("分块大小是多少；向量维度是多少？", ["分块大小是多少；", "向量维度是多少？"]),
        # Two questions parted by a comma; "开没开" asks as 是否 would.
        ("文档对话用的是哪个大模型，开没开思考模式？", ["文档对话用的是哪个大模型", "开没开思考模式？"]),
        ("限流用什么算法，熔断器的失败率阈值是多少？", ["限流用什么算法", "熔断器的失败率阈值是多少？"]),
        ("哪些模块依赖 Redis，还有哪些模块依赖 PostgreSQL？", ["哪些模块依赖 Redis", "哪些模块依赖 PostgreSQL？"]),
        (
            "What is the failure threshold of the circuit breaker, and which algorithm does the rate limiter use?",
            ["What is the failure threshold of the circuit breaker", "which algorithm does the rate limiter use?"],
        ),
        ("When does the breaker open, and which algorithm does the rate limiter use?",
         ["When does the breaker open", "which algorithm does the rate limiter use?"]),
        ("What is hybrid search and how does the circuit breaker work?", ["What is hybrid search", "how does the circuit breaker work?"]),
        ("What does Celery use, and which storage does Milvus replace?", ["What does Celery use", "which storage does Milvus replace?"]),
        ("Which broker does Celery use? What does LightRAG extend?", ["Which broker does Celery use?", "What does LightRAG extend?"]),
        ("After how many turns is the memory summarised, and what share of the chat is kept verbatim?",
         ["After how many turns is the memory summarised", "what share of the chat is kept verbatim?"]),
        ("What is the chunk size; what is the vector dimension?", ["What is the chunk size;", "what is the vector dimension?"]),
        # A shared asking word over a list, made explicit for each item.
        ("熔断器和限流器分别是多少", ["熔断器是多少", "限流器是多少"]),
        ("混合检索里向量和 BM25 的权重分别是多少？", ["混合检索里向量的权重是多少？", "BM25 的权重是多少？"]),
        ("知识问答和代码生成分别用多少温度？", ["知识问答用多少温度？", "代码生成用多少温度？"]),
        ("Jaccard 相似度在重排打分和实体消歧里分别是怎么用的？",
         ["Jaccard 相似度在重排打分是怎么用的？", "Jaccard 相似度在实体消歧里是怎么用的？"]),
        ("同一个问题问第二遍时，哪些步骤会因为缓存而变快？缓存保留多久？",
         ["同一个问题问第二遍时，哪些步骤会因为缓存而变快？", "缓存保留多久？"]),
        ("熔断器的失败率阈值和限流器的速率分别是多少？", ["熔断器的失败率阈值是多少？", "限流器的速率是多少？"]),
        ("GraphRAG 和 LightRAG 分别依赖什么？", ["GraphRAG 依赖什么？", "LightRAG 依赖什么？"]),
        # "又" after a subject the clause names itself: a question of its own.
        ("next-show 的 Agent 基于什么框架？新的检索 Agent 设计又基于什么框架？",
         ["next-show 的 Agent 基于什么框架？", "新的检索 Agent 设计又基于什么框架？"]),
        ("网关、缓存和队列各自的超时是多少？", ["网关的超时是多少？", "缓存的超时是多少？", "队列的超时是多少？"]),
        ("对比熔断器和限流器的默认超时", ["熔断器的默认超时", "限流器的默认超时"]),
        ("熔断器和限流器的默认超时有什么区别？", ["熔断器的默认超时", "限流器的默认超时"]),
        ("What are the timeouts of the gateway and the cache respectively?",
         ["What are the timeouts of the gateway?", "What are the timeouts of the cache?"]),
        ("What is the timeout of the gateway and of the cache?",
         ["What is the timeout of the gateway?", "What is the timeout of the cache?"]),
        ("How many retries do the client and the server each allow?",
         ["How many retries do the client allow?", "How many retries do the server allow?"]),
        ("Compare the retry policy of the gateway and the cache",
         ["The retry policy of the gateway", "The retry policy of the cache"]),
    ],
)
def test_a_compound_question_is_cut_into_questions_of_their_own(question, parts):
    assert split_question(question, analyze) == parts


@pytest.mark.parametrize(
    "question",
    [
        # One list, one relation or one comparison without an attribute: one question.
        "What are the benefits and drawbacks of caching?",
        "熔断器和限流器是什么",
        "请求和响应的格式是什么",
        "How do A and B interact?",
        "What is the difference between hybrid search and vector search?",
        "混合检索和向量检索之间的关系是什么",
        "什么是混合检索和向量检索的区别",
        "Which is faster, BM25 or vector search?",
        "What are the read and write paths?",
        "How does the system search and rank documents?",
        "Where and when does the breaker open?",
        "Tell me about Redis and Celery.",
        "What is hybrid search?",
        "熔断器在什么错误率下打开？",
        # A second clause that needs the first: it points back, or says too little alone.
        "熔断器的阈值是多少？超时呢？",
        "熔断器的阈值是多少，它的超时是多少？",
        "上传之后，文档的状态是什么？",
        "熔断器打开以后，请求会不会被拒绝？",
        "What is the breaker's threshold, and is it configurable?",
        "熔断器在什么错误率下打开？请说明原因。",
        "How many chunks does the demo knowledge base hold, and how many of them have distinct text?",
        "Which algorithm finds communities in the graph, and which alternative can still be selected?",
        "默认用哪个模型？还有其他哪些模型可选？",
        "When no keyword rule matches a message, which intent do the chat pipeline and document chat each fall back "
        "to, and does that default lead to a clarifying question?",
        "系统里有哪些地方用到了余弦相似度？各自的用途或阈值是什么？",
        "部署在 nginx 后面时，需要怎样配置才能让 SSE 流正常工作？应用自身又做了什么配合？",
        "熔断器的阈值是多少？它也能配置吗？",
        "熔断器的阈值是多少？限流器也一样吗？",
        "If I ask the chat what the rate limit is, will the metrics tool answer it, and what answer should come back?",
        "After I upload a file, which status does it show, and which event says it is ready?",
        "How do the streaming responses of the main chat endpoint and of the document-chat endpoint differ in their "
        "event names?",
        "聊天流水线和文档对话分别在什么情况下会反问用户？两边的置信度阈值一样吗？",
        "",
        "？？",
    ],
)
def test_a_question_that_asks_one_thing_is_not_cut(question):
    assert split_question(question, analyze) == []


def test_a_part_not_found_is_said_in_the_questions_language():
    assert part_not_found("限流用什么算法？", "熔断器的阈值是多少？限流用什么算法？").startswith("知识库中没有找到")
    assert part_not_found("which ledger?", "What is X, and which ledger?").startswith("Nothing in the knowledge base")


@linear_time_settings(max_examples=40)
@given(message=long_texts(MESSAGE_CHARS))
def test_a_long_message_is_read_in_bounded_time(message):
    parts, seconds = cpu_seconds(lambda text: split_question(text, analyze), message)
    assert isinstance(parts, list)
    assert seconds < 0.25, (seconds, message[:40])


@pytest.mark.parametrize(
    "message",
    [" " * 4000, " ," * 2000, ", " + " " * 3980 + "and what", " , and " * 570, "a and " * 660,
     "what is the x of a and of " * 150, "what is x of a and b " * 190 + "respectively", "和" * 4000, "以及 " * 1300],
)
def test_a_long_run_is_read_once(message):
    parts, seconds = cpu_seconds(lambda text: split_question(text, analyze), message)
    assert seconds < 0.25 and isinstance(parts, list)


def test_an_answer_is_read_back_part_by_part():
    questions = ["When does it open?", "How are the rankings fused?"]
    answer = "(label)\n**1. When does it open?**\n\nAt 10%. [1]\n\n**2. How are the rankings fused?**\n\nBy RRF. [2]"

    parts = answer_parts(answer, questions)

    assert [question for question, _ in parts] == questions
    assert "At 10%. [1]" in parts[0][1] and "(label)" in parts[0][1] and "[2]" not in parts[0][1]
    assert parts[1][1].strip().endswith("By RRF. [2]")
    assert answer_parts(answer[:40], questions) == []  # cut short: read as one answer
