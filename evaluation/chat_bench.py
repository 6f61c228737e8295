"""Chat speed: `manage.py bench chat --kb SLUG [--queries N] [--repeat N] [--fake-llm]`.

With the extractive generator: end-to-end and first-token latency of KB questions,
shortcut A and B latency, prompt assembly time. Then the `manage.py ask` path with no KB
named, so routing runs too: greetings, arithmetic, time, currency and KB questions, each
timed around the whole call and checked (shortcut B, the right tool and value, the
routed KB). With `--fake-llm`, against a fake
OpenAI-compatible streaming server on 127.0.0.1: the pipeline's own time to first token,
every moment spent waiting for the model (its JSON calls for rewrite and intent, and the
stream's wait from request arrival to the first piece, as the server recorded it)
subtracted. With `--repeat N`, the KB questions asked N times each, alternately with no
retrieval cache and with a fresh one (knowledge.result_cache): its hit rate and both p50s.
Every run is a fresh conversation, deleted afterwards.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from itertools import cycle, islice
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings

from agentic_rag.llm import LLMConfig, build_llm
from chat.models import Conversation, CurrencyRate, Trace
from chat.pipeline import ChatOptions, ChatRequest, ChatResult, run_chat
from graphrag.search import graph_version
from knowledge.result_cache import RetrievalCache
from knowledge.retrieval import retrieve

QUESTIONS = (
    "How does hybrid search fuse BM25 and vectors?",
    "What does the quality gate check?",
    "How does the circuit breaker work?",
    "什么是短路 A？",
    "How are documents split into parent and child chunks?",
    "引文校验是怎么做的？",
    "Which events does the SSE stream send?",
    "混合检索的权重是多少？",
)
SHORTCUT_A = ("它呢？", "what about it?")
SHORTCUT_B = ("你好", "hello", "谢谢", "help")
GOALS_MS = {
    "e2e_p50_ms": 150,
    "first_token_p50_ms": 300,
    "shortcut_a_p50_ms": 20,
    "shortcut_b_p50_ms": 20,
    "prompt_assembly_p50_ms": 50,
    "fake_llm_own_ttft_p50_ms": 50,
    "ask_greeting_p50_ms": 150,
    "ask_arithmetic_p50_ms": 150,
    "ask_time_p50_ms": 150,
    "ask_currency_p50_ms": 150,
    "ask_kb_p50_ms": 150,
}
# (message, the value the answer must hold): Python works out each sum the calculator must match.
ARITHMETIC = (
    ("what is 12*(3+4)?", 12 * (3 + 4)),
    ("计算 2**10 - 24", 2**10 - 24),
    ("(17+5)/4 = ?", (17 + 5) / 4),
    ("calculate 1234 * 5678", 1234 * 5678),
)
# (message, the zone whose clock the answer must show)
TIME_QUESTIONS = (
    ("What time is it in Tokyo?", "Asia/Tokyo"), ("现在伦敦几点？", "Europe/London"),
    ("what's the time in New York", "America/New_York"), ("现在东京几点", "Asia/Tokyo"),
)
# (message, amount, from, to): the bench converts with the rate table the tool reads.
CURRENCY_QUESTIONS = (
    ("convert 100 USD to EUR", "100", "USD", "EUR"), ("500 人民币是多少美元？", "500", "CNY", "USD"),
    ("how much is 20 GBP in JPY", "20", "GBP", "JPY"), ("100 美元等于多少人民币", "100", "USD", "CNY"),
)
# The fake model's one reply serves its JSON calls (rewrite, intent) and the answer stream.
MODEL_DELAY_S = 0.02  # the fake model thinks before each reply; the bench subtracts it
FAKE_REPLY = '{"query": "How does hybrid search work?", "sub_queries": [], "intents": [{"name": "KB", "confidence": 0.9}]}'


@dataclass
class _Runs:
    """The bench's conversations, so they can be deleted afterwards."""

    conversation_ids: list[int] = field(default_factory=list)
    trace_ids: list[str] = field(default_factory=list)

    def note(self, result: ChatResult) -> None:
        self.conversation_ids.append(result.conversation_id)
        self.trace_ids.append(result.trace_id)

    def delete(self) -> None:
        Trace.objects.filter(trace_id__in=self.trace_ids).delete()
        Conversation.objects.filter(pk__in=self.conversation_ids).delete()


