"""The model router over real providers on fake servers: retries, breakers, fallback, streams."""

from __future__ import annotations

import threading
import time

import pytest

from agentic_rag.llm import (
    BreakerOptions,
    BreakerState,
    CircuitBreaker,
    CompletionOptions,
    ExtractiveProvider,
    LLMStreamInterrupted,
    LLMUnavailable,
    Message,
    ModelRouter,
    OpenAICompatibleProvider,
    RequestBudget,
    RetryPolicy,
    Timeouts,
)
from agentic_rag.llm.extractive import DISCLAIMER, MODEL_FAILED, MODEL_STOPPED, MODEL_TIMED_OUT
from agentic_rag.llm.router import CUT_MARK
from agentic_rag.llm.testing import FakeOpenAIServer

DOCUMENTS = '<documents><document id="1">The breaker opens above a 10% failure rate.</document></documents>'
MESSAGES = [
    Message("system", f"Answer from the documents.\n{DOCUMENTS}"),
    Message("user", "When does the breaker open?"),
]
OPTIONS = CompletionOptions()
# A fake server on this machine answers in milliseconds; a loaded CI machine once took over 0.3 s.
# Tests of a timeout set their own shorter one.
FAST = Timeouts(connect_s=1, first_token_s=2, chunk_s=2, total_s=5)
REPLY = "The breaker opens above ten percent."


class FakeTime:
    """A clock that only moves when the code under test sleeps (or the test says so)."""

    def __init__(self) -> None:
        self.now = 5000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fake_time():
    return FakeTime()


@pytest.fixture
def server():
    with FakeOpenAIServer(text=REPLY) as fake:
        yield fake


@pytest.fixture
def backup():
    with FakeOpenAIServer(text="The backup model answers.") as fake:
        yield fake


def provider_for(server: FakeOpenAIServer, name: str = "primary") -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(server.base_url, "sk-test", "fake-model", FAST, name=name)


def make_router(fake_time: FakeTime, *servers: FakeOpenAIServer, **breaker_changes) -> ModelRouter:
    providers = [provider_for(s, name) for s, name in zip(servers, ["primary", "backup"], strict=False)]
    options = BreakerOptions(**breaker_changes)
    return ModelRouter(
        providers,
        lambda: CircuitBreaker(options, clock=fake_time.clock),
        RetryPolicy(sleep=fake_time.sleep, clock=fake_time.clock),
    )


def outcomes(attempts) -> list[tuple[str, str]]:
    return [(attempt.provider, attempt.outcome) for attempt in attempts]


def test_it_streams_from_the_first_provider_and_records_it(fake_time, server):
    stream = make_router(fake_time, server).stream(MESSAGES, OPTIONS)
    assert "".join(stream) == REPLY
    (request,) = server.chat_requests
    assert request.at <= request.first_piece_at
    assert (stream.provider, stream.model, stream.text) == ("primary", "fake-model", REPLY)
    assert outcomes(stream.attempts) == [("primary", "ok")]
    assert not stream.is_partial


def test_it_sends_nothing_until_the_stream_is_iterated(fake_time, server):
    stream = make_router(fake_time, server).stream(MESSAGES, OPTIONS)
    assert server.chat_requests == []
    next(stream)
    assert len(server.chat_requests) == 1


def test_it_waits_2_then_3_seconds_on_429_and_then_succeeds(fake_time, server):
    server.fail(429, times=2)
    completion = make_router(fake_time, server).complete(MESSAGES, OPTIONS)
    assert completion.text == REPLY
    assert fake_time.sleeps == [2.0, 3.0]
    assert outcomes(completion.attempts) == [("primary", "error"), ("primary", "error"), ("primary", "ok")]
    assert [a.wait_s for a in completion.attempts] == [2.0, 3.0, 0.0]


def test_it_waits_what_retry_after_asks(fake_time, server):
    server.fail(429, retry_after="1")
    stream = make_router(fake_time, server).stream(MESSAGES, OPTIONS)
    assert "".join(stream) == REPLY
    assert fake_time.sleeps == [1.0]


def test_it_moves_on_after_429_waits_of_2_3_and_5_seconds(fake_time, server, backup):
    server.fail(429, times=4)
    completion = make_router(fake_time, server, backup).complete(MESSAGES, OPTIONS)
    assert fake_time.sleeps == [2.0, 3.0, 5.0]
    assert completion.provider == "backup"
    assert len(server.chat_requests) == 4


