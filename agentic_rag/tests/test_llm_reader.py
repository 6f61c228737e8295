"""The offline reader: units of evidence, the answer it picks, and when it says nothing answers."""

from __future__ import annotations

import dataclasses

import pytest

from agentic_rag.llm import CompletionOptions, ExtractiveProvider, Message
from agentic_rag.llm.extractive import simple_tokenize
from agentic_rag.llm.reader import Passage, addresses_question, expected_answer_types, read
from agentic_rag.llm.units import is_code_like, readable_text, split_units, text_language

RERANK_TABLE = """The five-factor scorer orders candidates.
factor | weight | meaning
cosine | 35% | query-chunk vector similarity
key-term ratio | 25% | share of query tokens found in the chunk
title | 20% | query terms in the document name"""


def answer_of(question: str, *documents: tuple[str, str]) -> str:
    """The extractive answer's body for documents given as (section, text), numbered from 1."""
    elements = "".join(
        f'<document id="{n}" doc="d{n}.md" section="{section}">{text}</document>'
        for n, (section, text) in enumerate(documents, 1)
    )
    messages = [Message("user", f"<documents>{elements}</documents><question>{question}</question>")]
    return ExtractiveProvider().complete(messages, CompletionOptions()).text.split("\n\n", 1)[1]


def test_it_writes_each_table_row_with_its_header_and_drops_the_header_row():
    units = split_units(RERANK_TABLE)
    rows = [u.text for u in units if u.kind == "row"]
    assert rows[0] == "factor: cosine, weight: 35%, meaning: query-chunk vector similarity"
    assert not any(u.text.startswith("factor | weight") or u.text == "factor, weight, meaning" for u in units)
    assert {u.table for u in units if u.kind == "row"} == {0}


def test_a_table_cut_from_its_header_keeps_its_rows_without_naming_them():
    rows = [u.text for u in split_units("7 | 07-api.md | en\n8 | 08-deployment.md | zh")]
    assert rows == ["7, 07-api.md, en", "8, 08-deployment.md, zh"]


def test_it_strips_markdown_and_splits_list_items():
    text = "## Setup\n- Run **make run** first.\n- See [the guide](https://x.example/guide) and `manage.py ask`."
    assert [u.text for u in split_units(text)] == [
        "Setup", "Run make run first.", "See the guide and manage.py ask.",
    ]
    assert "https://" not in readable_text(text)


def test_inline_code_keeps_its_text_as_written():
    text = "The tests include these attacks: `__import__`, `a**b` and **huge** powers."
    assert readable_text(text) == "The tests include these attacks: __import__, a**b and huge powers."
    # Ingestion has taken the ticks away already: a dunder name is still not bold text.
    assert readable_text("Attacks: __import__ and __bold words__.") == "Attacks: __import__ and bold words."
    assert readable_text("Edit __init__.py, then __save it__.") == "Edit __init__.py, then save it."


@pytest.mark.parametrize(
    ("line", "is_code"),
    [
        ("curl -N -X POST http://127.0.0.1:8000/api/chat/stream \\", True),
        ('-d \'{"message": "hi", "kb": "docs"}\'', True),
        (".venv/bin/python manage.py ingest docs/ --kb docs", True),
        ('{"message": "...", "session_id": "..."}', True),
        ("Over a limit, HTTP answers 429 Too Many Requests with a Retry-After header.", False),
        ("默认 RRF 融合（k=60），也可用加权融合（向量 0.7 / BM25 0.3）。", False),
    ],
)
def test_it_tells_commands_and_code_from_prose(line, is_code):
    assert is_code_like(line) is is_code


@pytest.mark.parametrize(
    ("question", "kind"),
    [("混合检索的权重是多少？", "number"), ("How many stages are there?", "number"),
     ("多久过期？", "time"), ("哪些文件格式可以上传？", "list"), ("What is the gate's threshold?", "threshold"),
     ("知识问答时大模型用什么温度？", "number"), ("Which temperature does code generation use?", "number"),
     ("需要什么版本的 Python？", "version"), ("Which Django version does it run on?", "version"),
     ("实体消歧分为哪三个阶段？", "list"), ("What fields does the result hold?", "list"),
     ("Which design principles does the module structure follow?", "list")],
)
def test_it_knows_what_kind_of_fact_a_question_asks_for(question, kind):
    assert kind in expected_answer_types(question)


def test_what_with_an_auxiliary_asks_for_no_list():
    assert "list" not in expected_answer_types("What does the gate return?")
    assert "list" not in expected_answer_types("What is the default top_k?")
    # A plural after an adjective asks for a list only before its verb: "which web framework
    # handles requests" names one framework.
    assert "list" not in expected_answer_types("Which web framework handles requests?")


def test_it_answers_from_the_row_that_holds_the_fact_not_the_header():
    body = answer_of("What is the weight of the cosine factor?", ("6.1 Five-factor scorer", RERANK_TABLE))
    # Under its section's title, which names the scorer the row belongs to.
    assert body.startswith("**Five-factor scorer**  \nfactor: cosine, weight: 35%")
    assert "factor | weight" not in body


def test_a_how_question_answered_by_a_table_gets_the_whole_table():
    body = answer_of("How does the five-factor scorer rank candidates?", ("6.1 Five-factor scorer", RERANK_TABLE))
    assert "35%" in body and "25%" in body and "20%" in body