# Compound questions about the docs KB, for the agents that work in rounds or plans.
AGENT_QUESTIONS = (
    "How are documents split into chunks, and how does the quality gate judge them?",
    "混合检索的权重是多少？多路召回有哪几条路径？",
    "What is the difference between shortcut A and shortcut C?",
    "知识图谱是怎么构建的？它和 Celery 有什么关系？",
)
# The first event that shows an agent at work (a plan, its thinking, a round, the evidence).
AGENT_EVENTS = frozenset({"thinking", "plan", "round", "task", "retrieval"})


def bench_agent(kb: Any, user: Any, agent_type: str, *, queries: int = 20) -> dict[str, Any]:
    """Time one worker type offline: whole answers, and the first event that shows it at work."""
    runs = _Runs()
    llm = build_llm(LLMConfig())
    timings: list[tuple[float, float]] = []

    def ask(message: str) -> None:
        first: list[float] = []

        def emit(event: Any) -> None:
            if event.type in AGENT_EVENTS and not first:
                first.append(time.monotonic())

        started = time.monotonic()
        options = ChatOptions(kb_slug=kb.slug, agent_type=agent_type)
        runs.note(run_chat(ChatRequest(user, None, message, options), emit=emit, llm=llm))
        ended = time.monotonic()
        timings.append(((ended - started) * 1000, ((first[0] if first else ended) - started) * 1000))

    try:
        ask(AGENT_QUESTIONS[0])  # warm-up
        timings.clear()
        for message in islice(cycle(AGENT_QUESTIONS), queries):
            ask(message)
    finally:
        runs.delete()
    return {
        "agent": agent_type,
        "queries": queries,
        "e2e_p50_ms": _p(50, [total for total, _ in timings]),
        "e2e_p95_ms": _p(95, [total for total, _ in timings]),
        "first_agent_event_p50_ms": _p(50, [first for _, first in timings]),
        "first_agent_event_p95_ms": _p(95, [first for _, first in timings]),
    }


def bench_chat(kb: Any, user: Any, *, queries: int = 40, fake_llm: bool = False, repeat: int = 0) -> dict[str, Any]:
    """Measure the chat pipeline on kb as user; return the figures and the goals they meet."""
    runs = _Runs()
    try:
        report = _bench_extractive(kb, user, queries, runs)
        report.update(_bench_ask(kb, user, queries, runs))
        if repeat > 0:
            report.update(_bench_cache(kb, user, repeat, runs))
        if fake_llm:
            report.update(_bench_fake_llm(kb, user, queries, runs))
    finally:
        runs.delete()
    report["goals_met"] = {name: report[name] <= goal for name, goal in GOALS_MS.items() if name in report}
    return report


def _bench_extractive(kb: Any, user: Any, queries: int, runs: _Runs) -> dict[str, Any]:
    llm = build_llm(LLMConfig())  # the extractive generator alone
    ask = _asker(kb, user, llm, runs)
    ask(QUESTIONS[0])  # warm-up: dictionaries, the KB's index, the embedder
    kb_runs = [ask(question) for question in islice(cycle(QUESTIONS), queries)]
    a_runs = [ask(message) for message in islice(cycle(SHORTCUT_A), queries)]
    b_runs = [ask(message) for message in islice(cycle(SHORTCUT_B), queries)]
    results = [run.result for run in kb_runs]
    return {
        "queries": queries,
        "e2e_p50_ms": _p(50, [run.ms for run in kb_runs]),
        "e2e_p95_ms": _p(95, [run.ms for run in kb_runs]),
        "first_token_p50_ms": _p(50, [_first_token_ms(run) for run in kb_runs if run.first_token_at]),
        "shortcut_a_p50_ms": _p(50, [run.ms for run in a_runs]),
        "shortcut_b_p50_ms": _p(50, [run.ms for run in b_runs]),
        "prompt_assembly_p50_ms": _stage_p50(results, "prompt"),
        "stage_p50_ms": {name: _stage_p50(results, name) for name in _stage_names(results)},
        "shortcuts_seen": sorted({str(run.result.shortcut) for run in (*a_runs, *b_runs)}),
        "kb_answers_with_citations": sum(bool(r.citations) for r in results),
        "unverified_quotes": sum(not v["verified"] for r in results for v in r.verification),
    }


