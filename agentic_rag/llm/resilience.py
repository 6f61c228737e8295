"""When to stop calling a failing provider, and how long to wait before trying again."""

from __future__ import annotations

import enum
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from agentic_rag.llm.base import (
    CompletionOptions,
    LLMAuthError,
    LLMBadRequest,
    LLMEmptyReply,
    LLMError,
    LLMRateLimited,
    LLMTimeout,
    LLMUnavailable,
)

Clock = Callable[[], float]


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class BreakerOptions:
    failure_rate: float = 0.10  # OPEN when the window's failure share exceeds this
    window_s: float = 120.0
    min_calls: int = 5  # fewer calls in the window say nothing yet
    open_s: float = 300.0  # then HALF_OPEN: the next caller probes
    probe_timeout_s: float = 5.0


DEFAULT_BREAKER_OPTIONS = BreakerOptions()


class CircuitBreaker:
    """Three states: CLOSED → (failure rate) → OPEN → (open_s) → HALF_OPEN → probe → CLOSED or OPEN.

    A "call" is one use of the provider for one request, retries included, so a
    transient error that a retry absorbed does not count against it. Thread-safe.
    """

    def __init__(
        self, options: BreakerOptions = DEFAULT_BREAKER_OPTIONS, clock: Clock = time.monotonic
    ) -> None:
        self.options = options
        self._clock = clock
        self._lock = threading.Lock()
        self._calls: deque[tuple[float, bool]] = deque()  # (time, ok)
        self._state = BreakerState.CLOSED
        self._opened_at = 0.0
        self._is_probing = False

    @property
    def state(self) -> BreakerState:
        with self._lock:
            return self._current_state()

    @property
    def failure_rate(self) -> float:
        with self._lock:
            self._prune()
            return _failure_share(self._calls)

    def record_success(self) -> None:
        self._record(ok=True)

    def record_failure(self) -> None:
        self._record(ok=False)

    def begin_probe(self) -> bool:
        """Claim the HALF_OPEN probe; False if the breaker is not half-open or another caller has it."""
        with self._lock:
            if self._current_state() is not BreakerState.HALF_OPEN or self._is_probing:
                return False
            self._is_probing = True
            return True

    def end_probe(self, ok: bool) -> None:
        """Close the breaker on a good probe, open it for another period on a bad one."""
        with self._lock:
            self._is_probing = False
            self._calls.clear()
            if ok:
                self._state = BreakerState.CLOSED
            else:
                self._open()

    def _record(self, *, ok: bool) -> None:
        with self._lock:
            if self._current_state() is not BreakerState.CLOSED:
                return  # a late answer from before the breaker opened
            self._calls.append((self._clock(), ok))
            self._prune()
            has_enough = len(self._calls) >= self.options.min_calls
            if has_enough and _failure_share(self._calls) > self.options.failure_rate:
                self._open()

    def _open(self) -> None:
        self._state = BreakerState.OPEN
        self._opened_at = self._clock()
        self._calls.clear()

    def _current_state(self) -> BreakerState:
        is_rested = self._clock() - self._opened_at >= self.options.open_s
        if self._state is BreakerState.OPEN and is_rested:
            self._state = BreakerState.HALF_OPEN
        return self._state

    def _prune(self) -> None:
        horizon = self._clock() - self.options.window_s
        while self._calls and self._calls[0][0] < horizon:
            self._calls.popleft()