def test_a_table_in_another_passage_does_not_displace_the_units_that_say_more_of_the_question():
    weights = """The five-factor reranker weighs each candidate.
factor | weight | meaning
cosine | 35% | embedding similarity
key-term ratio | 25% | share of query tokens found
normalised score | 15% | the fused score scaled to 0-1
overlap | 5% | Jaccard overlap"""
    search = "searchKnowledge runs the hybrid search of the knowledge base.\nvector_weight: 0.7,\nbm25_weight: 0.3,"
    question = "In the Go pipeline's search step, how are the vector and BM25 scores weighted?"

    body = answer_of(question, ("Reranker", weights), ("Search node", search))

    assert "vector_weight: 0.7" in body and "bm25_weight: 0.3" in body
    assert "35%" not in body  # a row of the reranker's table may join them, not the whole table


def test_a_comment_heading_a_group_of_fields_reads_with_the_class_declared_above_it():
    code = """class ReviewState(TypedDict):
    # 继承现有字段
    question: str
    documents: list[Document]
    # Review 特有字段
    reviewer_notes: list[str]
    approval_score: float"""

    body = answer_of("ReviewState 在原来的 state 之外新增了哪些 Review 字段？", ("Decision 4: Review State 设计", code))

    # The second group names the class no less than the first, which merely follows its line.
    assert body.split("  \n", 1)[1].startswith("# Review 特有字段")
    assert "reviewer_notes" in body and "approval_score" in body


def test_it_skips_a_command_line_and_a_sentence_that_repeats_the_question():
    text = (
        "How do I ask a question from the shell?\n"
        "manage.py ask \"What is RRF?\" --kb docs\n"
        "The ask command runs one question through the chat pipeline and prints the answer with its citations."
    )
    body = answer_of("How do I ask a question from the shell?", ("CLI", text))
    assert body.startswith("The ask command runs one question")
    assert "manage.py ask" not in body


def test_it_quotes_the_command_when_the_question_asks_for_one():
    text = "Ingest a folder with one command.\nmanage.py ingest docs/ --kb handbook --recursive"
    assert "manage.py ingest docs/" in answer_of("Which command ingests a folder?", ("CLI", text))


def test_a_number_question_prefers_the_sentence_with_a_number():
    text = (
        "The RRF constant smooths the ranks of both legs and is shared by every fusion path. "
        "RRF uses the constant k = 60."
    )
    assert answer_of("What is the RRF constant?", ("Fusion", text)).startswith("RRF uses the constant k = 60.")


def test_it_prefers_the_top_evidence_when_two_say_the_same():
    same = "The breaker opens when the failure rate exceeds 10%."
    body = answer_of("When does the breaker open?", ("A", same), ("B", same))
    assert body == f"{same} [1]"


def test_it_says_nothing_answers_when_no_unit_covers_the_question():
    body = answer_of("What is the boiling point of ethanol?", ("Fusion", "RRF uses the constant k = 60."))
    assert body.startswith("None of the passages found answers this question directly")
    assert "[1]" not in body


def test_the_section_title_counts_for_its_units():
    # The FAQ's answer shares no word with the question; its section title is the question.
    passages = [Passage("1", "字节完全相同时报告为 unchanged，什么都不写入。", 0, "2.4 同一个文件上传两次会怎样？")]
    reading = read("同一个文件上传两次会怎样？", passages, tokenize=simple_tokenize)
    assert reading.picks and reading.picks[0].unit.text.startswith("字节完全相同")


def test_a_question_heading_answers_with_its_body_over_a_sentence_that_shares_the_words():
    # An FAQ's body need not repeat its heading's words, which a sentence elsewhere holds all of.
    passages = [
        Passage("1", "Each stage of the chat pipeline emits events; 2 of them run in parallel.", 0, "3 Events"),
        Passage("2", "8: S1 memory, S2 rewrite, S3 intent, S4 guide, S5 system, S6 search, S7 prompt, S8 stream.", 1,
                "4.1 How many stages does the chat pipeline have?"),
    ]
    reading = read("How many stages does the chat pipeline have?", passages, tokenize=simple_tokenize)
    assert reading.picks[0].unit.text.startswith("8: S1 memory")


def test_the_document_name_tells_which_of_two_alike_answers_the_question_means():
    passages = [
        Passage("1", "Intent confidence below 0.7 means clarify.", 0, "Shortcuts", "04-chat-pipeline.md"),
        Passage("2", "Confidence below 0.65 means clarify.", 0, "Two layers", "12-document-chat.md"),
    ]
    reading = read("Below which confidence does document chat ask to clarify?", passages, tokenize=simple_tokenize)
    assert reading.picks[0].doc_id == "2"


def test_a_question_heading_that_asks_something_else_counts_only_half():
    # "How are chat sessions deleted?" shares two words with the question but does not ask it.
    passages = [
        Passage("1", "Its messages and summaries go with it.", 0, "How are chat sessions deleted?"),
        Passage("2", "Workers keep no state; the session store holds it between turns.", 0, "Workers"),
    ]
    reading = read("Does each chat session get its own worker instance?", passages, tokenize=simple_tokenize)
    assert [pick.doc_id for pick in reading.picks] == ["2"]


def test_a_heading_phrased_as_the_same_kind_of_question_does_not_make_its_body_an_answer():
    passages = [
        Passage("1", "三种：private、shared、public。", 0, "1.2 知识库的可见性有哪几种？"),
        Passage("2", "模式：KB，条件：只有知识库证据。", 1, "7.1 提示词模式"),
    ]
    reading = read("提示词有哪几种模式？", passages, tokenize=simple_tokenize)
    assert reading.picks[0].doc_id == "2"