def _bench_ask(kb: Any, user: Any, queries: int, runs: _Runs) -> dict[str, Any]:
    """Each kind of question `manage.py ask` answers, routed as it routes them (no KB named)."""
    ask = _asker(None, user, build_llm(LLMConfig()), runs)
    checks: dict[str, tuple[Sequence[str], Callable[[str, ChatResult], bool]]] = {
        "greeting": (SHORTCUT_B, lambda message, result: result.shortcut == "B"),
        "arithmetic": ([m for m, _ in ARITHMETIC], _right_sum),
        "time": ([m for m, _ in TIME_QUESTIONS], _right_time),
        "currency": ([m for m, *_ in CURRENCY_QUESTIONS], _right_conversion),
        "kb": (QUESTIONS, lambda message, result: result.route == kb.slug and bool(result.citations)),
    }
    report: dict[str, Any] = {}
    for kind, (messages, is_right) in checks.items():
        ask(messages[0])  # warm-up
        timed = [(message, ask(message)) for message in islice(cycle(messages), queries)]
        report[f"ask_{kind}_p50_ms"] = _p(50, [run.ms for _, run in timed])
        report[f"ask_{kind}_right"] = f"{sum(is_right(m, run.result) for m, run in timed)}/{len(timed)}"
    return report


def _bench_cache(kb: Any, user: Any, repeat: int, runs: _Runs) -> dict[str, Any]:
    """The KB questions asked `repeat` times each, every time once with no retrieval cache and
    once through a fresh one, alternately (neither warms the machine for the other)."""
    llm = build_llm(LLMConfig())
    results = RetrievalCache(entries=max(settings.RETRIEVAL_CACHE_ENTRIES, len(QUESTIONS) * 4),
                             ttl_s=settings.RETRIEVAL_CACHE_TTL_S, graph_version=graph_version)
    uncached = _asker(kb, user, llm, runs, retriever=retrieve)
    cached = _asker(kb, user, llm, runs, retriever=results.wrap(retrieve))
    uncached(QUESTIONS[0])  # warm-up: dictionaries, the KB's index, the embedder
    off: list[_Run] = []
    on: list[_Run] = []
    for question in [q for _ in range(repeat) for q in QUESTIONS]:
        off.append(uncached(question))
        on.append(cached(question))
    stats = results.stats()
    return {
        "cache_repeat": repeat,
        "cache_questions": len(on),
        "cache_hits": stats.hits,
        "cache_misses": stats.misses,
        "cache_hit_rate": round(stats.hit_rate, 4),
        "e2e_p50_ms_without_cache": _p(50, [run.ms for run in off]),
        "e2e_p50_ms_with_cache": _p(50, [run.ms for run in on]),
        "retrieve_p50_ms_without_cache": _stage_p50([run.result for run in off], "retrieve"),
        "retrieve_p50_ms_with_cache": _stage_p50([run.result for run in on], "retrieve"),
        "same_answers_with_cache": f"{sum(a.result.answer == b.result.answer for a, b in zip(off, on))}/{len(on)}",
    }


def _right_sum(message: str, result: ChatResult) -> bool:
    expected = dict(ARITHMETIC)[message]
    shown = f"{expected:g}" if isinstance(expected, float) else str(expected)
    return result.tools == ("calculator",) and f"= {shown}" in result.answer


def _right_time(message: str, result: ChatResult) -> bool:
    """The datetime tool answered, showing the zone's clock within a minute of now."""
    zone = dict(TIME_QUESTIONS)[message]
    shown = re.search(rf"{re.escape(zone)}: (\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d)", result.answer)
    if result.tools != ("datetime",) or shown is None:
        return False
    now = datetime.now(ZoneInfo(zone)).replace(tzinfo=None)
    return abs((now - datetime.fromisoformat(shown.group(1))).total_seconds()) < 60


def _right_conversion(message: str, result: ChatResult) -> bool:
    """The currency tool answered with the amount the stored rate table gives."""
    amount, source, target = next(row[1:] for row in CURRENCY_QUESTIONS if row[0] == message)
    table = CurrencyRate.objects.filter(code__in=[source, target]).latest_table()
    expected = Decimal(amount) * (table[target].per_usd / table[source].per_usd)
    return result.tools == ("currency",) and f"= {expected:,.2f} {target}" in result.answer


