"""A fake OpenAI-compatible server on 127.0.0.1, so the real client code runs against it:
in tests, and in `bench chat --fake-llm`.

    with FakeOpenAIServer(text="Paris is the capital of France.") as server:
        server.fail(429, times=2, retry_after="1")
        server.script(FakeReply(stall_after=3))
        provider = OpenAICompatibleProvider(server.base_url, "test-key", "fake-model")

Scripted replies are used once each, in order, by the next chat-completion requests
(the breaker's "hi" probe included); after them every request gets `server.default`.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Endpoint = Literal["chat", "embeddings"]


@dataclass(frozen=True)
class FakeReply:
    """What the server does for one request."""

    text: str = "Hello from the fake model."
    chunks: tuple[str, ...] | None = None  # the stream's pieces; default: text cut into words
    status: int = 200
    retry_after: str | None = None  # Retry-After header of an error reply
    error_message: str = "scripted failure"
    headers_delay_s: float = 0.0  # silence before the status line
    token_delay_s: float = 0.0  # pause before each stream piece
    stall_after: int | None = None  # after this many pieces, go silent for stall_s
    stall_s: float = 30.0
    cut_after: int | None = None  # after this many pieces, drop the connection
    raw_body: str | None = None  # sent as the whole reply instead of a completion or stream

    def pieces(self) -> list[str]:
        if self.chunks is not None:
            return list(self.chunks)
        return re.findall(r"\S+\s*|\s+", self.text)


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)  # time.monotonic() on arrival
    first_piece_at: float | None = None  # when the first streamed piece was written

    @property
    def messages(self) -> list[dict[str, str]]:
        return self.body.get("messages", [])


class FakeOpenAIServer:
    """`/v1/chat/completions` (whole or streamed) and `/v1/embeddings`, scriptable per test."""

    def __init__(
        self, *, text: str = FakeReply.text, model: str = "fake-model", embedding_dims: int = 8
    ) -> None:
        self.default = FakeReply(text=text)
        self.model = model
        self.embedding_dims = embedding_dims
        self.requests: list[RecordedRequest] = []
        self._queues: dict[Endpoint, deque[FakeReply]] = {"chat": deque(), "embeddings": deque()}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.02,), name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes stalled replies
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "start the server first"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting --------------------------------------------------------------------

    def script(self, *replies: FakeReply, endpoint: Endpoint = "chat") -> None:
        """Queue replies for the next requests to endpoint, one each."""
        with self._lock:
            self._queues[endpoint].extend(replies)

    def fail(
        self, status: int, *, times: int = 1, retry_after: str | None = None, endpoint: Endpoint = "chat"
    ) -> None:
        """Answer the next `times` requests with an HTTP error."""
        self.script(*[FakeReply(status=status, retry_after=retry_after)] * times, endpoint=endpoint)

    def reply(self, text: str | None = None, **changes: Any) -> None:
        """Queue one reply: the default one with text and other fields changed."""
        self.script(replace(self.default, **({"text": text} if text is not None else {}), **changes))

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def _next_reply(self, endpoint: Endpoint, request: RecordedRequest) -> FakeReply:
        with self._lock:
            self.requests.append(request)
            queue = self._queues[endpoint]
            return queue.popleft() if queue else self.default

    def _wait(self, seconds: float) -> bool:
        """Sleep unless the server stops first; True if it is stopping."""
        return self._stopping.wait(seconds) if seconds > 0 else self._stopping.is_set()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that time out and hang up are what these tests are about


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(
                200, {"object": "list", "data": [{"id": self.server.fake.model, "object": "model"}]}
            )
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._send_json(400, {"error": {"message": "body is not JSON"}})
            return
        endpoint: Endpoint | None = (
            "chat"
            if self.path.endswith("/chat/completions")
            else "embeddings"
            if self.path.endswith("/embeddings")
            else None
        )
        if endpoint is None:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        fake = self.server.fake
        request = RecordedRequest(self.path, dict(self.headers), body)
        reply = fake._next_reply(endpoint, request)
        if fake._wait(reply.headers_delay_s):
            return
        if reply.raw_body is not None:
            self._send_bytes(reply.status, reply.raw_body.encode())
        elif reply.status != 200:
            self._send_error_reply(reply)
        elif endpoint == "embeddings":
            self._send_json(200, _embeddings(body, fake))
        elif body.get("stream"):
            self._send_stream(reply, request)
        else:
            self._send_json(200, _completion(reply, body, fake.model))

    def _send_error_reply(self, reply: FakeReply) -> None:
        headers = {"Retry-After": reply.retry_after} if reply.retry_after else {}
        error = {"message": reply.error_message, "type": "fake_error", "code": reply.status}
        self._send_json(reply.status, {"error": error}, headers)

    def _send_json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(payload, ensure_ascii=False).encode(), headers)

    def _send_bytes(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _send_stream(self, reply: FakeReply, request: RecordedRequest) -> None:
        fake = self.server.fake
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for sent, event in enumerate(_stream_events(reply, fake.model)):
            if sent == reply.cut_after:
                self._drop_connection()
                return
            if sent == reply.stall_after and fake._wait(reply.stall_s):
                return
            if event.startswith("data: {") and fake._wait(reply.token_delay_s):
                return
            if sent == 0:
                request.first_piece_at = time.monotonic()
            self._write_chunk(event.encode())
        self._write_chunk(b"")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _drop_connection(self) -> None:
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)


def _stream_events(reply: FakeReply, model: str) -> Iterator[str]:
    """The SSE events of a streamed reply: one per piece, a finish event, then [DONE]."""
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model}
    for index, piece in enumerate(reply.pieces()):
        delta = {"role": "assistant", "content": piece} if index == 0 else {"content": piece}
        event = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        yield f"data: {json.dumps(event, ensure_ascii=False)}\n\n"
    yield ": keep-alive\n\n"
    yield f"data: {json.dumps({**base, 'choices': [{'index': 0, 'delta': {}, 'finish_reason': 'stop'}]})}\n\n"
    yield "data: [DONE]\n\n"


def _completion(reply: FakeReply, body: dict, model: str) -> dict:
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(reply.pieces())},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(reply.pieces())},
    }


def _embeddings(body: dict, fake: FakeOpenAIServer) -> dict:
    inputs = body.get("input", [])
    texts = [inputs] if isinstance(inputs, str) else list(inputs)
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": _vector(text, fake.embedding_dims)}
            for i, text in enumerate(texts)
        ],
        "model": body.get("model", fake.model),
        "usage": {"prompt_tokens": sum(len(t.split()) for t in texts), "total_tokens": 0},
    }


def _vector(text: str, dims: int) -> list[float]:
    """A deterministic vector: the same text always embeds the same way."""
    digest = hashlib.sha256(text.encode()).digest()
    while len(digest) < dims:
        digest += hashlib.sha256(digest).digest()
    return [round(byte / 127.5 - 1.0, 6) for byte in digest[:dims]]