def test_of_two_units_that_answer_alike_it_quotes_the_one_in_the_questions_language():
    english, chinese = "Who reads a private knowledge base?", "谁读取私有知识库？"
    translations = {english: chinese, chinese: english}
    passages = [
        Passage("1", "所有者读取私有知识库。", 0),
        Passage("2", "The owner reads a private knowledge base.", 0),
    ]

    def picked(question: str) -> str:
        expand = lambda text: [text, translations[text]]  # noqa: E731
        return read(question, passages, tokenize=simple_tokenize, expand=expand).picks[0].doc_id

    assert picked(english) == "2"
    assert picked(chinese) == "1"


def test_a_long_reference_table_near_the_top_does_not_replace_the_best_answer():
    rows = "\n".join(f"field{i} | shown in the interface, level {i}" for i in range(8))
    passages = [
        Passage("1", f"field | meaning\n{rows}", 0, "Fields of a golden question"),
        Passage("2", "Each shortcut gets an amber card.", 0, "Cards"),
    ]
    reading = read("How are shortcuts shown in the interface?", passages, tokenize=simple_tokenize)
    assert reading.picks[0].unit.text == "Each shortcut gets an amber card."


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("A private knowledge base is read by its owner only.", "en"),
        ("要求：python3 3.11 及以上。", "zh"),
        ("pending → parsing → chunking → embedding → indexing → ready；任一阶段出错则为 failed，文档行写明原因。", "zh"),
        ("generic words such as 验收, 标准 are filtered out before tag matching.", "en"),
    ],
)
def test_text_language(text, language):
    assert text_language(text) == language


@pytest.mark.parametrize(
    ("sentence", "addresses"),
    [
        ("The breaker opens when the failure rate exceeds 10%.", True),
        ("The pipeline has 8 stages.", False),  # shares nothing with the question
        ("When does the breaker open?", False),  # only repeats it
    ],
)
def test_a_sentence_addresses_a_question_when_it_shares_its_content_and_adds_to_it(sentence, addresses):
    assert addresses_question("When does the breaker open?", sentence, simple_tokenize) is addresses


def test_a_bare_yes_or_no_stays_with_the_sentence_that_explains_it():
    units = [u.text for u in split_units("不能。加密 PDF 会单独失败。Yes. It works offline.")]
    assert units == ["不能。加密 PDF 会单独失败。", "Yes. It works offline."]


def test_a_run_in_heading_stays_with_the_sentence_it_names():
    text = "- **Charts.** Retrieval metrics over the newest 12 runs. Click a bar.\n\n**维护。** 必须保持 autovacuum 开启。其余照常。"
    assert [u.text for u in split_units(text)] == [
        "Charts. Retrieval metrics over the newest 12 runs.", "Click a bar.", "维护。必须保持 autovacuum 开启。", "其余照常。",
    ]
    # Only a line's first sentence can be one; a sentence of three words or more is a sentence.
    assert [u.text for u in split_units("The breaker opens. It stays open. Half open.")] == [
        "The breaker opens.", "It stays open.", "Half open.",
    ]


def test_a_json_line_is_data_not_prose():
    assert is_code_like('"failed": [{"path": "bad.pdf", "error": "PDF is encrypted"}]}')


def test_sentences_do_not_end_inside_brackets():
    text = "子块约 200–400 个汉字，按句末标点（。！？ 及英文句号等）切分。相邻子块有重叠。"
    assert [u.text for u in split_units(text)] == [
        "子块约 200–400 个汉字，按句末标点（。！？ 及英文句号等）切分。", "相邻子块有重叠。",
    ]


def test_sentences_do_not_end_inside_a_markup_tag_but_do_after_a_comparison_or_an_arrow():
    rule = 'Must use <cite doc_id="..." quote="...">...</cite> for citations. Never invent one.'
    assert [u.text for u in split_units(rule)] == [
        'Must use <cite doc_id="..." quote="...">...</cite> for citations.', "Never invent one.",
    ]
    assert [u.text for u in split_units("Latency stays <500ms. Then a > b. Done.")] == [
        "Latency stays <500ms.", "Then a > b.", "Done.",
    ]


def test_asked_for_an_environment_variable_it_answers_with_the_one_for_the_subject():
    text = (
        "Secrets such as SECRET_KEY are read from environment variables only.\n"
        "check | rule\nsize | at most MAX_UPLOAD_MB (default 50 MB)"
    )
    body = answer_of("Which environment variable sets the upload size limit?", ("4.3 Uploads", text))
    assert body.startswith("check: size, rule: at most MAX_UPLOAD_MB")


def test_each_part_of_a_compound_question_gets_its_answer():
    text = "The breaker opens when 10% of calls fail. After five minutes it lets one probe through."
    body = answer_of("When does the breaker open, and what happens after five minutes?", ("Breaker", text))
    assert "10%" in body and "probe" in body


def test_a_heading_is_not_quoted_as_the_answer():
    answer = answer_of(
        "Which tokenizer does the keyword leg use for Chinese?",
        ("Keyword leg (BM25)", "2. Keyword leg (BM25)"),
        ("Tokenisation", "The keyword leg cuts Chinese text with jieba in search mode."),
    )

    assert "jieba" in answer and "Keyword leg (BM25) [1]" not in answer


def test_a_temperature_question_is_answered_by_the_value_not_by_talk_about_the_model():
    from knowledge.analysis import analyze  # the chat's tokenizer (jieba), as the pipeline reads

    passages = [
        Passage("2", "知识库的设置里可以指定优先使用的模型，或要求回答总是摘录原文、不用模型。", 1, "没有配置大模型也能用吗？"),
        Passage("1", "知识问答 0.1；代码生成 0.2；摘要总结 0.3；创意写作 0.7。", 0, "动态温度"),
    ]

    reading = read("知识问答时大模型用什么温度？", passages, tokenize=analyze)

    assert reading.picks and reading.picks[0].unit.text.startswith("知识问答 0.1")


