"""The provider protocol, its value types and the errors every provider raises."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, runtime_checkable

from agentic_rag.llm.json_reply import extract_json

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True)
class CompletionOptions:
    """How to ask; None timeouts mean the provider's own defaults."""

    temperature: float = 0.1
    max_tokens: int | None = None
    timeout_s: float | None = None  # the whole call
    first_token_timeout_s: float | None = None  # request sent → first packet of the reply
    # longest silence between two chunks of a stream (a provider's own limit, if shorter, holds)
    chunk_timeout_s: float | None = None
    stop: tuple[str, ...] = ()
    json_mode: bool = False


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class Attempt:
    """One try of one provider, for traces."""

    provider: str
    outcome: Literal["ok", "error", "skipped", "probe_ok", "probe_failed"]
    ms: float = 0.0
    error: str = ""
    wait_s: float = 0.0  # the pause taken after this attempt before the next one


@dataclass(frozen=True)
class Completion:
    text: str
    usage: Usage
    provider: str
    model: str
    attempts: tuple[Attempt, ...] = field(default=())


@runtime_checkable
class LLMProvider(Protocol):
    name: str

    def complete(self, messages: Sequence[Message], options: CompletionOptions) -> Completion: ...

    def stream(self, messages: Sequence[Message], options: CompletionOptions) -> Iterator[str]: ...

    def complete_json(
        self,
        messages: Sequence[Message],
        options: CompletionOptions,
        schema_hint: str,
        *,
        field: str = "answer",
    ) -> dict:
        """Ask for one JSON object (schema_hint lists its fields); parse it with extract_json."""
        ...


# --- errors -------------------------------------------------------------------------


class LLMError(Exception):
    """Base class of every model failure; `provider` says whose, `detail` says what."""

    def __init__(self, message: str, *, provider: str = "") -> None:
        super().__init__(f"{provider}: {message}" if provider else message)
        self.provider = provider
        self.detail = message


class LLMTimeout(LLMError):
    """No first packet, or no next chunk, or no end within the allowed time."""


class LLMRateLimited(LLMError):
    """HTTP 429; `retry_after` is the server's hint in seconds, when it gave one."""

    def __init__(self, message: str, *, provider: str = "", retry_after: float | None = None) -> None:
        super().__init__(message, provider=provider)
        self.retry_after = retry_after


class LLMAuthError(LLMError):
    """HTTP 401/403: the key is missing, wrong or not allowed to use the model."""


class LLMUnavailable(LLMError):
    """The service is down or unreachable: 5xx, refused or reset connections."""

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        super().__init__(message, provider=provider)
        self.status = status


class LLMBadRequest(LLMError):
    """Another 4xx: the request itself is wrong (unknown model, bad parameter)."""

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        super().__init__(message, provider=provider)
        self.status = status


class LLMBadResponse(LLMError):
    """The service answered, but not with what the protocol promises."""


class LLMEmptyReply(LLMBadResponse):
    """The reply held no answer: empty, whitespace, or only reasoning (a think block never closed)."""


class LLMStreamInterrupted(LLMError):
    """A stream failed after tokens were delivered; `partial_text` is what got through."""

    def __init__(self, message: str, *, provider: str = "", partial_text: str = "") -> None:
        super().__init__(message, provider=provider)
        self.partial_text = partial_text


# --- helpers shared by providers ------------------------------------------------------

JSON_INSTRUCTION = (
    "Reply with one JSON object and nothing else, no Markdown fences. Its fields: {schema_hint}"
)


def json_messages(messages: Sequence[Message], schema_hint: str) -> list[Message]:
    """Append the JSON-only instruction to the conversation's system message."""
    instruction = JSON_INSTRUCTION.format(schema_hint=schema_hint)
    if messages and messages[0].role == "system":
        first = Message("system", f"{messages[0].content}\n\n{instruction}")
        return [first, *messages[1:]]
    return [Message("system", instruction), *messages]


def complete_json_with(
    provider: LLMProvider,
    messages: Sequence[Message],
    options: CompletionOptions,
    schema_hint: str,
    *,
    field: str = "answer",
) -> dict:
    """Ask provider for a JSON object and parse the reply with the fallback chain."""
    completion = provider.complete(json_messages(messages, schema_hint), replace(options, json_mode=True))
    return extract_json(completion.text, field=field)
