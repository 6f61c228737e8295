"""Route a request over an ordered list of providers, ending with the extractive one.

Each provider has a circuit breaker and is retried by the retry policy; on giving up the
router moves to the next provider. A router bound to a request's budget (`within`) ends
every wait of that request by the budget's deadline once a model has failed in it. A
stream may move on to another model only before its first token: after that the caller
has shown text to a person, so an error ends the stream with `LLMStreamInterrupted`,
which carries the partial text to store, or, when the caller asks, the fallback finishes
the answer after what the model wrote, saying that the model stopped.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TypeVar

from agentic_rag.llm.base import (
    Attempt,
    Completion,
    CompletionOptions,
    LLMEmptyReply,
    LLMError,
    LLMProvider,
    LLMStreamInterrupted,
    LLMTimeout,
    LLMUnavailable,
    Message,
    complete_json_with,
)
from agentic_rag.llm.extractive import ExtractiveProvider
from agentic_rag.llm.json_reply import extract_json, parse_json_reply
from agentic_rag.llm.resilience import BreakerState, CircuitBreaker, RequestBudget, RetryPolicy
from agentic_rag.llm.thinking import ThinkFilter, strip_think

__all__ = ["ModelRouter", "RoutedStream", "ThinkFilter", "extract_json", "parse_json_reply", "strip_think"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
BreakerFactory = Callable[[], CircuitBreaker]
Operation = Callable[[LLMProvider, CompletionOptions], T]
RECENT_FAILURES = 5
PROBE_MESSAGES = (Message("user", "hi"),)
_DONE = object()
DEFAULT_RETRY_POLICY = RetryPolicy()
# Between a model's unfinished answer and the fallback's, so the cut shows.
CUT_MARK = " …\n\n"


class _GaveUp(Exception):
    """The retry policy gave up on a provider."""


class ModelRouter:
    """An LLMProvider that tries its providers in order, with breakers, retries and fallback."""

    name = "router"

    def __init__(
        self,
        providers: Sequence[LLMProvider],
        breaker_factory: BreakerFactory = CircuitBreaker,
        retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        *,
        fallback: LLMProvider | None = None,
        budget: RequestBudget | None = None,
    ) -> None:
        """Route over providers; the last resort is fallback, else an ExtractiveProvider.

        An ExtractiveProvider at the end of providers is taken as the fallback: it cannot
        fail over the network, so it gets no breaker and no retries. budget, when given,
        bounds the waits of the one request this router serves.
        """
        chain = list(providers)
        if fallback is None:
            is_extractive_last = bool(chain) and isinstance(chain[-1], ExtractiveProvider)
            fallback = chain.pop() if is_extractive_last else ExtractiveProvider()
        self.providers: tuple[LLMProvider, ...] = tuple(chain)
        self.fallback = fallback
        self.retry_policy = retry_policy
        self.budget = budget
        self._breakers = {provider.name: breaker_factory() for provider in chain}
        # The last errors of each provider in this process, for the settings page.
        self._failures = {provider.name: deque(maxlen=RECENT_FAILURES) for provider in chain}

    @property
    def has_model(self) -> bool:
        """Whether a language model (not only the extractive fallback) is configured."""
        return bool(self.providers)

    def preferring(self, provider_name: str) -> ModelRouter:
        """This router with provider_name tried first; breakers and failures are shared."""
        first = [p for p in self.providers if p.name == provider_name]
        return self._sharing([*first, *(p for p in self.providers if p.name != provider_name)])

    def extractive_only(self) -> ModelRouter:
        """A router that only quotes the sources (a KB whose answers must not be written by a model)."""
        return self._sharing([])

    def within(self, budget: RequestBudget) -> ModelRouter:
        """This router for one request, its waits bounded by budget; breakers and failures are shared."""
        return self._sharing(self.providers, budget)

    def _sharing(self, providers: Sequence[LLMProvider], budget: RequestBudget | None = None) -> ModelRouter:
        router = ModelRouter(
            providers, retry_policy=self.retry_policy, fallback=self.fallback, budget=budget or self.budget
        )
        router._breakers = {p.name: self._breakers[p.name] for p in providers}
        router._failures = {p.name: self._failures[p.name] for p in providers}
        return router

    def breaker(self, provider_name: str) -> CircuitBreaker:
        return self._breakers[provider_name]

    def recent_failures(self, provider_name: str) -> list[tuple[float, str]]:
        """(time.time(), error) of the provider's last failures in this process, newest first."""
        return list(reversed(self._failures.get(provider_name, ())))

    def complete(self, messages: Sequence[Message], options: CompletionOptions) -> Completion:
        attempts: list[Attempt] = []
        provider, completion = self._first_success(
            lambda p, bounded: p.complete(messages, bounded), options, attempts
        )
        self._record_success(provider.name)
        return replace(completion, attempts=tuple(attempts))

    def stream(
        self, messages: Sequence[Message], options: CompletionOptions, *, finish_with_fallback: bool = False
    ) -> RoutedStream:
        """Return a lazy token stream; nothing is sent until it is iterated.

        finish_with_fallback: when the model breaks off mid-answer, the fallback's answer
        follows what it wrote (for answers read by a person, not for JSON).
        """
        return RoutedStream(self, messages, options, finish_with_fallback=finish_with_fallback)

    def complete_json(
        self,
        messages: Sequence[Message],
        options: CompletionOptions,
        schema_hint: str,
        *,
        field: str = "answer",
    ) -> dict:
        return complete_json_with(self, messages, options, schema_hint, field=field)

    # --- the chain --------------------------------------------------------------------

    def _first_success(
        self,
        operation: Operation[T],
        options: CompletionOptions,
        attempts: list[Attempt],
        *,
        is_stream: bool = False,
    ) -> tuple[LLMProvider, T]:
        """Run operation on the first provider that is available and succeeds in time."""
        is_timed_out = False
        for provider in self.providers:
            if self.budget is not None and self.budget.is_spent:
                attempts.append(Attempt(provider.name, "skipped", error=f"no time left: {self.budget.why}"))
                is_timed_out = True
                continue
            if not self._is_available(provider, attempts):
                continue
            try:
                return provider, self._with_retries(provider, operation, options, attempts, is_stream)
            except _GaveUp as gave_up:
                self._breakers[provider.name].record_failure()
                is_timed_out = isinstance(gave_up.__cause__, LLMTimeout)
        fallback = self._fallback_now("timed_out" if is_timed_out else "failed")
        started = time.perf_counter()
        try:
            result = operation(fallback, options)
        except LLMError as error:
            attempts.append(Attempt(fallback.name, "error", _ms_since(started), str(error)))
            summary = "; ".join(f"{a.provider}: {a.error or a.outcome}" for a in attempts)
            raise LLMUnavailable(f"every provider failed ({summary})", provider=self.name) from error
        if self.providers:
            logger.warning("llm fallback to %s after: %s", self.fallback.name, [a.error for a in attempts])
        attempts.append(Attempt(fallback.name, "ok", _ms_since(started)))
        return fallback, result

    def _fallback_now(self, how: str = "failed") -> LLMProvider:
        """The fallback, saying in its answer how the configured models failed ("failed",
        "timed_out", "stopped"), when there are any (without one, it says that no model is in use)."""
        after_failure = getattr(self.fallback, "after_failure", None)
        return after_failure(how) if self.providers and after_failure is not None else self.fallback

    def _with_retries(
        self,
        provider: LLMProvider,
        operation: Operation[T],
        options: CompletionOptions,
        attempts: list[Attempt],
        is_stream: bool,
    ) -> T:
        policy, budget = self.retry_policy, self.budget
        first_try_at = policy.clock()
        errors: list[LLMError] = []
        while True:
            started = time.perf_counter()
            try:
                bounded = budget.bound(options, is_stream=is_stream) if budget is not None else options
                result = operation(provider, bounded)
            except LLMError as error:
                errors.append(error)
                if budget is not None:
                    budget.note_failure(str(error))
                left_s = budget.left_s() if budget is not None else None
                wait = policy.next_wait(errors, policy.clock() - first_try_at, left_s)
                attempts.append(Attempt(provider.name, "error", _ms_since(started), str(error), wait or 0.0))
                self._failures[provider.name].append((time.time(), str(error)))
                logger.warning("llm %s failed (try %d): %s", provider.name, len(errors), error)
                if wait is None:
                    raise _GaveUp from error
                policy.sleep(wait)
                continue
            attempts.append(Attempt(provider.name, "ok", _ms_since(started)))
            return result

    def _is_available(self, provider: LLMProvider, attempts: list[Attempt]) -> bool:
        """Say whether provider's breaker lets a call through, probing it when half-open."""
        breaker = self._breakers[provider.name]
        state = breaker.state
        if state is BreakerState.CLOSED:
            return True
        if not breaker.begin_probe():
            attempts.append(Attempt(provider.name, "skipped", error=f"circuit {state}"))
            return False
        started = time.perf_counter()
        probe_s = breaker.options.probe_timeout_s
        left_s = self.budget.left_s() if self.budget is not None else None
        error = _probe(provider, probe_s if left_s is None else min(probe_s, left_s))
        breaker.end_probe(ok=error is None)
        outcome = "probe_ok" if error is None else "probe_failed"
        attempts.append(Attempt(provider.name, outcome, _ms_since(started), error or ""))
        return error is None

    def _record_success(self, provider_name: str) -> None:
        if provider_name in self._breakers:
            self._breakers[provider_name].record_success()

    def _record_failure(self, provider_name: str, error: str = "") -> None:
        if provider_name in self._breakers:
            self._breakers[provider_name].record_failure()
            if error:
                self._failures[provider_name].append((time.time(), error))