def test_a_version_question_is_answered_by_the_version_of_a_name_written_with_its_number():
    from knowledge.analysis import analyze

    passages = [
        Passage(
            "1", "要求：`python3` 3.11 及以上。`make run` 依次完成：\n\n1. 用 `python3` 创建 `.venv`；\n"
            "2. 安装 `requirements.txt` 中精确锁定版本的依赖；\n3. 执行数据库迁移（`migrate`）；", 0, "2.1 make run",
        ),
    ]

    reading = read("跑 make run 需要什么版本的 Python？", passages, tokenize=analyze)

    assert reading.picks and "3.11" in reading.picks[0].unit.text


def test_a_sentence_that_points_back_is_quoted_with_the_sentence_it_points_to():
    text = (
        "Paragraphs become documents under --format squad. "
        "This suits Chinese extractive QA sets such as CMRC 2018."
    )
    body = answer_of("Which import format suits Chinese extractive QA sets like CMRC 2018?", ("SQuAD", text))

    assert body.startswith("Paragraphs become documents under --format squad. [1] This suits")


def test_a_sentence_that_names_its_subject_is_quoted_alone():
    text = "Paragraphs become documents. SQuAD suits Chinese extractive QA sets such as CMRC 2018."
    body = answer_of("Which format suits Chinese extractive QA sets like CMRC 2018?", ("SQuAD", text))

    assert body == "SQuAD suits Chinese extractive QA sets such as CMRC 2018. [1]"


def test_a_chinese_question_is_answered_from_an_english_passage_that_holds_its_translated_terms():
    from knowledge.analysis import analyze
    from knowledge.fusion import expand_query

    text = (
        "Louvain modularity groups the entities. "
        "A community of more than 40 members is split once more into level-1 communities."
    )
    passages = [Passage("1", text, 0, "Detection", "05-graphrag.md")]
    question = "请问一个社区在超过多少个成员的时候会再一次被拆成下一级的子社区呢？"
    reading = read(question, passages, tokenize=analyze, expand=expand_query)

    assert reading.picks and "40 members" in reading.picks[0].unit.text


def test_a_number_written_out_answers_a_how_many_question():
    text = (
        "Sixteen nodes make up the workflow: validate_input, load_context, route_intent and the rest. "
        "Each of the workflow's nodes logs 3 fields."
    )
    body = answer_of("How many nodes does the workflow have?", ("Graph", text))

    assert body.startswith("Sixteen nodes")


def test_prose_after_a_command_is_a_unit_of_its_own():
    line = "`python manage.py evaluate --kb SLUG --mode hybrid`，指标包括 nDCG@10、Recall@5、MRR@10。"
    units = split_units(line)

    assert [(u.text, u.is_code) for u in units] == [
        ("python manage.py evaluate --kb SLUG --mode hybrid", True),
        ("指标包括 nDCG@10、Recall@5、MRR@10。", False),
    ]
    body = answer_of("评估的指标包括哪些？", ("怎么评估检索效果？", line))
    assert body.startswith("指标包括 nDCG@10")


SQUAD = ("4.2 SQuAD format", "Paragraphs become documents; each question gets its own paragraph. "
         "This suits Chinese extractive QA sets such as CMRC 2018.")


def test_the_section_title_leads_the_answer_when_it_names_what_the_quoted_units_leave_unsaid():
    from chat.pipeline.citations import find_citations
    from chat.rendering import render_markdown

    body = answer_of("Which import format suits a Chinese extractive QA set such as CMRC 2018?", SQUAD)

    assert body.startswith("**SQuAD format**  \nParagraphs become documents; each question gets its own paragraph. [1]")
    # On a line of its own: the citation quotes the unit, which is in the source, not the title.
    assert [c.quote for c in find_citations(body)][0] == "Paragraphs become documents; each question gets its own paragraph."
    assert "<strong>SQuAD format</strong><br" in render_markdown(body)


@pytest.mark.parametrize(
    ("section", "why"),
    [
        ("2.5 Which formats can be imported?", "a question heading only repeats the question"),
        ("4.2 Reading", "about nothing the question asks"),
        ("4.2 Format of paragraphs", "says nothing the question and the quoted units do not"),
    ],
)
def test_a_section_title_is_not_shown_when_it_adds_nothing(section, why):
    body = answer_of("Which import format suits a Chinese extractive QA set such as CMRC 2018?", (section, SQUAD[1]))

    assert body.startswith("Paragraphs become documents"), why


def test_a_sentence_that_repeats_the_question_but_points_back_answers_it():
    """"This suits … CMRC 2018" holds no word the question lacks but "This", which its sentence
    before says: it is not an echo of the question, and wins over a passage that only names things."""
    other = ("7 Measured", "The KB holds CMRC2018 dev and cranfield-beir, written out with manage.py bench corpus "
             "and loaded with manage.py import_dataset --format beir.")
    body = answer_of("Which import format suits a Chinese extractive QA set such as CMRC 2018?", other, SQUAD)

    assert "This suits Chinese extractive QA sets such as CMRC 2018. [2]" in body
    assert body.startswith("**SQuAD format**")


RETRIES = ("10.3 重试", "情形 | 行为\n--- | ---\n401 / 403 | 立即失败，不重试\n429 | 依次等待 2 s、3 s、5 s\n其他错误 | 指数退避")
RATE_LIMITS = ("7 Rate limits", "Over a limit, HTTP answers 429 Too Many Requests with a Retry-After header.")