@pytest.mark.parametrize("status", [401, 403, 502, 503, 504])
def test_it_fails_fast_to_the_next_provider(fake_time, server, backup, status):
    server.fail(status, times=5)
    stream = make_router(fake_time, server, backup).stream(MESSAGES, OPTIONS)
    assert "".join(stream) == "The backup model answers."
    assert stream.provider == "backup"
    assert fake_time.sleeps == []
    assert len(server.chat_requests) == 1
    assert outcomes(stream.attempts) == [("primary", "error"), ("backup", "ok")]
    assert f"HTTP {status}" in stream.attempts[0].error


def test_it_backs_off_on_500s(fake_time, server):
    server.fail(500, times=3)
    completion = make_router(fake_time, server).complete(MESSAGES, OPTIONS)
    assert completion.text == REPLY
    assert fake_time.sleeps == [0.5, 1.0, 2.0]


def test_it_stops_backing_off_at_the_deadline_and_falls_back_to_extractive(fake_time, server):
    server.fail(500, times=20)
    completion = make_router(fake_time, server).complete(MESSAGES, OPTIONS)
    # 0.5 + 1 + 2 + 4 + 8 = 15.5 s; another 16 s would pass the 30 s deadline.
    assert fake_time.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert len(server.chat_requests) == 6
    assert completion.provider == "extractive"
    assert completion.text.startswith(MODEL_FAILED["en"])
    assert "The breaker opens above a 10% failure rate. [1]" in completion.text


def test_it_retries_a_connection_dropped_before_the_first_token(fake_time, server):
    server.reply(cut_after=0)
    stream = make_router(fake_time, server).stream(MESSAGES, OPTIONS)
    assert "".join(stream) == REPLY
    assert fake_time.sleeps == [0.5]


def test_it_falls_back_to_extractive_when_the_first_token_is_late(fake_time, server):
    server.reply(stall_after=0)
    started = time.monotonic()
    stream = make_router(fake_time, server).stream(MESSAGES, CompletionOptions(first_token_timeout_s=0.2))
    text = "".join(stream)
    assert time.monotonic() - started < 1.5
    assert stream.provider == "extractive"
    assert text.startswith(MODEL_TIMED_OUT["en"])
    assert outcomes(stream.attempts) == [("primary", "error"), ("extractive", "ok")]
    assert "stalled" in stream.attempts[0].error


def test_it_ends_a_stream_cut_after_tokens_with_the_partial_text(fake_time, server, backup):
    server.reply(cut_after=3)
    router = make_router(fake_time, server, backup)
    stream = router.stream(MESSAGES, OPTIONS)
    received = []
    with pytest.raises(LLMStreamInterrupted) as raised:
        for piece in stream:
            received.append(piece)
    assert received == ["The ", "breaker ", "opens "]
    assert raised.value.partial_text == "The breaker opens "
    assert stream.text == "The breaker opens " and stream.is_partial
    assert raised.value.provider == "primary"
    assert "stream broke after 18 characters" in str(raised.value)
    assert backup.chat_requests == []  # no switching models mid-answer
    assert outcomes(stream.attempts) == [("primary", "ok"), ("primary", "error")]


def test_it_filters_think_blocks_through_the_router(fake_time, server):
    server.reply(chunks=("<thi", "nk>let me see</th", "ink>\n\nThe breaker", " opens."))
    assert "".join(make_router(fake_time, server).stream(MESSAGES, OPTIONS)) == "The breaker opens."


def test_it_opens_the_breaker_and_skips_the_provider(fake_time, server):
    server.fail(401, times=10)
    router = make_router(fake_time, server, min_calls=3)
    for _ in range(3):
        router.complete(MESSAGES, OPTIONS)
    assert router.breaker("primary").state is BreakerState.OPEN
    completion = router.complete(MESSAGES, OPTIONS)
    assert len(server.chat_requests) == 3
    assert completion.provider == "extractive"
    assert outcomes(completion.attempts) == [("primary", "skipped"), ("extractive", "ok")]
    assert "circuit open" in completion.attempts[0].error


def test_it_probes_with_hi_after_five_minutes_and_closes_again(fake_time, server):
    server.fail(401, times=3)
    router = make_router(fake_time, server, min_calls=3)
    for _ in range(3):
        router.complete(MESSAGES, OPTIONS)
    fake_time.now += 300
    assert router.breaker("primary").state is BreakerState.HALF_OPEN
    stream = router.stream(MESSAGES, OPTIONS)
    assert "".join(stream) == REPLY
    probe, real = server.chat_requests[-2:]
    assert probe.messages == [{"role": "user", "content": "hi"}]
    assert probe.body["stream"] is True and probe.body["max_tokens"] == 1
    assert real.messages[-1]["content"] == "When does the breaker open?"
    assert outcomes(stream.attempts) == [("primary", "probe_ok"), ("primary", "ok")]
    assert router.breaker("primary").state is BreakerState.CLOSED


