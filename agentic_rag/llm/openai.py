"""Any OpenAI-compatible `POST {base_url}/chat/completions` endpoint, over http.client.

OpenAI, DeepSeek, DashScope, GLM, Ollama, vLLM and llama.cpp's server all speak it. A
stream is Server-Sent Events: `data: {json}` lines ending with `data: [DONE]`. Timeouts
are socket timeouts re-armed per phase: connecting, waiting for the first packet, then
waiting for each next chunk, all inside one overall deadline.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from agentic_rag.cpu_slots import chat_slots
from agentic_rag.llm.base import (
    Completion,
    CompletionOptions,
    LLMAuthError,
    LLMBadRequest,
    LLMBadResponse,
    LLMEmptyReply,
    LLMError,
    LLMRateLimited,
    LLMTimeout,
    LLMUnavailable,
    Message,
    Usage,
    complete_json_with,
)
from agentic_rag.llm.thinking import OPEN_TAG, ThinkFilter, strip_think

USER_AGENT = "agentic-rag/1.0"


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = 5.0
    first_token_s: float = 15.0  # request sent → a stream's first event (the probe uses 5 s)
    chunk_s: float = 30.0  # longest silence between two chunks of a stream
    total_s: float = 120.0  # the whole call, also the wait for a non-streamed reply


DEFAULT_TIMEOUTS = Timeouts()


class _Call:
    """One HTTP exchange: its connection, socket and overall deadline."""

    def __init__(self, provider: OpenAICompatibleProvider, total_s: float) -> None:
        self.provider = provider
        self.deadline = time.monotonic() + total_s
        self.total_s = total_s
        self.connection: http.client.HTTPConnection | None = None
        # Kept apart: the connection forgets its socket when the reply says "Connection: close".
        self.sock: socket.socket | None = None
        self.response: http.client.HTTPResponse | None = None

    def arm(self, phase_s: float) -> None:
        """Allow the next socket read phase_s seconds, within the deadline."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise LLMTimeout(f"no complete reply within {self.total_s:g} s", provider=self.provider.name)
        assert self.sock is not None
        self.sock.settimeout(min(phase_s, remaining))

    def close(self) -> None:
        if self.response is not None:
            self.response.close()
        if self.connection is not None:
            self.connection.close()


