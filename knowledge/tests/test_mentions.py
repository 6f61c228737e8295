"""Names a question uses that its KB never mentions: which tokens are names, and what counts as mentioned."""

from __future__ import annotations

import pytest
from hypothesis import given

from agentic_rag.tests.linear_time_support import MESSAGE_CHARS, cpu_seconds, linear_time_settings, long_texts
from knowledge.mentions import kb_words, question_names, read_words, unmentioned_names
from knowledge.models import KnowledgeBase
from knowledge.tests.test_retrieval import ingest

SEEDS_LIKE = read_words([
    "流式对话的首 token 延迟目标为 2 秒。文档对话使用 Qwen3.5-122B 模型，配置 POSTGRES_DSN 连接 PostgreSQL。",
    "GraphRAG 用 networkx 构图；LangGraph 编排 RAG Agent。next-show 的 Milvus 混合检索。",
])


@pytest.mark.parametrize(
    ("question", "names"),
    [
        ("What p99 latency does the streaming chat pipeline target?", ["p99"]),
        ("How many GPUs are needed to serve the Qwen3.5-122B model?", ["GPUs", "Qwen3.5-122B"]),
        ("Which graph library does the LangGraph agent use?", ["LangGraph"]),
        ("GraphRAG 社区检测用的 Leiden 算法分辨率参数设为多少？", ["GraphRAG", "Leiden"]),
        ("文档对话的 embedding 维度是多少？", ["embedding"]),  # any Latin word in a Chinese question
        # Ordinary words, a sentence's first word, and values with units are not names.
        ("How much traffic do the three shortcuts save?", []),
        ("Which vector database does document chat search? Where is it configured?", []),
        ("Is the window 4K tokens and the timeout 30s?", []),
        ("Does the pipeline follow the 3rd rule?", []),
        ("How does Postgres store the history?", ["Postgres"]),
        # An English sentence after a Chinese greeting is English: its words are not names.
        ("请问 How does hybrid search fuse the rankings?", []),
        ("请问 How does Postgres store the history?", ["Postgres"]),
    ],
)
def test_it_finds_the_name_like_tokens_of_a_question(question, names):
    assert question_names(question) == names


@pytest.mark.parametrize(
    "name",
    ["Qwen3.5-122B", "qwen3.5-122b", "Postgres", "postgres_dsn", "SQL", "networkx", "LangGraph", "Graph", "Milvus",
     "next-show", "Agents", "GraphRAG", "ＰｏｓｔｇｒｅＳＱＬ"],
)
def test_a_name_the_kb_writes_in_any_case_or_inside_an_identifier_is_mentioned(name):
    assert SEEDS_LIKE.mentions(name)


@pytest.mark.parametrize("name", ["p99", "GPUs", "Leiden", "Redis", "Qwen2"])
def test_a_name_the_kb_never_writes_is_not_mentioned(name):
    assert not SEEDS_LIKE.mentions(name)


def test_an_english_question_in_ordinary_words_over_a_chinese_kb_names_nothing_missing():
    assert unmentioned_names("How much latency does the streaming chat target at first token?", SEEDS_LIKE) == ()
    assert unmentioned_names("What p99 latency does the streaming chat pipeline target?", SEEDS_LIKE) == ("p99",)


@linear_time_settings()
@given(long_texts(MESSAGE_CHARS))
def test_finding_names_takes_linear_time(text):
    _, seconds = cpu_seconds(lambda t: unmentioned_names(t, SEEDS_LIKE), text)
    assert seconds < 0.5


@pytest.mark.django_db
def test_the_kbs_words_are_its_own_and_follow_its_documents(kb, bob):
    bobs = KnowledgeBase.objects.create(slug="bobs", name="Bob's", owner=bob)
    ingest(kb, {"latency.md": "# Latency\n\nThe chat targets two seconds to the first token."})
    ingest(bobs, {"slo.md": "# SLO\n\nThe p99 latency target is 800 ms."})
    kb.refresh_from_db()
    bobs.refresh_from_db()

    assert not kb_words(kb).mentions("p99") and kb_words(bobs).mentions("p99")

    ingest(kb, {"slo.md": "# SLO\n\nOur P99_LATENCY_MS setting is 900."})
    kb.refresh_from_db()

    assert kb_words(kb).mentions("p99")


@pytest.mark.django_db
def test_over_a_chinese_kb_an_english_questions_capitalised_words_are_no_names(kb, bob):
    english = KnowledgeBase.objects.create(slug="english", name="English", owner=bob)
    ingest(kb, {"分词.md": "# 分词\n\n中文文本用 jieba 分词，北京的部署也一样。"})
    ingest(english, {"tokens.md": "# Tokens\n\nText is split into words by a tokenizer."})
    kb.refresh_from_db()
    english.refresh_from_db()
    question = "How is Chinese text split into words for the Beijing deployment?"

    # The Chinese KB writes them 中文 and 北京; an English KB would write them as asked.
    assert unmentioned_names(question, kb_words(kb)) == ()
    assert unmentioned_names(question, kb_words(english)) == ("Chinese", "Beijing")
    assert unmentioned_names("Does the Chinese tokenizer have p99 targets?", kb_words(kb)) == ("p99",)