def test_it_opens_again_when_the_probe_fails(fake_time, server):
    server.fail(401, times=4)
    router = make_router(fake_time, server, min_calls=3)
    for _ in range(3):
        router.complete(MESSAGES, OPTIONS)
    fake_time.now += 300
    completion = router.complete(MESSAGES, OPTIONS)
    assert completion.provider == "extractive"
    assert outcomes(completion.attempts) == [("primary", "probe_failed"), ("extractive", "ok")]
    assert len(server.chat_requests) == 4  # the probe only
    assert router.breaker("primary").state is BreakerState.OPEN
    fake_time.now += 299
    assert router.breaker("primary").state is BreakerState.OPEN


def test_it_fails_a_probe_without_a_first_packet_in_time(fake_time, server):
    server.fail(401, times=3)
    router = make_router(fake_time, server, min_calls=3, probe_timeout_s=0.2)
    for _ in range(3):
        router.complete(MESSAGES, OPTIONS)
    fake_time.now += 300
    server.reply(headers_delay_s=5)
    started = time.monotonic()
    completion = router.complete(MESSAGES, OPTIONS)
    assert time.monotonic() - started < 1.5
    assert outcomes(completion.attempts) == [("primary", "probe_failed"), ("extractive", "ok")]
    assert BreakerOptions().probe_timeout_s == 5.0


def test_a_stream_cut_counts_against_the_breaker_and_a_closed_one_does_not(fake_time, server):
    router = make_router(fake_time, server, min_calls=2)
    stream = router.stream(MESSAGES, OPTIONS)
    next(stream)
    stream.close()  # the client went away: not the provider's fault
    assert router.breaker("primary").failure_rate == 0.0
    server.reply(cut_after=1)
    with pytest.raises(LLMStreamInterrupted):
        list(router.stream(MESSAGES, OPTIONS))
    assert router.breaker("primary").failure_rate == 1.0


def test_it_answers_with_extractive_alone_when_no_model_is_configured(fake_time):
    router = ModelRouter([ExtractiveProvider()])
    assert not router.has_model
    assert router.providers == ()
    stream = router.stream(MESSAGES, OPTIONS)
    assert "".join(stream).startswith(DISCLAIMER["en"])
    assert stream.provider == "extractive"


def test_it_raises_unavailable_when_even_the_fallback_fails(fake_time, server, backup):
    server.fail(401)
    backup.fail(401)
    router = ModelRouter(
        [provider_for(server)],
        retry_policy=RetryPolicy(sleep=fake_time.sleep),
        fallback=provider_for(backup, "backup"),
    )
    with pytest.raises(LLMUnavailable, match="every provider failed"):
        router.complete(MESSAGES, OPTIONS)


def test_it_parses_json_from_whichever_provider_answered(fake_time, server):
    server.reply('Sure:\n```json\n{"intent": "KB", "confidence": 0.92}\n```')
    data = make_router(fake_time, server).complete_json(
        MESSAGES, OPTIONS, '"intent": string, "confidence": number'
    )
    assert data == {"intent": "KB", "confidence": 0.92}
    assert server.chat_requests[-1].body["response_format"] == {"type": "json_object"}


def test_a_stream_closed_from_another_thread_stops_at_its_next_piece(fake_time, server):
    server.reply(token_delay_s=0.1)
    stream = make_router(fake_time, server).stream(MESSAGES, OPTIONS)
    received = [next(stream)]
    closer = threading.Timer(0.05, stream.close)  # while the reader waits for piece two
    closer.start()
    received.extend(stream)
    closer.join()
    assert 1 <= len(received) <= 2
    assert stream.text == "".join(received)


# A reasoning model cut off before its answer: nothing but an unclosed think block.
REASONING_ONLY = ("<think>The user asks when the breaker opens; first I should", " weigh whether")