def test_a_table_row_keeps_its_first_cell_as_its_key():
    assert [u.key for u in split_units(RERANK_TABLE) if u.kind == "row"] == ["cosine", "key-term ratio", "title"]


def test_the_row_whose_key_the_question_names_answers_it_in_either_language():
    from knowledge.analysis import analyze
    from knowledge.fusion import expand_query

    passages = [Passage(str(n), text, n, section) for n, (section, text) in enumerate([RETRIES, RATE_LIMITS])]

    def picked(question: str) -> list[str]:
        return [pick.unit.text for pick in read(question, passages, tokenize=analyze, expand=expand_query).picks]

    # A "how" question answered by a row gets its whole table, in order.
    assert "情形：429，行为：依次等待 2 s、3 s、5 s" in picked("How does the LLM layer retry when a provider answers 429?")
    # The keyed row is quoted without crowding out what would have joined it (which opens the
    # answer, in the question's language).
    assert picked("What does the LLM layer do when a provider answers 429?") == [
        RATE_LIMITS[1], "情形：429，行为：依次等待 2 s、3 s、5 s",
    ]


def test_a_row_is_keyed_by_its_cell_under_a_column_of_names_too():
    """A stage table numbers its rows (S2) and names them in a column of its own: the question
    names the row by that name."""
    from knowledge.analysis import analyze
    from knowledge.fusion import expand_query

    prose = ("Pipeline", "Query Rewrite runs before intent detection and after memory.")
    stages = ("Stages", "stage | name | target\n--- | --- | ---\nS2 | Query Rewrite | <500ms\nS3 | Intent | <1s")
    caches = "缓存 | TTL\n--- | ---\nQuery Rewrite | 1h"
    passages = [Passage(str(n), text, n, section) for n, (section, text) in enumerate([prose, stages])]

    assert [u.name for u in split_units(stages[1]) if u.kind == "row"] == ["Query Rewrite", "Intent"]
    assert [u.name for u in split_units(caches) if u.kind == "row"] == [""]  # its first cell is its key
    picks = read("What does Query Rewrite aim for?", passages, tokenize=analyze, expand=expand_query).picks
    assert picks[0].unit.text == "stage: S2, name: Query Rewrite, target: <500ms"


def test_a_documents_title_frames_its_passages_where_it_tells_them_apart():
    """Files named by a hash say nothing; the title says the document is about document chat.
    "设计文档", which two of the titles end with, tells no document apart."""
    from knowledge.analysis import analyze

    model = "AI 功能统一用 qwen3_5_122b 模型,关闭思考。"
    other = "Prompt 构建时用历史消息和模型配置组装 JSON。"
    titled = [
        Passage("1", other, 0, "Prompt", "001_9f3.md", "Agent 编排说明"),
        Passage("2", model, 1, "模型配置", "002_a04.md", "文档对话功能设计文档"),
        Passage("3", "迁移分三个阶段完成。", 2, "迁移", "003_b1.md", "路由迁移设计文档"),
    ]

    def first(question: str, passages: list[Passage]) -> str:
        return read(question, passages, tokenize=analyze).picks[0].unit.text

    untitled = [dataclasses.replace(p, title="") for p in titled]
    assert first("文档对话用的是哪个模型？", untitled) == other
    assert first("文档对话用的是哪个模型？", titled) == model
    assert first("设计文档里用的是哪个模型？", titled) == other


def test_a_key_is_named_only_as_written():
    """"a selected section" does not name the request field selected_section, nor "4290" the 429 row."""
    fields = ("2 Request", "field | meaning\n--- | ---\nselected_section | the section's code\nmessage | the instruction")
    prose = ("1 Rewriting", "A rewrite of the selected section comes back as a proposal shown as a word-level diff.")

    body = answer_of("How does document chat rewrite a selected section?", fields, prose)

    assert body.startswith("A rewrite of the selected section comes back as a proposal")
    assert "2 s、3 s" not in answer_of("Does the LLM layer retry when a provider answers 4290?", RETRIES)


NODES = ("5.2 图结构与节点", "共 16 个节点:\n序号 | 节点名 | 功能\n--- | --- | ---\n"
         "1 | validate_input | 校验输入\n6 | build_retrieval_query | 构建检索查询和关键词\n"
         "7 | vector_recall | 四路向量召回\n16 | complete | 标记工作流完成")
STATE = ("5.1 状态定义", "DocumentChatState 是一个 TypedDict,包含 28 个字段,覆盖整个工作流生命周期:\n"
         "分类 | 字段\n--- | ---\n输入 | user_id, user_message\n控制 | current_stage, warnings")


@pytest.mark.parametrize("question", ["文档对话工作流的第 7 个节点是什么？", "Which is the 7th node of the workflow?"])
def test_the_row_numbered_as_the_question_asks_answers_it(question):
    from knowledge.analysis import analyze
    from knowledge.fusion import expand_query

    passages = [Passage("1", NODES[1], 0, NODES[0])]
    picks = read(question, passages, tokenize=analyze, expand=expand_query).picks

    assert max(picks, key=lambda pick: pick.score).unit.text == "序号：7，节点名：vector_recall，功能：四路向量召回"


def test_a_lone_number_in_a_question_does_not_key_a_row():
    """"7 个节点" counts nodes; only an ordinal (第 7 个, 7th, step 7) picks the row numbered 7."""
    from knowledge.analysis import analyze

    passages = [Passage("1", NODES[1], 0, NODES[0])]
    picks = read("工作流的 7 个节点是什么？", passages, tokenize=analyze).picks

    assert max(picks, key=lambda pick: pick.score).unit.text != "序号：7，节点名：vector_recall，功能：四路向量召回"


