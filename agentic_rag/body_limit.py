"""Refuse oversized request bodies at the ASGI edge, before Django buffers them.

Django reads a whole body before it resolves a view, and checks MAX_UPLOAD_MB only per file
once the multipart body is parsed, so without this every route, anonymous ones included,
took bodies of any size. `BodyLimitMiddleware` wraps Django's HTTP app: it answers 413 when
Content-Length is over the route's budget without reading the body, and it counts the bytes
of a body sent without one (chunked), stopping at the budget. It then tells the app the
client went away (Django drops such a request) and never pulls the rest of the body.

Under daphne, Twisted has already received the body (to a temporary file past 100 KB) when
the app is called, and daphne then queues all of it in memory; by default Twisted also parsed
a form body into memory for an API that daphne never reads, about ten times the body's size.
`guard_daphne_bodies` keeps daphne's copy within the route's budget and turns that parse off.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote

from django.conf import settings
from django.urls import Resolver404, resolve

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Budget = Callable[[Scope], int]

DISCONNECT: Message = {"type": "http.disconnect"}


def route_budget(scope: Scope) -> int:
    """Return how many body bytes the request's route accepts: uploads much more than forms."""
    path = scope["path"].removeprefix(scope.get("root_path", ""))
    try:
        name = resolve(path).url_name
    except Resolver404:
        name = None
    if name in settings.UPLOAD_URL_NAMES:
        return settings.MAX_REQUEST_BODY_BYTES
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


class BodyLimitMiddleware:
    """Wrap an ASGI app so that no HTTP request body past its route's budget reaches it."""

    def __init__(self, app: ASGIApp, *, budget: Budget = route_budget) -> None:
        self.app = app
        self.budget = budget
        guard_daphne_bodies()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        # Most bodies are under every route's budget: resolve the route only for the others.
        small = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        declared = _content_length(scope)
        if declared is not None and declared > small:
            limit = self.budget(scope)
            if declared > limit:
                logger.warning("refused a %s-byte body for %s", declared, scope["path"])
                return await send_refusal(scope, send, limit)
        guard = _BodyGuard(receive, send, lambda: self.budget(scope), small)
        await self.app(scope, guard.receive, guard.send)
        if guard.overflowed and not guard.response_started:
            logger.warning("refused a streamed body over %s bytes for %s", guard.limit, scope["path"])
            await send_refusal(scope, send, guard.limit)


def guard_daphne_bodies() -> None:
    """Make daphne keep no more of a request body than its route accepts, and parse none of it.

    Daphne calls the app only once Twisted has received the whole body, and then queues all of
    it in memory at once: a 200 MB body cost 200 MB however early the middleware refused it.
    So the body's file keeps at most the route's budget and one byte more (enough for the
    middleware to see the overflow), and nothing of a body whose declared length is already
    over it (the middleware refuses that by its Content-Length). Twisted's parse of form
    bodies into request.args, which daphne never reads, is switched off.
    """
    from daphne.http_protocol import WebRequest

    # Twisted's Request.__init__ sets this flag; a property that ignores the write wins over it.
    WebRequest._parsePOSTFormSubmission = property(lambda request: False, lambda request, value: None)
    if not getattr(WebRequest, "_bodies_capped", False):
        WebRequest.gotLength = _capping_got_length(WebRequest.gotLength)
        WebRequest._bodies_capped = True


def _capping_got_length(got_length: Callable[[Any, int | None], None]) -> Callable[[Any, int | None], None]:
    def capped(request, length: int | None) -> None:
        got_length(request, length)
        if length is not None and length <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            return  # within every route's budget
        budget = _budget_of_target(getattr(request.channel, "_path", None))
        keep = 0 if length is not None and length > budget else budget + 1
        request.content = CappedBody(request.content, keep)

    return capped


def _budget_of_target(target: bytes | None) -> int:
    """The budget of a raw request target ("/kb/x/upload/?a=1"); the largest one if unknown."""
    if not target:
        return settings.MAX_REQUEST_BODY_BYTES
    path = unquote(target.split(b"?", 1)[0].decode("latin-1"))
    return route_budget({"path": path})


class CappedBody:
    """A request body's file that keeps the first `room` bytes written to it and drops the rest."""

    def __init__(self, file, room: int) -> None:
        self._file = file
        self._room = room

    def write(self, data: bytes) -> None:
        if self._room > 0:
            kept = data[: self._room]
            self._file.write(kept)
            self._room -= len(kept)

    def __getattr__(self, name: str) -> Any:  # read, seek, close, closed: the file's own
        return getattr(self._file, name)


class _BodyGuard:
    """Count body bytes as the app pulls them; past the budget, answer as if the client left."""

    def __init__(self, receive: Receive, send: Send, budget: Callable[[], int], small: int) -> None:
        self._receive = receive
        self._send = send
        self._budget = budget
        self._checked = small  # bytes known to be allowed without resolving the route
        self.limit: int | None = None
        self.received = 0
        self.overflowed = False
        self.response_started = False

    async def receive(self) -> Message:
        if self.overflowed:
            return DISCONNECT
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self._checked and self.received > self._allowed():
                self.overflowed = True
                return DISCONNECT
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.response_started = True
        await self._send(message)

    def _allowed(self) -> int:
        if self.limit is None:
            self.limit = self._budget()
        return self.limit


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed length; the count still applies
    return None


async def send_refusal(scope: Scope, send: Send, limit: int | None) -> None:
    """Answer 413: JSON in the API's error shape under /api/, a short page elsewhere."""
    megabytes = f"{(limit or 0) / 2**20:.1f}".removesuffix(".0")
    message = f"The request is larger than the {megabytes} MB this address accepts; nothing was saved."
    if scope["path"].startswith("/api/"):
        body = json.dumps({"error": {"message": message, "code": "body_too_large"}}).encode()
        content_type = b"application/json"
    else:
        body = f"<!doctype html><title>Too large</title><p>{message}</p>\n".encode()
        content_type = b"text/html; charset=utf-8"
    # Connection: close, since the unread rest of the body must not be taken for a next request.
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