@pytest.mark.parametrize(
    "chunks", [REASONING_ONLY, ("<think>weighing</think>", "\n\n  "), ("   ", "\n"), ()],
    ids=["unterminated think", "think then whitespace", "whitespace", "empty"],
)
@pytest.mark.parametrize("call", ["complete", "stream"])
def test_a_reply_with_no_answer_is_a_failure_and_the_reader_answers_saying_so(fake_time, server, chunks, call):
    server.reply(chunks=chunks)
    router = make_router(fake_time, server)

    if call == "complete":
        result = router.complete(MESSAGES, OPTIONS)
        text, attempts = result.text, result.attempts
    else:
        stream = router.stream(MESSAGES, OPTIONS)
        text, attempts = "".join(stream), stream.attempts

    assert outcomes(attempts) == [("primary", "error"), ("extractive", "ok")]
    assert "no answer" in attempts[0].error and fake_time.sleeps == []  # the same prompt would think again
    assert text.startswith(MODEL_FAILED["en"]) and "The breaker opens above a 10% failure rate. [1]" in text
    assert "no language model" not in text  # one was configured: it failed
    assert router.recent_failures("primary")


def test_a_reply_with_no_answer_moves_on_to_the_next_model(fake_time, server, backup):
    server.reply(chunks=REASONING_ONLY)
    stream = make_router(fake_time, server, backup).stream(MESSAGES, OPTIONS)
    assert "".join(stream) == "The backup model answers." and stream.provider == "backup"


# --- a request's budget: after a model's first failure, every wait ends by its deadline ----------


def test_a_failure_leaves_the_request_only_its_budget_for_retries(fake_time, server):
    server.fail(500, times=20)
    router = make_router(fake_time, server).within(RequestBudget(2.0, clock=fake_time.clock))
    completion = router.complete(MESSAGES, OPTIONS)
    # 0.5 + 1 s waited; another 2 s would end past the deadline (the policy's own is 30 s).
    assert fake_time.sleeps == [0.5, 1.0]
    assert len(server.chat_requests) == 3
    assert completion.provider == "extractive" and completion.text.startswith(MODEL_FAILED["en"])


def test_a_spent_budget_skips_the_model_and_says_it_did_not_answer_in_time(fake_time, server):
    budget = RequestBudget(2.0, clock=fake_time.clock)
    budget.note_failure("rewrite: no model reply within its 500 ms budget")
    fake_time.now += 2.0
    stream = make_router(fake_time, server).within(budget).stream(MESSAGES, OPTIONS)
    assert "".join(stream).startswith(MODEL_TIMED_OUT["en"])
    assert server.chat_requests == []
    assert outcomes(stream.attempts) == [("primary", "skipped"), ("extractive", "ok")]
    assert "no time left: rewrite" in stream.attempts[0].error


def test_after_a_failure_a_hung_model_gets_only_the_time_the_request_has_left(server):
    server.reply(headers_delay_s=10)
    patient = OpenAICompatibleProvider(server.base_url, "sk", "fake-model", Timeouts(first_token_s=10), name="p")
    budget = RequestBudget(0.5)
    budget.note_failure("intent: no model reply within its 350 ms budget")
    started = time.monotonic()
    text = "".join(ModelRouter([patient]).within(budget).stream(MESSAGES, OPTIONS))
    assert time.monotonic() - started < 2  # not the provider's 10 s
    assert text.startswith(MODEL_TIMED_OUT["en"])


def test_the_budget_cuts_a_stream_that_falls_silent_mid_answer_and_the_reader_finishes_it(server, backup):
    server.reply(stall_after=3, stall_s=10)
    patient = OpenAICompatibleProvider(server.base_url, "sk", "fake-model", Timeouts(chunk_s=10), name="p")
    router = ModelRouter([patient, provider_for(backup, "backup")]).within(RequestBudget(2.0, stall_s=0.3))
    started = time.monotonic()
    stream = router.stream(MESSAGES, OPTIONS, finish_with_fallback=True)
    text = "".join(stream)
    assert time.monotonic() - started < 2  # not the provider's 10 s
    assert text.startswith("The breaker opens " + CUT_MARK + MODEL_STOPPED["en"])
    assert "The breaker opens above a 10% failure rate. [1]" in text
    assert stream.is_partial and stream.finished_by == "extractive" and stream.text == text
    assert backup.chat_requests == []  # another model would not continue this one's sentence
    assert outcomes(stream.attempts) == [("p", "ok"), ("p", "error"), ("extractive", "ok")]


def test_a_stream_cut_mid_answer_is_finished_by_the_reader_when_asked(fake_time, server):
    server.reply(cut_after=3)
    stream = make_router(fake_time, server).stream(MESSAGES, OPTIONS, finish_with_fallback=True)
    text = "".join(stream)
    assert text.startswith("The breaker opens " + CUT_MARK + MODEL_STOPPED["en"])
    assert stream.is_partial and stream.provider == "primary"