class OpenAICompatibleProvider:
    """Chat completions from an OpenAI-compatible HTTP API, whole or streamed."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        *,
        name: str = "",
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = name or f"openai:{model}"
        self._api_key = api_key
        self._timeouts = timeouts
        self._extra_body = dict(extra_body or {})
        self._url = urlsplit(f"{self.base_url}/chat/completions")
        if self._url.scheme not in {"http", "https"} or not self._url.hostname:
            raise ValueError(f"{self.name}: base URL must be http(s)://host[:port]/path, got {base_url!r}")

    def __repr__(self) -> str:
        return f"OpenAICompatibleProvider({self.base_url!r}, model={self.model!r})"

    def complete(self, messages: Sequence[Message], options: CompletionOptions) -> Completion:
        call = _Call(self, options.timeout_s or self._timeouts.total_s)
        try:
            response = self._post(call, self._body(messages, options, stream=False), call.total_s)
            call.arm(call.total_s)
            payload = self._read_json(response, call.total_s)
        finally:
            call.close()
        return self._completion(payload)

    def stream(self, messages: Sequence[Message], options: CompletionOptions) -> Iterator[str]:
        call = _Call(self, options.timeout_s or self._timeouts.total_s)
        first_s = options.first_token_timeout_s or self._timeouts.first_token_s
        first_by = time.monotonic() + first_s
        try:
            response = self._post(call, self._body(messages, options, stream=True), first_s)
            if not response.getheader("Content-Type", "").startswith("text/event-stream"):
                # Some servers ignore `stream: true` and answer in one piece.
                call.arm(call.total_s)
                yield self._completion(self._read_json(response, call.total_s)).text
                return
            # The status line and the first event share one allowance: a server that sends its
            # headers at once and then nothing has not answered either.
            first_left_s = max(0.01, first_by - time.monotonic())
            chunk_s = min(options.chunk_timeout_s or self._timeouts.chunk_s, self._timeouts.chunk_s)
            yield from _answer_pieces(self._events(call, response, first_left_s, chunk_s), self.name)
        finally:
            call.close()

    def complete_json(
        self,
        messages: Sequence[Message],
        options: CompletionOptions,
        schema_hint: str,
        *,
        field: str = "answer",
    ) -> dict:
        return complete_json_with(self, messages, options, schema_hint, field=field)

    # --- request ----------------------------------------------------------------------

    def _body(self, messages: Sequence[Message], options: CompletionOptions, *, stream: bool) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": options.temperature,
            "stream": stream,
        }
        if options.max_tokens:
            body["max_tokens"] = options.max_tokens
        if options.stop:
            body["stop"] = list(options.stop)
        if options.json_mode:
            body["response_format"] = {"type": "json_object"}
        return {**body, **self._extra_body}

    def _headers(self, *, stream: bool) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
            "User-Agent": USER_AGENT,
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _post(self, call: _Call, body: dict, first_s: float) -> http.client.HTTPResponse:
        """Send the request and return a 200 response, or raise the status's error."""
        url = self._url
        connection_class = (
            http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        )
        kwargs: dict[str, Any] = {"context": ssl.create_default_context()} if url.scheme == "https" else {}
        # A call given less time than a connection may take (a request near its deadline) gets only that.
        connect_s = min(self._timeouts.connect_s, call.total_s)
        call.connection = connection_class(url.hostname, url.port, timeout=connect_s, **kwargs)
        path = url.path + (f"?{url.query}" if url.query else "")
        try:
            with chat_slots().lent():  # waiting on the model: another chat run may compute meanwhile
                call.connection.connect()
                call.sock = call.connection.sock
                call.arm(first_s)
                call.connection.request(
                    "POST", path, json.dumps(body).encode(), self._headers(stream=body["stream"])
                )
                response = call.response = call.connection.getresponse()
        except TimeoutError as exc:
            raise LLMTimeout(
                f"no reply from {self.base_url} within {first_s:g} s", provider=self.name
            ) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise LLMUnavailable(f"cannot reach {self.base_url}: {exc!r}", provider=self.name) from exc
        if response.status != 200:
            raise self._status_error(response)
        return response

    # --- response ---------------------------------------------------------------------

    def _events(
        self, call: _Call, response: http.client.HTTPResponse, first_s: float, chunk_s: float
    ) -> Iterator[str]:
        """Yield the content deltas of an SSE stream until `[DONE]`."""
        is_finished = False
        phase_s = first_s
        while True:
            call.arm(phase_s)
            line = self._readline(response, phase_s)
            if not line:
                if is_finished:
                    return
                raise LLMUnavailable("connection closed in the middle of the stream", provider=self.name)
            phase_s = chunk_s
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, `: keep-alive` comments, `event:` lines
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            choice = self._stream_choice(data)
            is_finished = is_finished or bool(choice.get("finish_reason"))
            content = (choice.get("delta") or {}).get("content")
            if content:
                yield content

    def _readline(self, response: http.client.HTTPResponse, phase_s: float) -> bytes:
        try:
            with chat_slots().lent():
                return response.readline()
        except TimeoutError as exc:
            raise LLMTimeout(f"stream stalled: nothing for {phase_s:.3g} s", provider=self.name) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise LLMUnavailable(f"connection lost mid-stream: {exc!r}", provider=self.name) from exc

    def _stream_choice(self, data: bytes) -> dict:
        try:
            event = json.loads(data)
        except json.JSONDecodeError as exc:
            raise LLMBadResponse(f"stream event is not JSON: {data[:120]!r}", provider=self.name) from exc
        if not isinstance(event, dict):
            raise LLMBadResponse(f"stream event is not an object: {data[:120]!r}", provider=self.name)
        if "error" in event:
            raise LLMUnavailable(f"error inside the stream: {_error_detail(event)}", provider=self.name)
        choices = event.get("choices") or [{}]  # a usage-only event has no choices
        return choices[0] if isinstance(choices[0], dict) else {}

    def _read_json(self, response: http.client.HTTPResponse, total_s: float) -> dict:
        try:
            with chat_slots().lent():
                raw = response.read()
        except TimeoutError as exc:
            raise LLMTimeout(f"reply not complete within {total_s:g} s", provider=self.name) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise LLMUnavailable(
                f"connection lost while reading the reply: {exc!r}", provider=self.name
            ) from exc
        try:
            payload = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise LLMBadResponse(f"reply is not JSON: {raw[:120]!r}", provider=self.name) from exc
        if not isinstance(payload, dict):
            raise LLMBadResponse(f"reply is not a JSON object: {raw[:120]!r}", provider=self.name)
        return payload

    def _completion(self, payload: dict) -> Completion:
        try:
            text = payload["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMBadResponse(
                f"reply has no choices[0].message.content: {payload!r:.200}", provider=self.name
            ) from exc
        answer = strip_think(text)
        if not answer.strip():
            raise LLMEmptyReply(_no_answer(text), provider=self.name)
        usage = payload.get("usage") or {}
        return Completion(
            text=answer,
            usage=Usage(usage.get("prompt_tokens", 0) or 0, usage.get("completion_tokens", 0) or 0),
            provider=self.name,
            model=payload.get("model") or self.model,
        )

    def _status_error(self, response: http.client.HTTPResponse) -> LLMError:
        status = response.status
        try:
            detail = _error_detail(json.loads(response.read(4096) or b"{}"))
        except (json.JSONDecodeError, UnicodeDecodeError, OSError, http.client.HTTPException):
            detail = response.reason
        message = f"HTTP {status} from {self.base_url}/chat/completions: {detail}"
        if status in (401, 403):
            return LLMAuthError(f"{message} (check the API key and model access)", provider=self.name)
        if status == 429:
            retry_after = parse_retry_after(response.getheader("Retry-After"))
            return LLMRateLimited(message, provider=self.name, retry_after=retry_after)
        if status == 408:
            return LLMTimeout(message, provider=self.name)
        if status >= 500:
            return LLMUnavailable(message, provider=self.name, status=status)
        return LLMBadRequest(message, provider=self.name, status=status)