def test_a_lead_in_quoted_with_its_table_answers_how_many():
    """The count is in the lead-in, the table below it lists what is counted."""
    body = answer_of("DocumentChatState 有多少个字段？", STATE)

    assert "包含 28 个字段" in body
    assert "没有找到" not in body


def test_a_lead_in_that_only_opens_a_list_states_no_amount():
    """"上线检查共 3 项:" holds a number, but not what "熔断器多少秒后半开" asks."""
    checks = ("9 上线", "熔断器上线检查共 3 项:\n- 开关已打开\n- 告警已配置\n- 日志已接入")

    body = answer_of("熔断器多少秒后进入半开？", checks)

    assert "没有直接回答" in body and "共 3 项" not in body


def test_a_list_question_is_answered_by_the_lead_in_of_the_table_it_names():
    request = ("3.2 主端点", "请求参数:\n字段 | 类型 | 说明\n--- | --- | ---\nuser_id | str | 用户标识\n"
               "selected_section | dict | 选中的章节信息\nSelectedSection 结构:\n字段 | 说明\n--- | ---\n"
               "index | 章节编号\ntitle | 章节标题\ncontent | 章节文本")

    from knowledge.analysis import analyze

    passages = [Passage("1", request[1], 0, request[0])]
    picks = [pick.unit.text for pick in read("SelectedSection 结构包含哪些字段？", passages, tokenize=analyze).picks]

    assert picks[0] == "SelectedSection 结构:"
    assert "字段：index，说明：章节编号" in picks and not any("用户标识" in text for text in picks)


def test_a_lead_in_and_the_code_block_it_introduces_read_as_one_unit_for_a_list_question():
    events = ("4.2 流式", "事件会被 stream_events.py:normalize_stream_event() 归一化为稳定结构，供 React 消费：\n"
              "```\n{\"status\":\"start\"}\n{\"status\":\"progress\",\"content\":{}}\n{\"status\":\"token\"}\n"
              "{\"status\":\"done\"}\n```")
    server = ("2.1 服务层", "server 层产出事件后再经 SSE 输出，前端按事件类型渲染")

    from knowledge.analysis import analyze

    passages = [Passage("1", events[1], 0, events[0]), Passage("2", server[1], 1, server[0])]
    picks = [pick.unit.text for pick in read("SSE 流式事件经过归一化后，status 字段有哪些取值？", passages, tokenize=analyze).picks]

    assert picks[0].startswith("事件会被") and '{"status":"done"}' in picks


def test_an_example_a_lead_in_introduces_is_no_list_of_what_is_asked():
    example = ("10.2 过滤", "Milvus 过滤表达式示例:\n```\nplan_type == '桥梁' and chapter_level_1 == '施工部署'\n```")
    collections = ("10.1 集合结构", "集合名 | 粒度 | 用途\n--- | --- | ---\nt_kngs_construction_plan_child | 子文档 | 精确定位\n"
                   "t_kngs_construction_plan_parent | 父文档 | 主要内容存储")

    from knowledge.analysis import analyze

    passages = [Passage("1", example[1], 0, example[0]), Passage("2", collections[1], 1, collections[0])]
    picks = [pick.unit.text for pick in read("What are the Milvus collections for construction plans called?", passages,
                                             tokenize=analyze).picks]

    assert picks[0].startswith("集合名：t_kngs_construction_plan_child") and not any("示例" in text for text in picks)


def test_a_glossary_row_answers_what_its_term_is_not_every_question_naming_the_term():
    glossary = ("附录 术语表", "术语 | 说明\n--- | ---\nSSE | Server-Sent Events，服务器推送事件\nGraph | 图结构，用于编排流程")
    stream = ("5.3 流式输出", "SSE 输出层：发送 start/done，心跳帧 : ping，客户端忽略即可")

    from knowledge.analysis import analyze

    passages = [Passage("1", glossary[1], 0, glossary[0]), Passage("2", stream[1], 1, stream[0])]

    def picks(question: str) -> list[str]:
        return [pick.unit.text for pick in read(question, passages, tokenize=analyze).picks]

    assert any("ping" in text for text in picks("What heartbeat frame does the server send over SSE?"))
    assert picks("SSE 是什么？")[0].startswith("术语：SSE")


def test_a_table_of_contents_is_never_quoted():
    contents = ("目录", "- 1. 迁移目标\n- 2. 核心架构原则\n  - 2.1 设计原则与分层")
    principles = ("1.3 四层模块分层", "设计原则:\n1. 单向依赖: 上层只依赖下层\n2. 接口隔离: 层间通过接口通信")

    body = answer_of("有哪些核心架构设计原则？", contents, principles)

    assert "单向依赖" in body and "迁移目标" not in body and "[1]" not in body


def test_an_faq_entry_that_asks_a_narrower_form_of_the_question_answers_it():
    from knowledge.analysis import analyze

    demo = ("9.3 演示知识库", "make run 会创建演示知识库，并把 docs/ 中的这些文档摄取进去，因此可以直接在对话中询问本文中的任何数值。"
            "文档在网页中可以删除。对话中的回答带引用。")
    faq = ("2.5 文档状态有哪些？", "依次为 pending、parsing、chunking、embedding、indexing、ready；任一阶段出错则为 failed。进度实时推送。")
    passages = [Passage(str(n), text, n, section) for n, (section, text) in enumerate([demo, faq])]

    reading = read("文档在摄取过程中会经历哪些状态？", passages, tokenize=analyze)

    assert reading.picks[0].unit.text.startswith("依次为 pending")
    # A heading of one term is too broad to be the question ("文档有哪些？").
    broad = [passages[0], Passage("1", faq[1], 1, "2.5 文档有哪些？")]
    assert not read("文档在摄取过程中会经历哪些状态？", broad, tokenize=analyze).picks[0].unit.text.startswith("依次为")


