"""Fallback speed with a broken model: `manage.py bench dead-model --kb SLUG [--questions N]`.

Four fake models on 127.0.0.1, each behind a fresh router built from the LLM settings (so its
breaker starts closed, as after a restart): one whose port refuses connections, one that
answers every request with HTTP 500, one that accepts the request and never answers, and
one that answers the JSON calls but stalls its answer stream after the first piece. Each is
asked N KB questions one after another; the bench reports how long each whole question
took (p50, p95, max), and how the answers ended: by the extractive reader, labelled as
standing in for the model, partial.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from itertools import cycle, islice
from typing import Any

from agentic_rag.llm import build_llm
from agentic_rag.llm.config import config_from_settings
from chat.pipeline import ChatOptions, ChatRequest, ChatResult, run_chat

from .chat_bench import QUESTIONS, _NoCache, _p, _Runs

# The stalled model's reply: its first piece is the start of an answer, and the whole of it
# holds a JSON object, so the rewrite and intent calls (not streamed) get a usable reply.
STALLED_CHUNKS = (
    "Hybrid search combines ",
    '{"query": "How does hybrid search work?", "sub_queries": [], '
    '"intents": [{"name": "KB", "confidence": 0.9}]}',
)
NEVER_S = 600.0  # "never" for a fake model: longer than any timeout the chat has
CASES = ("refused", "error_500", "hung", "stalled")
# Words every label of the extractive reader standing in for a model holds.
LABEL_WORDS = ("language model", "语言模型")


def bench_dead_model(kb: Any, user: Any, *, questions: int = 20) -> dict[str, Any]:
    """Ask `questions` KB questions of each broken model; return per case timings and endings."""
    runs = _Runs()
    report: dict[str, Any] = {"questions": questions}
    try:
        for case in CASES:
            with _broken_model(case) as base_url:
                report.update(_bench_case(case, base_url, kb, user, questions, runs))
    finally:
        runs.delete()
    return report


def _bench_case(case: str, base_url: str, kb: Any, user: Any, questions: int, runs: _Runs) -> dict[str, Any]:
    settings = config_from_settings()  # the deployment's timeouts, retries and breaker
    config = replace(settings, providers=("openai",), openai_base_url=base_url, openai_api_key="bench")
    ask = _asker(kb, user, build_llm(config), runs)
    timed = [ask(question) for question in islice(cycle(QUESTIONS), questions)]
    seconds = [s for s, _ in timed]
    results = [r for _, r in timed]
    return {
        f"{case}_p50_s": _p(50, seconds),
        f"{case}_p95_s": _p(95, seconds),
        f"{case}_max_s": round(max(seconds), 2),
        f"{case}_by_reader": f"{sum(_by_reader(r) for r in results)}/{questions}",
        f"{case}_labelled": f"{sum(_is_labelled(r) for r in results)}/{questions}",
        f"{case}_partial": f"{sum(r.partial for r in results)}/{questions}",
        f"{case}_failed": f"{sum(r.status == 'failed' for r in results)}/{questions}",
    }


def _asker(kb: Any, user: Any, llm: Any, runs: _Runs) -> Callable[[str], tuple[float, ChatResult]]:
    def ask(message: str) -> tuple[float, ChatResult]:
        started = time.monotonic()
        request = ChatRequest(user, None, message, ChatOptions(kb_slug=kb.slug))
        result = run_chat(request, emit=lambda event: None, llm=llm, cache=_NoCache())
        runs.note(result)
        return time.monotonic() - started, result

    return ask


def _by_reader(result: ChatResult) -> bool:
    generate = result.stage("generate")
    return generate is not None and "extractive" in generate.detail


def _is_labelled(result: ChatResult) -> bool:
    return any(words in result.answer for words in LABEL_WORDS)


@contextmanager
def _broken_model(case: str) -> Iterator[str]:
    """The base URL of a model broken as `case` says, for the block."""
    # Test helpers, imported only when the bench runs.
    from agentic_rag.llm.testing import FakeOpenAIServer, FakeReply

    if case == "refused":
        yield f"http://127.0.0.1:{_closed_port()}/v1"
        return
    replies = {
        "error_500": FakeReply(status=500),
        "hung": FakeReply(headers_delay_s=NEVER_S),
        "stalled": FakeReply(chunks=STALLED_CHUNKS, stall_after=1, stall_s=NEVER_S),
    }
    with FakeOpenAIServer() as server:
        server.default = replies[case]
        yield server.base_url


def _closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