def _answer_pieces(events: Iterator[str], provider: str) -> Iterator[str]:
    """The visible pieces of a stream (think blocks dropped), from the first with text on.

    Whitespace before the answer is held back, so a reply without one delivers nothing and
    ends in LLMEmptyReply: the router then moves on as it does after any failed call.
    """
    think, head, held = ThinkFilter(), "", ""
    for piece in events:
        if held.strip():
            if visible := think.feed(piece):
                yield visible
            continue
        head = (head + piece)[:200]  # enough to say what the empty reply held
        held += think.feed(piece)
        if held.strip():
            yield held
    rest = think.flush()
    if held.strip():
        if rest:
            yield rest
    elif (held + rest).strip():
        yield held + rest
    else:
        raise LLMEmptyReply(_no_answer(head), provider=provider)


def _no_answer(reply: str) -> str:
    if OPEN_TAG in reply:
        return "no answer in the reply, only reasoning (a think block, maybe cut off by max_tokens)"
    return "no answer in the reply: it was empty" + (" but for whitespace" if reply else "")


def parse_retry_after(value: str | None) -> float | None:
    """Return a Retry-After header's delay in seconds (it may be a number or a date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_detail(payload: Any) -> str:
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            return str(error.get("message") or error)[:300]
        return str(error)[:300]
    return str(payload)[:300]
