"""Oversized request bodies get a 413 before the app reads them, on every route."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.core.asgi import get_asgi_application

from agentic_rag.body_limit import BodyLimitMiddleware

KB = 1024
MB = 1024 * 1024
CHUNK = 64 * KB


@pytest.fixture(autouse=True)
def _small_budgets(settings):
    # Small budgets keep the bodies of these tests small; the logic is the same at any size.
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 256 * KB
    settings.MAX_REQUEST_BODY_BYTES = 2 * MB


class BodySource:
    """An ASGI receive that sends `total` bytes in chunks and counts what was pulled."""

    def __init__(self, total: int, *, chunk: int = CHUNK) -> None:
        self.left = total
        self.chunk = chunk
        self.pulled = 0
        self.is_done = False

    async def __call__(self) -> dict:
        if self.is_done:
            await asyncio.Future()  # a server waits for the client to leave after the body
        size = min(self.chunk, self.left)
        self.left -= size
        self.pulled += size
        self.is_done = self.left == 0
        return {"type": "http.request", "body": b"x" * size, "more_body": not self.is_done}


async def echo_length_app(scope, receive, send) -> None:
    """Read the whole body as Django does (dropping the request on a disconnect), answer its length."""
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})


def http_scope(path: str, *, length: int | None = None, method: str = "POST") -> dict:
    headers = [(b"host", b"testserver"), (b"content-type", b"application/octet-stream")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
        "headers": headers, "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
    }


async def call(app, scope: dict, receive) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert len(starts) == 1, sent
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return starts[0]["status"], dict(starts[0]["headers"]), body


async def test_it_refuses_a_declared_oversized_body_without_reading_any_of_it():
    source = BodySource(200 * MB)

    status, headers, body = await call(BodyLimitMiddleware(echo_length_app), http_scope("/login/", length=200 * MB), source)

    assert status == 413 and source.pulled == 0
    assert headers[b"connection"] == b"close"
    assert b"larger than the 0.2 MB this address accepts" in body  # the anonymous login form's budget


async def test_it_stops_pulling_a_chunked_body_at_the_budget():
    source = BodySource(200 * MB)

    status, _, body = await call(BodyLimitMiddleware(echo_length_app), http_scope("/login/"), source)

    assert status == 413 and b"0.2 MB" in body
    assert 256 * KB < source.pulled <= 256 * KB + CHUNK  # the rest of the 200 MB is never pulled


async def test_it_refuses_on_the_count_when_the_body_outgrows_its_content_length():
    source = BodySource(1 * MB)

    status, _, _ = await call(BodyLimitMiddleware(echo_length_app), http_scope("/login/", length=100), source)

    assert status == 413 and source.pulled <= 256 * KB + CHUNK


async def test_it_passes_a_body_within_the_budget_whole():
    status, _, body = await call(
        BodyLimitMiddleware(echo_length_app), http_scope("/login/", length=200 * KB), BodySource(200 * KB)
    )

    assert (status, body) == (200, str(200 * KB).encode())


@pytest.mark.parametrize("path", ["/kb/alice-kb/upload/", "/kb/alice-kb/evaluation/sets/import/"])
async def test_upload_routes_take_the_upload_budget(path):
    app = BodyLimitMiddleware(echo_length_app)

    within = await call(app, http_scope(path), BodySource(2 * MB - KB))
    over_declared = await call(app, http_scope(path, length=2 * MB + 1), BodySource(2 * MB + 1))
    over_streamed = await call(app, http_scope(path), BodySource(3 * MB))

    assert within[0] == 200 and within[2] == str(2 * MB - KB).encode()
    assert over_declared[0] == over_streamed[0] == 413 and b"2 MB" in over_declared[2]


async def test_an_api_refusal_is_json_in_the_api_error_shape():
    status, headers, body = await call(
        BodyLimitMiddleware(echo_length_app), http_scope("/api/chat", length=10 * MB), BodySource(10 * MB)
    )

    assert status == 413 and headers[b"content-type"] == b"application/json"
    error = json.loads(body)["error"]
    assert error["code"] == "body_too_large" and "0.2 MB" in error["message"]


async def test_an_unknown_path_gets_the_small_budget():
    status, _, _ = await call(BodyLimitMiddleware(echo_length_app), http_scope("/no/such/page/"), BodySource(MB))

    assert status == 413


async def test_other_protocols_pass_through_untouched():
    seen = {}

    async def app(scope, receive, send) -> None:
        seen["receive"] = receive

    async def receive() -> dict:
        return {"type": "lifespan.startup"}

    await BodyLimitMiddleware(app)({"type": "lifespan"}, receive, None)

    assert seen["receive"] is receive


async def test_a_response_the_app_already_started_is_not_followed_by_a_second_one():
    async def answers_first(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 202, "headers": []})
        while (await receive())["type"] != "http.disconnect":
            pass
        await send({"type": "http.response.body", "body": b"stopped"})

    status, _, body = await call(BodyLimitMiddleware(answers_first), http_scope("/login/"), BodySource(MB))

    assert (status, body) == (202, b"stopped")


@pytest.mark.django_db
async def test_django_never_sees_a_streamed_body_past_the_budget():
    source = BodySource(50 * MB)

    status, _, body = await call(BodyLimitMiddleware(get_asgi_application()), http_scope("/login/"), source)

    assert status == 413 and b"0.2 MB" in body
    assert source.pulled <= 256 * KB + CHUNK


@pytest.mark.django_db
async def test_django_still_serves_requests_within_the_budget():
    status, _, body = await call(
        BodyLimitMiddleware(get_asgi_application()), http_scope("/login/", method="GET", length=0), BodySource(0)
    )

    assert status == 200 and b"password" in body


@pytest.mark.django_db
async def test_the_served_application_refuses_an_oversized_api_body_unread():
    # Fails until agentic_rag/asgi.py wraps Django's HTTP app in BodyLimitMiddleware.
    from agentic_rag.asgi import application

    source = BodySource(10 * MB)

    status, headers, body = await call(application, http_scope("/api/chat", length=10 * MB), source)

    assert status == 413 and source.pulled == 0
    assert json.loads(body)["error"]["code"] == "body_too_large"


def test_daphne_no_longer_parses_form_bodies_itself():
    import inspect

    from daphne.http_protocol import WebRequest
    from twisted.web import http

    BodyLimitMiddleware(echo_length_app)
    request = WebRequest.__new__(WebRequest)
    request._parsePOSTFormSubmission = True  # what Twisted's Request.__init__ writes

    assert request._parsePOSTFormSubmission is False
    # The flag is still the one Twisted's parse reads (a rename would bring the parse back).
    assert "self._parsePOSTFormSubmission" in inspect.getsource(http.Request.requestReceived)


@pytest.mark.parametrize(
    ("target", "declared", "kept"),
    [
        (b"/login/", 10 * MB, 0),  # declared over budget: the middleware refuses it unread
        (b"/login/?next=/", None, 256 * KB + 1),  # streamed: one byte past the budget, to see
        (b"/kb/notes/upload/", None, 2 * MB + 1),  # an upload route's larger budget
        (b"/login/", 100 * KB, 100 * KB),  # within every budget: whole
    ],
)
def test_daphne_keeps_at_most_a_routes_budget_of_a_body(target, declared, kept):
    from types import SimpleNamespace

    from daphne.http_protocol import WebRequest

    BodyLimitMiddleware(echo_length_app)
    request = WebRequest.__new__(WebRequest)
    request.channel = SimpleNamespace(_path=target)

    request.gotLength(declared)
    for start in range(0, declared or 10 * MB, CHUNK):
        request.content.write(b"x" * min(CHUNK, (declared or 10 * MB) - start))
    request.content.seek(0)

    assert len(request.content.read()) == kept