GO_SEARCH_NODE = """功能：执行知识检索

```go
func searchKnowledge(ctx context.Context, state PipelineState) (PipelineState, error) {
    query := state.RewrittenQuery
    result, err := knowledgeService.HybridSearch(ctx, &knowledge.HybridSearchRequest{
        Query:            query,
        VectorWeight:     0.7,
        BM25Weight:       0.3,
    })
    return state, err
}
```"""


def test_a_question_asking_a_number_quotes_the_line_of_code_that_sets_it():
    from knowledge.analysis import analyze  # the search tokens the chat reads with: "VectorWeight" holds "weight"

    passages = [
        Passage("1", GO_SEARCH_NODE, 0, section="4.3 Search Node"),
        Passage("2", "特性：BM25+Semantic+RRF，参考项目：RAGLight，实现文件：vector_store.py (search_hybrid)", 1, section="2.7 参考项目对照"),
    ]
    reading = read("In the search step, how are the vector and BM25 scores weighted?", passages, tokenize=analyze)
    quoted = [" ".join(pick.unit.text.split()) for pick in reading.picks]
    assert quoted[0] in ("VectorWeight: 0.7,", "BM25Weight: 0.3,")


def test_a_question_not_asking_a_value_still_does_not_quote_code():
    body = answer_of(
        "What does the search step do?",
        ("4.3 Search Node", GO_SEARCH_NODE),
    )
    assert "VectorWeight" not in body and "执行知识检索" in body


def test_a_question_naming_a_key_quotes_the_line_of_data_that_gives_it_a_word():
    from knowledge.analysis import analyze

    contract = "\n".join([
        "```json",
        '{"status":"start"}',
        '{"status":"execution_log","content":{"node":"...","input":{},"output":{}}}',
        '{"status":"done"}',
        "```",
    ])
    passages = [
        Passage("1", contract, 0, section="6.4.1 StreamEvent 最小合同"),
        Passage("2", "Tracing records the input and output of each stage for debugging.", 1, section="5.5 可观测性"),
    ]

    named = read("Which status value carries per-node input and output details?", passages, tokenize=analyze)
    unnamed = read("Which event carries per-node input and output details?", passages, tokenize=analyze)

    assert "execution_log" in named.picks[0].unit.text
    assert not any("execution_log" in pick.unit.text for pick in unnamed.picks)  # no key named: code stays code


RECALL_PATHS = """| 路径 | 权重 | 描述 |
|---|---|---|
| 父文档向量 | 1.0 | dense+sparse 混合搜索父表 |
| 子文档定位 | 0.8 | 子表向量搜索 → 反查父文档 |
| 标签匹配 | 1.2 | 关键词 LIKE 匹配 tag_list 字段 |
| 章节相似度 | 0.5 | 同章节相似度搜索 |"""


@pytest.mark.parametrize(("question", "row"), [
    ("哪条召回路径的权重最高？", "标签匹配"),
    ("哪条召回路径的权重最低？", "章节相似度"),
])
def test_asked_for_the_highest_or_lowest_of_a_column_it_quotes_the_row_that_holds_it(question, row):
    from knowledge.analysis import analyze

    passages = [Passage("1", f"四路召回:\n{RECALL_PATHS}", 0, section="7.2 四路向量召回")]

    reading = read(question, passages, tokenize=analyze)

    rows = [pick.unit.text for pick in reading.picks if pick.unit.kind == "row"]
    assert rows[0].startswith(f"路径：{row}")  # the lead-in "四路召回:" may come first


def test_at_most_asks_a_limit_not_the_row_that_holds_the_most():
    from agentic_rag.llm.reader import _extreme_asked

    assert _extreme_asked("哪条召回路径的权重最高？") == 1 and _extreme_asked("Which path has the lowest weight?") == -1
    assert _extreme_asked("每个文档最多保留几条？") == 0
    assert _extreme_asked("How many references at most does document chat hand to the LLM?") == 0


@pytest.mark.parametrize("question", ["How are the scores weighted?", "两路检索怎么加权？"])
def test_asking_how_something_is_weighted_asks_for_a_number(question):
    assert "number" in expected_answer_types(question)


def test_a_question_asking_a_port_quotes_the_line_that_holds_one_over_other_numbers():
    from knowledge.analysis import analyze

    passages = [
        Passage("1", "组件 | 选型\n--- | ---\n框架 | FastAPI 0.128", 0, section="1.2 技术选型"),
        Passage("2", "外部用户 → Caddy → Route Handler → FastAPI (:5050)", 1, section="1.6 部署架构"),
    ]
    reading = read("FastAPI 监听哪个端口？", passages, tokenize=analyze)
    assert "(:5050)" in reading.picks[0].unit.text
    assert "port" in expected_answer_types("Which port does the backend listen on?")


def test_a_who_question_quotes_the_line_that_names_a_role_over_lines_that_share_more_words():
    from knowledge.analysis import analyze
    from knowledge.fusion import expand_query

    info = "- **文档版本**: v3.0（纯 Router→Worker 架构）\n- **作者**: System Architect\n- **状态**: 已落地"
    passage = Passage("1", info, 0, "文档信息", "003_bafd.md", "Router→Worker 架构迁移设计文档")
    reading = read("Who wrote the Router to Worker migration design?", [passage],
                   tokenize=analyze, expand=expand_query)
    assert reading.picks[0].unit.text == "作者: System Architect"


