"""Circuit breaker states on a fake clock, and the retry schedule."""

from __future__ import annotations

import pytest

from agentic_rag.llm import (
    BreakerOptions,
    BreakerState,
    CircuitBreaker,
    CompletionOptions,
    LLMAuthError,
    LLMBadRequest,
    LLMBadResponse,
    LLMRateLimited,
    LLMTimeout,
    LLMUnavailable,
    RequestBudget,
    RetryPolicy,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock():
    return FakeClock()


def make_breaker(clock: FakeClock, **changes) -> CircuitBreaker:
    return CircuitBreaker(BreakerOptions(**changes), clock=clock)


def test_it_opens_when_the_failure_rate_exceeds_ten_percent(clock):
    breaker = make_breaker(clock, min_calls=5)
    for _ in range(9):
        breaker.record_success()
    breaker.record_failure()  # 1 in 10: not above 10%
    assert breaker.state is BreakerState.CLOSED
    breaker.record_failure()  # 2 in 11
    assert breaker.state is BreakerState.OPEN


def test_it_waits_for_the_minimum_number_of_calls(clock):
    breaker = make_breaker(clock, min_calls=5)
    for _ in range(4):
        breaker.record_failure()
    assert breaker.state is BreakerState.CLOSED
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN


def test_it_forgets_calls_older_than_the_window(clock):
    breaker = make_breaker(clock, min_calls=5, window_s=60)
    for _ in range(4):
        breaker.record_failure()
    clock.advance(61)
    breaker.record_failure()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.failure_rate == 1.0


def test_it_half_opens_after_five_minutes_and_closes_on_a_good_probe(clock):
    breaker = make_breaker(clock, min_calls=1)
    breaker.record_failure()
    clock.advance(299)
    assert breaker.state is BreakerState.OPEN
    assert not breaker.begin_probe()
    clock.advance(1)
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.begin_probe()
    assert not breaker.begin_probe()  # one prober at a time
    breaker.end_probe(ok=True)
    assert breaker.state is BreakerState.CLOSED
    assert breaker.failure_rate == 0.0


def test_it_opens_for_another_period_on_a_bad_probe(clock):
    breaker = make_breaker(clock, min_calls=1)
    breaker.record_failure()
    clock.advance(300)
    assert breaker.begin_probe()
    breaker.end_probe(ok=False)
    assert breaker.state is BreakerState.OPEN
    clock.advance(299)
    assert breaker.state is BreakerState.OPEN
    clock.advance(1)
    assert breaker.state is BreakerState.HALF_OPEN


def test_it_ignores_late_results_while_open(clock):
    breaker = make_breaker(clock, min_calls=1)
    breaker.record_failure()
    breaker.record_success()
    assert breaker.state is BreakerState.OPEN


def waits(policy: RetryPolicy, errors: list, elapsed_s: float = 0.0) -> list[float | None]:
    """The policy's answer after each prefix of errors."""
    return [policy.next_wait(errors[: n + 1], elapsed_s) for n in range(len(errors))]


def test_it_waits_2_3_5_seconds_on_429_then_gives_up():
    errors = [LLMRateLimited("429")] * 4
    assert waits(RetryPolicy(), errors) == [2.0, 3.0, 5.0, None]


def test_it_honours_a_short_retry_after_and_moves_on_after_a_long_one():
    assert RetryPolicy().next_wait([LLMRateLimited("429", retry_after=1.5)], 0) == 1.5
    assert RetryPolicy(max_retry_after_s=10).next_wait([LLMRateLimited("429", retry_after=60)], 0) is None


@pytest.mark.parametrize(
    "error",
    [
        LLMAuthError("401"),
        LLMBadRequest("404", status=404),
        LLMUnavailable("502", status=502),
        LLMUnavailable("503", status=503),
        LLMUnavailable("504", status=504),
        LLMTimeout("stalled"),
    ],
)
def test_it_fails_fast(error):
    assert RetryPolicy().next_wait([error], 0) is None


@pytest.mark.parametrize(
    "error", [LLMUnavailable("500", status=500), LLMUnavailable("reset"), LLMBadResponse("not JSON")]
)
def test_it_backs_off_exponentially_up_to_ten_tries(error):
    policy = RetryPolicy(deadline_s=10_000)
    assert waits(policy, [error] * 10) == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, None]


def test_it_never_waits_past_the_deadline():
    policy = RetryPolicy(deadline_s=30)
    errors = [LLMUnavailable("500", status=500)] * 6
    assert policy.next_wait(errors[:5], elapsed_s=15.5) == 8.0  # 0.5+1+2+4 waited, plus 8 fits
    assert policy.next_wait(errors, elapsed_s=23.5) is None  # 23.5 + 16 would pass 30


def test_it_retries_timeouts_when_configured():
    assert RetryPolicy(retry_timeouts=True).next_wait([LLMTimeout("stalled")], 0) == 0.5


def test_it_takes_no_wait_that_leaves_the_request_no_time_for_another_try():
    errors = [LLMUnavailable("500", status=500)] * 2
    assert RetryPolicy().next_wait(errors, 0.5, left_s=1.5) == 1.0
    assert RetryPolicy().next_wait(errors, 0.5, left_s=1.05) is None  # 1 s wait, then 0.05 s to try


def test_a_request_budget_is_unbounded_until_a_model_fails_then_runs_out(clock):
    budget = RequestBudget(2.0, clock=clock)
    clock.advance(60)
    assert budget.left_s() is None and not budget.is_spent
    budget.note_failure("primary: HTTP 500")
    clock.advance(1.5)
    budget.note_failure("primary: HTTP 500 again")  # the first failure set the deadline
    assert budget.left_s() == 0.5 and budget.why == "primary: HTTP 500"
    clock.advance(0.5)
    assert budget.left_s() == 0 and budget.is_spent


def test_a_request_budget_bounds_a_whole_reply_and_a_streams_first_token_not_the_stream(clock):
    budget = RequestBudget(2.0, stall_s=1.5, clock=clock)
    asked = CompletionOptions(timeout_s=30, first_token_timeout_s=10, chunk_timeout_s=20)
    assert budget.bound(asked, is_stream=False) == asked  # no failure yet
    assert budget.bound(asked, is_stream=True).chunk_timeout_s == 1.5  # silence is bounded always
    budget.note_failure("timed out")
    clock.advance(0.5)
    whole, stream = budget.bound(asked, is_stream=False), budget.bound(asked, is_stream=True)
    assert (whole.timeout_s, whole.first_token_timeout_s) == (1.5, 10)
    assert (stream.timeout_s, stream.first_token_timeout_s, stream.chunk_timeout_s) == (30, 1.5, 1.5)
    assert budget.bound(CompletionOptions(), is_stream=True).first_token_timeout_s == 1.5