def _first_token_ms(run: _Run) -> float:
    return ((run.first_token_at or run.started) - run.started) * 1000


def _bench_fake_llm(kb: Any, user: Any, queries: int, runs: _Runs) -> dict[str, Any]:
    # Test helpers, imported only when asked for.
    from agentic_rag.llm.testing import FakeOpenAIServer, FakeReply

    with FakeOpenAIServer(text=FAKE_REPLY) as server:
        server.default = FakeReply(text=FAKE_REPLY, headers_delay_s=MODEL_DELAY_S)
        config = LLMConfig(providers=("openai",), openai_base_url=server.base_url, openai_api_key="bench")
        llm = _TimedLLM(build_llm(config))
        ask = _asker(kb, user, llm, runs, cache=_NoCache())
        ask(QUESTIONS[0])
        own, raw = [], []
        for question in islice(cycle(QUESTIONS), queries):
            llm.intervals.clear()
            seen = len(server.requests)
            run = ask(question)
            if run.first_token_at is None:
                continue
            stream = [r for r in server.chat_requests[seen:] if r.first_piece_at is not None]
            waits = [*llm.intervals, *((r.at, r.first_piece_at) for r in stream)]
            raw.append(_first_token_ms(run))
            own.append(_first_token_ms(run) - _union_ms(waits, until=run.first_token_at))
        calls = len(server.chat_requests)
    return {
        "fake_llm_ttft_p50_ms": _p(50, raw),
        "fake_llm_own_ttft_p50_ms": _p(50, own),
        "fake_llm_own_ttft_p95_ms": _p(95, own),
        "fake_llm_requests_per_question": round(calls / (queries + 1), 2),
    }


@dataclass(frozen=True)
class _Run:
    result: ChatResult
    ms: float  # the whole call, admission and storage included
    started: float  # time.monotonic() before the call
    first_token_at: float | None  # time.monotonic() when the first_token event came


def _asker(
    kb: Any, user: Any, llm: Any, runs: _Runs, *, cache: Any = None, retriever: Any = None
) -> Callable[[str], _Run]:
    def ask(message: str) -> _Run:
        first_token: list[float] = []

        def emit(event: Any) -> None:
            if event.type == "first_token":
                first_token.append(time.monotonic())

        started = time.monotonic()
        # No KB: the router picks one, as `manage.py ask` without --kb does.
        request = ChatRequest(user, None, message, ChatOptions(kb_slug=kb.slug if kb else None))
        result = run_chat(request, emit=emit, llm=llm, cache=cache, retriever=retriever)
        runs.note(result)
        return _Run(result, (time.monotonic() - started) * 1000, started, first_token[0] if first_token else None)

    return ask


class _TimedLLM:
    """The router, with the wall-clock intervals of its whole (non-streamed) calls noted."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self.intervals: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    @property
    def has_model(self) -> bool:
        return self._llm.has_model

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        return self._llm.stream(*args, **kwargs)

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self._llm.complete, *args, **kwargs)

    def complete_json(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self._llm.complete_json, *args, **kwargs)

    def _timed(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return call(*args, **kwargs)
        finally:
            with self._lock:
                self.intervals.append((started, time.monotonic()))


class _NoCache:
    """Every question is new to the LLM stages: the worst case."""

    def get(self, key: str, default: Any = None) -> Any:
        return default

    def set(self, key: str, value: Any, timeout: float | None = None) -> None:
        pass


def _union_ms(intervals: Sequence[tuple[float, float]], *, until: float) -> float:
    """Milliseconds covered by the intervals (overlaps counted once), up to `until`."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted((s, min(e, until)) for s, e in intervals):
        if end <= start:
            continue
        start = max(start, reach)
        if end > start:
            total += end - start
            reach = end
    return total * 1000


def _stage_names(results: Sequence[ChatResult]) -> list[str]:
    return [stage.name for stage in results[0].stages] if results else []


def _stage_p50(results: Sequence[ChatResult], name: str) -> float:
    return _p(50, [stage.ms for r in results if (stage := r.stage(name)) and stage.status != "skipped"])


def _p(percent: int, values: Sequence[float]) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return round(values[0], 2)
    return round(statistics.quantiles(values, n=100, method="inclusive")[percent - 1], 2)