def _failure_share(calls: Sequence[tuple[float, bool]]) -> float:
    return sum(1 for _, ok in calls if not ok) / len(calls) if calls else 0.0


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of one provider.

    401/403, other 4xx and 502/503/504 fail fast: the next provider is tried at once.
    429 waits 2, 3, 5 s (the server's Retry-After instead when it gives one no longer
    than max_retry_after_s; a longer one means "not soon", so we move on). Other errors
    back off 0.5·2^n s. At most max_attempts tries, and no wait past deadline_s.
    """

    max_attempts: int = 10
    deadline_s: float = 30.0
    rate_limit_waits: tuple[float, ...] = (2.0, 3.0, 5.0)
    max_retry_after_s: float = 10.0
    backoff_base_s: float = 0.5
    fail_fast_statuses: frozenset[int] = frozenset({502, 503, 504})
    # A model that stalled once tends to stall again, and a person is waiting.
    retry_timeouts: bool = False
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)
    clock: Clock = field(default=time.monotonic, compare=False, repr=False)

    def next_wait(
        self, errors: Sequence[LLMError], elapsed_s: float, left_s: float | None = None
    ) -> float | None:
        """Seconds to wait before trying again after errors, or None to give up on the provider.

        left_s is what the request has left (None: no limit of its own); a wait that leaves
        no time for the next try is not taken.
        """
        if not errors or len(errors) >= self.max_attempts:
            return None
        wait = self._wait_for(errors)
        if wait is None or elapsed_s + wait > self.deadline_s:
            return None
        if left_s is not None and wait + MIN_CALL_S > left_s:
            return None
        return wait

    def _wait_for(self, errors: Sequence[LLMError]) -> float | None:
        error = errors[-1]
        # An empty reply comes back the same for the same prompt (a reasoning model out of tokens).
        if isinstance(error, LLMAuthError | LLMBadRequest | LLMEmptyReply):
            return None
        if isinstance(error, LLMUnavailable) and error.status in self.fail_fast_statuses:
            return None
        if isinstance(error, LLMTimeout) and not self.retry_timeouts:
            return None
        if isinstance(error, LLMRateLimited):
            return self._rate_limit_wait(error, sum(isinstance(e, LLMRateLimited) for e in errors))
        return self.backoff_base_s * 2 ** (len(errors) - 1)

    def _rate_limit_wait(self, error: LLMRateLimited, count: int) -> float | None:
        if count > len(self.rate_limit_waits):
            return None
        if error.retry_after is not None:
            return error.retry_after if error.retry_after <= self.max_retry_after_s else None
        return self.rate_limit_waits[count - 1]


# Less time than this left for a model call is none: the fallback answers instead.
MIN_CALL_S = 0.1


class RequestBudget:
    """How long one request may still wait on models, passed down to every call it makes.

    Unbounded until a model fails in the request (an error, a timeout, or the caller giving
    up on it); from then on all its model waits, retries included, end within
    `after_failure_s`, and the fallback answers. `stall_s` is how long a stream may fall
    silent mid-answer, from its first piece on. Thread-safe: a request's stages call
    models side by side.
    """

    def __init__(
        self, after_failure_s: float, stall_s: float | None = None, clock: Clock = time.monotonic
    ) -> None:
        self.after_failure_s = after_failure_s
        self.stall_s = stall_s
        self._clock = clock
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self.why = ""  # the failure that opened the deadline

    def note_failure(self, why: str) -> None:
        """Open the deadline, unless an earlier failure did."""
        with self._lock:
            if self._deadline is None:
                self._deadline = self._clock() + self.after_failure_s
                self.why = why

    def left_s(self) -> float | None:
        """Seconds until the deadline (0 once past it); None while no model has failed."""
        with self._lock:
            return None if self._deadline is None else max(0.0, self._deadline - self._clock())

    @property
    def is_spent(self) -> bool:
        left = self.left_s()
        return left is not None and left < MIN_CALL_S

    def bound(self, options: CompletionOptions, *, is_stream: bool) -> CompletionOptions:
        """The options with their waits ending by the deadline.

        A whole reply must arrive by then; a stream only its first piece: once the model
        writes, the deadline does not cut it off, a silence longer than `stall_s` does.
        """
        changes: dict[str, float] = {}
        if is_stream and self.stall_s is not None:
            changes["chunk_timeout_s"] = min(options.chunk_timeout_s or self.stall_s, self.stall_s)
        left = self.left_s()
        if left is not None:
            name = "first_token_timeout_s" if is_stream else "timeout_s"
            asked = getattr(options, name)
            changes[name] = max(MIN_CALL_S, min(asked, left) if asked else left)
        return replace(options, **changes) if changes else options