class RoutedStream:
    """Tokens from whichever provider answered; iterate it once.

    `provider` and `model` are known from the first token on, `text` is everything
    delivered so far and `attempts` lists every try, for traces. `is_partial` says the
    model broke off mid-answer; `finished_by` names the fallback that then finished it.
    """

    def __init__(
        self,
        router: ModelRouter,
        messages: Sequence[Message],
        options: CompletionOptions,
        *,
        finish_with_fallback: bool = False,
    ) -> None:
        self.provider = ""
        self.model = ""
        self.attempts: list[Attempt] = []
        self.is_partial = False
        self.finished_by = ""
        self._router = router
        self._messages = messages
        self._options = options
        self._finish_with_fallback = finish_with_fallback
        self._pieces: list[str] = []
        self._tokens: Iterator[str] | None = None
        self._is_close_requested = False

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        if self._tokens is None:
            if self._is_close_requested:
                raise StopIteration
            self._tokens = self._run()
        return next(self._tokens)

    def close(self) -> None:
        """Stop the stream and its connection (the client went away)."""
        self._is_close_requested = True
        if self._tokens is not None:
            # ValueError: it is running in another thread, which stops at its next piece.
            with contextlib.suppress(ValueError):
                self._tokens.close()

    def _run(self) -> Iterator[str]:
        router = self._router
        started = router._first_success(self._start, self._options, self.attempts, is_stream=True)
        provider, (tokens, first) = started
        self.provider, self.model = provider.name, getattr(provider, "model", provider.name)
        try:
            for piece in _prepend(first, tokens):
                if self._is_close_requested:
                    return
                self._pieces.append(piece)
                yield piece
        except LLMError as error:
            self.is_partial = True
            router._record_failure(provider.name, str(error))
            self.attempts.append(Attempt(provider.name, "error", error=str(error)))
            message = f"stream broke after {len(self.text)} characters: {error.detail}"
            interrupted = LLMStreamInterrupted(message, provider=provider.name, partial_text=self.text)
            is_model = provider.name in router._breakers  # the fallback has none, and nothing to fall to
            if not (self._finish_with_fallback and is_model):
                raise interrupted from error
            logger.warning("llm %s stopped mid-answer, the fallback finishes it: %s", provider.name, error)
            if router.budget is not None:
                router.budget.note_failure(str(error))
            finishing = self._finish(interrupted)
        else:
            router._record_success(provider.name)
            return
        finally:
            _close(tokens)
        yield from finishing

    def _finish(self, interrupted: LLMStreamInterrupted) -> Iterator[str]:
        """The fallback's answer after what the model wrote, under a label saying it stopped.

        The model's words stay as they were shown; the quoted sources follow after a visible
        cut, so no quote reads as the end of the model's sentence.
        """
        fallback = self._router._fallback_now("stopped")
        started = time.perf_counter()
        try:
            pieces = [CUT_MARK, *fallback.stream(self._messages, self._options)]
        except LLMError as error:
            self.attempts.append(Attempt(fallback.name, "error", _ms_since(started), str(error)))
            raise interrupted from error
        self.attempts.append(Attempt(fallback.name, "ok", _ms_since(started)))
        self.finished_by = fallback.name
        for piece in pieces:
            if self._is_close_requested:
                return
            self._pieces.append(piece)
            yield piece

    def _start(self, provider: LLMProvider, options: CompletionOptions) -> tuple[Iterator[str], str]:
        """Open provider's stream and wait for its first non-empty piece; a stream without one
        is a failed call (LLMEmptyReply), so the next provider answers."""
        tokens = iter(provider.stream(self._messages, options))
        try:
            for piece in tokens:
                if piece:
                    return tokens, piece
        except BaseException:
            _close(tokens)
            raise
        raise LLMEmptyReply("no answer in the reply: the stream was empty", provider=provider.name)


def _probe(provider: LLMProvider, timeout_s: float) -> str | None:
    """Send "hi" and wait for the first packet; return the error, or None when it came."""
    options = CompletionOptions(max_tokens=1, timeout_s=timeout_s, first_token_timeout_s=timeout_s)
    tokens = iter(provider.stream(PROBE_MESSAGES, options))
    try:
        next(tokens, None)
    except LLMError as error:
        return str(error)
    finally:
        _close(tokens)
    return None


def _prepend(first: str, tokens: Iterator[str]) -> Iterator[str]:
    if first:
        yield first
    yield from (piece for piece in tokens if piece)


def _close(tokens: Iterator[str]) -> None:
    close = getattr(tokens, "close", None)
    if close is not None:
        close()


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)