def test_a_question_asking_a_date_quotes_the_line_that_holds_one():
    from knowledge.analysis import analyze

    passages = [
        Passage("1", "created_at 字段记录文档的创建时间。", 0, "表结构"),
        Passage("2", "- **作者**: System Architect\n- **创建日期**: 2025-01-19", 1, "文档信息"),
    ]
    reading = read("文档是什么时候创建的？", passages, tokenize=analyze)
    assert [pick.unit.text for pick in reading.picks] == ["创建日期: 2025-01-19"]
    assert "date" in expected_answer_types("When was the migration design created?")
    assert "date" not in expected_answer_types("When does shortcut C trigger?")  # a condition, not a date


def test_a_question_asking_when_an_event_happened_quotes_the_sentence_that_dates_it():
    from knowledge.analysis import analyze

    text = "郭麐在杭州去世后，其诗文由门人整理刊行。郭麐去世的消息传开，友人作诗悼念。郭麐于1831年去世，享年六十五。"
    reading = read("郭麐在哪一年去世？", [Passage("1", text, 0, "")], tokenize=analyze)
    assert "1831年" in reading.picks[0].unit.text
    assert "date" in expected_answer_types("青少年机器人世界杯是从什么时候开始的？")
    assert "date" not in expected_answer_types("熔断器什么时候打开？")  # a condition, not a date


def test_a_question_asking_another_name_quotes_the_sentence_that_gives_one():
    from knowledge.analysis import analyze

    text = ("在欧洲，松鸦也常被当作观赏鸟。他辨别出松鸦与其他鸦类的相同之处。"
            "松鸦（学名：Garrulus glandarius），又名㭴鸟、橿鸟，是一种分布极广泛的鸦科动物。")
    reading = read("松鸦又可以叫什么？", [Passage("1", text, 0, "松鸦")], tokenize=analyze)
    assert "又名㭴鸟" in reading.picks[0].unit.text
    assert "alias" in expected_answer_types("What else is the Eurasian jay called?")
    assert "alias" not in expected_answer_types("Milvus 里子文档集合叫什么名字？")  # its name, not another one


@pytest.mark.parametrize(("question", "text", "answer"), [
    ("邵伯温曾写过什么著作？",
     "邵伯温是邵雍之子。邵伯温曾任多地官职，为人正直。邵伯温著有《邵氏闻见录》二十卷。", "《邵氏闻见录》"),
    ("青斑阿南鱼的雄鱼是什么颜色的？",
     "青斑阿南鱼的雄鱼体型较大。青斑阿南鱼的雄鱼领域性强。雄鱼体呈橄榄绿色，具蓝色斑点。", "橄榄绿色"),
    ("松鸦属于什么科目？",
     "松鸦的羽色以粉褐色为主。松鸦常被误认为其他鸟类。松鸦是一种分布极广泛的鸦科鸟类。", "鸦科"),
    ("魏裔介的谥号是什么？",
     "魏裔介，字石生，号贞庵。魏裔介是清初名臣。魏裔介卒后谥文毅。", "谥文毅"),
    ("白尾雀鲷的生活习性是什么样的？",
     "白尾雀鲷的生活区域很广。白尾雀鲷是一种小型鱼类，体长可达8公分。白尾雀鲷栖息于珊瑚礁区，以浮游动物为食。", "栖息于珊瑚礁区"),
])
def test_a_question_asking_a_particular_kind_of_fact_quotes_the_sentence_that_states_one(question, text, answer):
    from knowledge.analysis import analyze

    reading = read(question, [Passage("1", text, 0, "")], tokenize=analyze)
    assert answer in reading.picks[0].unit.text


def test_an_english_which_question_over_chinese_text_is_answered_by_a_name_in_latin_letters():
    from knowledge.analysis import analyze
    from knowledge.fusion import expand_query

    passages = [
        Passage("1", "后端进程崩溃后无人重启。", 0, "后端"),
        Passage("2", "组件：图谱，选型：networkx 3.6，理由：内存图操作", 0, "后端"),
    ]
    reading = read("Which graph library does the backend use?", passages, tokenize=analyze, expand=expand_query)
    assert reading.picks[0].unit.text.startswith("组件：图谱，选型：networkx")


def test_a_list_of_the_kinds_asked_for_answers_which_kinds():
    from agentic_rag.llm.coverage import Quoted, unanswered

    quotes = [Quoted(text, "4.4 Rerank Node") for text in (
        "重排序策略：", "基于 LLM：让 LLM 根据查询对结果排序", "基于 Reranker：使用专门的 Reranker 模型", "混合策略：结合向量分数和 LLM 评分",
    )]

    assert unanswered("重排序有哪几种策略？", quotes, simple_tokenize) == ""
    assert "a number" in unanswered("重排序有几种策略？", quotes, simple_tokenize)  # how many: a count


def test_a_number_written_with_its_unit_answers_how_much():
    from agentic_rag.llm.coverage import Quoted, unanswered
    from knowledge.analysis import analyze

    probe = [Quoted('首包探测: 发送 "hi" (5s 超时) → 成功才发全量请求', "模型路由")]

    assert unanswered("首包探测的超时时间是多少？", probe, analyze) == ""
    assert "a number" in unanswered("首包探测的超时时间是多少？", [Quoted('首包探测: 发送 "hi" 超时则放弃 → 成功才发全量请求')], analyze)
