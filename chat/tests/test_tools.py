"""The tool channel: each built-in tool, timeouts, access checks, and a tool answer end to end."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from agentic_rag.metrics import RequestRecorder, Snapshot, percentile
from chat.models import CurrencyRate
from chat.pipeline import ChatOptions, ChatRequest, run_chat
from chat.pipeline.intent import rule_intents
from chat.pipeline.tools import Tool, ToolCall, ToolContext, ToolRegistry, get_tool_channel, run_calls
from chat.tests.conftest import ingest_docs
from chat.tools import builtin_tools, currency, demo, knowledge_lookup, system_metrics, world_clock
from knowledge.models import KnowledgeBase

NOON_UTC = datetime(2025, 1, 2, 12, 0, tzinfo=UTC)


DEMO_TOOLS = {"weather", "sales", "ticket"}


@pytest.fixture
def demo_tools(settings):
    """The demo tools turned on, as CHAT_DEMO_TOOLS=1 does."""
    settings.CHAT_DEMO_TOOLS = True


def test_it_registers_every_builtin_tool_in_the_process_registry(demo_tools):
    names = {"calculator", "datetime", "currency", "system_metrics", "knowledge_lookup", *DEMO_TOOLS}
    assert get_tool_channel().available() >= names
    assert all(tool.parameters.get("type") == "object" and tool.description for tool in builtin_tools())


def test_the_demo_tools_are_off_unless_the_setting_turns_them_on(settings):
    channel = get_tool_channel()
    assert not channel.available() & DEMO_TOOLS and channel.get("weather") is None
    assert not channel.run(ToolCall("weather", {"city": "Beijing"})).ok  # not run either

    settings.CHAT_DEMO_TOOLS = True

    assert channel.available() >= DEMO_TOOLS and channel.run(ToolCall("weather", {"city": "Beijing"})).ok


@pytest.mark.parametrize(
    ("message", "tool"),
    [("what is 3*(4+5)?", "calculator"), ("东京现在几点", "datetime"), ("what's the time in New York", "datetime"),
     ("local time in Paris", "datetime"), ("100美元换人民币", "currency"),
     ("北京天气怎么样", "weather"), ("TKT-1001 status", "ticket"), ("current QPS and latency", "system_metrics")],
)
def test_it_routes_tool_keywords_to_their_tool(message, tool, demo_tools):
    assert tool in rule_intents(message, tools=get_tool_channel().available()).tools


@pytest.mark.parametrize("message", ["北京天气怎么样", "TKT-1001 status", "2024 Q2 sales"])
def test_with_the_demo_tools_off_their_keywords_route_to_no_tool(message):
    assert not rule_intents(message, tools=get_tool_channel().available()).tools


@pytest.mark.parametrize("message", ["what's the timeout of a worker?", "response time in the pipeline"])
def test_time_words_in_kb_questions_do_not_call_the_clock(message):
    assert "datetime" not in rule_intents(message, tools=get_tool_channel().available()).tools


@pytest.mark.parametrize(
    ("message", "zones"),
    [("北京现在几点", ["Asia/Shanghai"]), ("what time is it in Tokyo and New York", ["Asia/Tokyo", "America/New_York"]),
     ("what time is it in Europe/Paris", ["Europe/Paris"]), ("what time is it", [])],
)
def test_it_finds_the_time_zones_a_question_names(message, zones):
    assert world_clock.extract(message) == {"zones": zones}


def test_it_tells_the_time_of_each_zone_from_the_clock_it_is_given():
    handle = world_clock.make_handler(clock=lambda: NOON_UTC)

    answer = handle({"zones": ["Asia/Shanghai", "America/New_York", "Mars/Base"]})

    assert "Asia/Shanghai: 2025-01-02 20:00:00 (Thursday, UTC+0800)" in answer
    assert "America/New_York: 2025-01-02 07:00:00" in answer and "Mars/Base: unknown time zone" in answer
    assert answer.startswith("Current time · 当前时间 Asia/Shanghai")
    assert "UTC: 2025-01-02 12:00:00" in handle({"zones": []})


def test_a_question_naming_no_zone_gets_the_deployments_time_zone(settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    clock = next(tool for tool in builtin_tools() if tool.name == "datetime")

    assert "当前时间 Asia/Shanghai:" in clock.handler({"zones": []})


@pytest.mark.parametrize(
    ("message", "parameters"),
    [("100 USD to CNY", {"amount": "100", "from": "USD", "to": "CNY"}),
     ("100美元换人民币", {"amount": "100", "from": "USD", "to": "CNY"}),
     ("convert 2,500 EUR to JPY", {"amount": "2500", "from": "EUR", "to": "JPY"}),
     ("美元汇率", {"amount": "1", "from": "USD", "to": "CNY"})],
)
def test_it_reads_a_conversion_from_the_question(message, parameters):
    assert currency.extract(message) == parameters


@pytest.mark.django_db
def test_it_converts_with_the_seeded_sample_rates_and_says_whose_they_are():
    answer = currency.handle({"amount": "100", "from": "USD", "to": "CNY"})

    assert answer.startswith("100 USD = 729.93 CNY (1 USD = 7.2993 CNY, rates of 2025-01-02; source: sample table")


@pytest.mark.django_db
def test_it_uses_the_newest_rate_of_the_table():
    CurrencyRate.objects.create(code="CNY", per_usd="7.1000", as_of="2025-06-01", source="ops")

    assert "710.00 CNY" in currency.handle({"amount": "100", "from": "USD", "to": "CNY"})
    assert "No exchange rate for XYZ" in currency.handle({"amount": "1", "from": "USD", "to": "XYZ"})


def test_it_reports_the_deployments_own_metrics(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "m"}}
    now = [1000.2]
    recorder = RequestRecorder(clock=lambda: now[0])
    for ms in (10, 20, 30, 40, 100):
        recorder.record(ms)

    assert recorder.request_count(60) == 5
    assert percentile(recorder.latencies(60), 50) == 30 and percentile(recorder.latencies(60), 99) == 100
    fixed = Snapshot(5, 0.083, 30, 100, 100, 1.5, 80.0, 0)
    answer = system_metrics.make_handler(read=lambda window: fixed)({"window_s": 60})
    assert "5 requests (0.083 QPS)" in answer and "p50 30 ms" in answer and "queue depth 0" in answer


def test_it_counts_requests_through_the_middleware(client, settings):
    from agentic_rag.metrics import recorder

    before = recorder.request_count()
    client.get("/login/")
    assert recorder.request_count() == before + 1


@pytest.mark.parametrize(
    ("tool", "parameters", "says"),
    [(demo.handle_weather, {"city": "Tokyo"}, "Tokyo: clear"),
     (demo.handle_sales, {"quarter": "2024-Q2"}, "2024-Q2: total 4,490,000 CNY"),
     (demo.handle_ticket, {"id": "TKT-1001"}, "TKT-1001 [open, high]"),
     (demo.handle_ticket, {"status": "resolved"}, "TKT-1003")],
)
def test_each_demo_provider_answers_from_its_fixture_and_says_it_is_demo_data(tool, parameters, says):
    answer = tool(parameters)
    assert says in answer and "Demo data" in answer


def test_demo_extractors_read_city_quarter_and_ticket():
    assert demo.extract_weather("上海明天天气") == {"city": "Shanghai"}
    assert demo.extract_sales("2024年第三季度销售") == {"quarter": "2024-Q3"}
    assert demo.extract_sales("sales in Q1") == {"quarter": "2024-Q1"}
    assert demo.extract_ticket("what about tkt-1004?") == {"id": "TKT-1004", "status": ""}
    assert demo.extract_ticket("未解决的工单") == {"id": "", "status": "open"}


@pytest.mark.parametrize(
    ("extract", "message"),
    [(demo.extract_sales, "sales in 2019 Q1"), (demo.extract_sales, "How is the sales report built?"),
     (demo.extract_sales, "营业额怎么统计"), (demo.extract_ticket, "TKT-9999 status"),
     (demo.extract_ticket, "How are support tickets escalated?"), (demo.extract_ticket, "工单系统是怎么设计的？")],
)
def test_the_demo_sales_and_tickets_decline_what_their_fixtures_lack(extract, message):
    assert extract(message) is None  # not the whole demo table: the KB is asked


@pytest.mark.parametrize("message", ["When does snow fall in Toronto?", "多伦多明天天气怎么样", "what's the weather like?"])
def test_the_demo_weather_declines_a_place_its_fixture_lacks(message):
    assert demo.extract_weather(message) is None  # not Beijing's fixture weather: the KB is asked


@pytest.mark.django_db
def test_a_weather_question_about_another_city_is_answered_from_the_knowledge_base(kb, alice, events, extractive,
                                                                                   demo_tools):
    ingest_docs(kb)

    result = run_chat(ChatRequest(alice, None, "What is the weather in Toronto today?", ChatOptions(kb_slug=kb.slug)),
                      emit=events, llm=extractive)

    assert "weather" not in result.tools and "Demo data" not in result.answer
    assert not [event for event in events.of("tool") if event.data["name"] == "weather"]


@pytest.mark.django_db
@pytest.mark.parametrize("demo_on", [False, True])
def test_a_fixture_city_gets_demo_weather_only_when_the_demo_tools_are_on(kb, alice, events, extractive, settings,
                                                                           demo_on):
    settings.CHAT_DEMO_TOOLS = demo_on
    ingest_docs(kb)

    result = run_chat(ChatRequest(alice, None, "What is the weather in Beijing today?", ChatOptions(kb_slug=kb.slug)),
                      emit=events, llm=extractive)

    assert ("weather" in result.tools) is demo_on and ("Demo data" in result.answer) is demo_on
    assert result.intent == ("TOOL:weather" if demo_on else "KB")  # off: the knowledge base is searched


@pytest.mark.django_db
def test_knowledge_lookup_searches_a_kb_the_user_may_read(kb, alice):
    ingest_docs(kb)
    handle = knowledge_lookup.make_handler()

    answer = handle({"query": "circuit breaker", "kb": kb.slug}, ToolContext(user=alice))

    assert "From the knowledge base Alice's KB" in answer and "breaker.md" in answer


@pytest.mark.django_db
def test_knowledge_lookup_never_reaches_another_users_private_kb(kb, alice, bob):
    ingest_docs(kb)
    handle = knowledge_lookup.make_handler()

    by_slug = handle({"query": "circuit breaker", "kb": kb.slug}, ToolContext(user=bob))
    by_context = handle({"query": "circuit breaker"}, ToolContext(user=bob, kb=kb))
    anonymous = handle({"query": "circuit breaker", "kb": kb.slug}, ToolContext())

    refusal = "No knowledge base you can read was named or chosen for this search."
    assert by_slug == by_context == anonymous == refusal
    assert KnowledgeBase.objects.readable_by(bob).count() == 0


def test_knowledge_lookup_extracts_query_and_kb():
    assert knowledge_lookup.extract("搜索 kb:alice-kb circuit breaker") == {"query": "circuit breaker", "kb": "alice-kb"}
    assert knowledge_lookup.extract("查询 circuit breaker") is None  # the chat's own KB search answers
    assert knowledge_lookup.extract("查询 kb:alice-kb") is None


def test_it_runs_tools_side_by_side_and_fails_the_one_that_times_out():
    release = threading.Event()

    def slow(parameters):
        release.wait(5)
        return "late"

    registry = ToolRegistry((
        Tool("slow", "never in time", slow, lambda m: {}),
        Tool("fast", "at once", lambda p: "fast answer", lambda m: {}),
    ))
    try:
        results = run_calls(registry, [ToolCall("slow", {}), ToolCall("fast", {})], timeout_s=0.2)
    finally:
        release.set()

    assert [r.ok for r in results] == [False, True]
    assert results[0].error == "timed out after 0.2 s" and results[1].output == "fast answer"


def test_it_passes_the_context_only_to_tools_that_take_it():
    seen = []
    registry = ToolRegistry((
        Tool("who", "the user", lambda p, c: seen.append(c.user) or "ok", lambda m: {}, uses_context=True),
    ))

    assert registry.run(ToolCall("who", {}), ToolContext(user="alice")).output == "ok"
    assert seen == ["alice"]


@pytest.mark.django_db
def test_it_answers_arithmetic_through_the_tool_channel(alice, extractive, events):
    result = run_chat(ChatRequest(alice, None, "what is 3*(4+5)?", ChatOptions(kb_slug=None)), emit=events, llm=extractive)

    assert result.status == "done" and result.intent == "TOOL:calculator"
    tool = events.one("tool").data
    assert tool["name"] == "calculator" and tool["result"] == "3*(4+5) = 27" and tool["ok"]
    evidence = events.one("retrieval").data["evidence"]
    assert evidence == [dict(evidence[0], n=1, source="TOOL", doc="calculator")]
    assert "27" in result.answer and "[1]" in result.answer
