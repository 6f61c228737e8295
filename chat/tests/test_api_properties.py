"""Property tests (hypothesis): whatever a client sends to the JSON API or the two websockets,
the answer is never a 500 and the socket never closes with 1011; it stays open for the next.

The API's routes come from the URLconf, so a route added under /api/ is fuzzed too. Bodies
are arbitrary JSON (fields the API knows, holding any value), arbitrary bytes, nesting of
any depth, lone surrogates, NULs, NaN and numbers of any size, in JSON and form encodings.
`make fuzz` runs these long; the counts of what was sent are printed at the end of the module.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections import Counter
from urllib.parse import quote

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentic_rag.asgi import application
from chat.workers import AGENT_TYPES

from .web_factories import ingest, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

# At least this many examples; more under `make fuzz` (its profile sets the default).
PROPERTY = settings(
    max_examples=max(60, settings.default.max_examples),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
SENT: Counter[str] = Counter()


# --- what clients send ----------------------------------------------------------------------

FIELDS = (
    "message", "session_id", "kb", "agent_type", "agent", "document_id", "selected_section", "conversation_id",
    "conversation_history", "response_mode", "stream", "project_info", "message_id", "is_positive", "comment",
    "metadata", "action", "HEADERS", "index", "position", "content", "code",
)  # fmt: skip
# Values that get a request past the first checks, so the deeper paths are fuzzed too.
KNOWN = (
    "What is hybrid search?", "How do we review incidents?", "hi", "alice-kb", "auto", "json", "sse", "stop",
    "1", "0", "1.1", "", " ", *AGENT_TYPES, "alice-kb:react_agent", "alice-kb:react_agent:retrieve_only",
)  # fmt: skip

# Surrogates and NULs included: hypothesis leaves out the surrogate category unless told.
any_text = st.text(st.characters(exclude_categories=()), max_size=30)
numbers = st.one_of(st.integers(), st.integers(min_value=-(10**40), max_value=10**40), st.floats())
scalars = st.one_of(st.none(), st.booleans(), numbers, any_text, st.sampled_from(KNOWN))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text | st.sampled_from(FIELDS), inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)
# Near-valid requests: a message and a few fields holding likely values, so that some reach
# the pipeline, the document chat and the feedback store.
plausible_objects = st.fixed_dictionaries(
    {"message": st.sampled_from(KNOWN) | any_text},
    optional={field: st.sampled_from(KNOWN) | st.integers(0, 5) | st.none() | st.booleans() for field in FIELDS if field != "message"},
)


def _dumps(value) -> str:
    return json.dumps(value)  # ASCII, so a surrogate goes out as its escape; NaN as NaN


def _nested(depth: int, opener: str) -> str:
    closer = {"[": "]", '{"a":': "}", '{"message": "hi", "x": [': "]}"}[opener]
    return opener * depth + "1" + closer * depth


json_texts = st.one_of(
    json_objects.map(_dumps),
    plausible_objects.map(_dumps),
    json_values.map(_dumps),
    st.builds(_nested, st.integers(min_value=1, max_value=120_000), st.sampled_from(["[", '{"a":', '{"message": "hi", "x": ['])),
    st.builds(lambda digits, field: f'{{"{field}": {digits}}}', st.integers(1, 6000).map(lambda n: "9" * n), st.sampled_from(FIELDS)),
    st.sampled_from(['{"message": 1e999}', '{"message_id": -1e400}', '{"metadata": {"x": NaN}}', "[", "{", '"\\ud800"', "\x00"]),
    any_text,
)
bodies = st.one_of(
    st.tuples(json_texts.map(lambda text: text.encode("utf-8", "surrogatepass")), st.just("application/json")),
    st.tuples(st.binary(max_size=300), st.sampled_from(["application/json", "application/x-www-form-urlencoded", "text/plain"])),
    st.tuples(
        st.dictionaries(st.sampled_from(FIELDS), any_text | st.sampled_from(KNOWN), max_size=5).map(
            lambda data: "&".join(f"{quote(k)}={quote(v, errors='surrogatepass')}" for k, v in data.items()).encode()
        ),
        st.just("application/x-www-form-urlencoded"),
    ),
    st.tuples(st.binary(max_size=200), st.just("multipart/form-data; boundary=xyz")),
)

# How to fill each path converter of an /api/ route; a route with another converter fails
# the test below until it has a strategy here.
CONVERTERS = {
    "int": st.integers(min_value=0, max_value=10**30).map(str),
    "str": st.text(st.characters(exclude_categories=()), min_size=1, max_size=20).map(
        lambda text: quote(text, safe="", errors="surrogatepass")
    ),
    "slug": st.from_regex(r"[-a-zA-Z0-9_]+", fullmatch=True),
}


def api_routes() -> list[str]:
    """Every route under api/ in the URLconf, as its route string (`api/x/<int:pk>`)."""
    routes: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and route.startswith("api/"):
                routes.append(route)

    walk(get_resolver().url_patterns, "")
    return routes


@st.composite
def api_urls(draw) -> str:
    route = draw(st.sampled_from(api_routes()))
    return "/" + re.sub(r"<(?:(\w+):)?\w+>", lambda m: draw(CONVERTERS[m.group(1) or "str"]), route)


def test_every_api_route_can_be_fuzzed():
    routes = api_routes()
    assert {"api/chat", "api/chat/stream", "api/feedback", "api/document-chat"} <= set(routes)
    for route in routes:
        for converter in re.findall(r"<(?:(\w+):)?\w+>", route):
            assert (converter or "str") in CONVERTERS, f"add a strategy for <{converter}:…> of {route}"


# --- the API ----------------------------------------------------------------------------------


@pytest.fixture
def document(kb, alice):
    ingest(kb, alice)
    return kb.documents.get()


@pytest.fixture(scope="module", autouse=True)
def _report_counts(request):
    yield
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is not None and capture is not None and SENT:
        counts = ", ".join(f"{name} {count}" for name, count in sorted(SENT.items()))
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\napi fuzz: {counts}")


def _check_http(response) -> None:
    SENT["http requests"] += 1
    SENT[f"http {response.status_code}"] += 1
    assert response.status_code != 500, response.content[:500]
    if response.streaming:  # a stream that fails ends with an error event, not a cut
        b"".join(response.streaming_content)
        return
    if response.status_code >= 400:
        error = json.loads(response.content)["error"]
        assert isinstance(error["message"], str) and isinstance(error["code"], str)


@PROPERTY
@given(url=api_urls(), body=bodies, method=st.sampled_from(["POST"] * 6 + ["GET", "PUT", "DELETE"]))
@example(url="/api/chat", body=(b'{"message": "How do we review incidents?", "kb": "alice-kb"}', "application/json"), method="POST")
@example(url="/api/chat/stream", body=(b'{"message": "hi", "session_id": "s1"}', "application/json"), method="POST")
@example(url="/api/document-chat", body=(b'{"message": "hi", "response_mode": "sse"}', "application/json"), method="POST")
def test_no_request_to_the_api_is_answered_with_a_500(alice_client, document, url, body, method):
    data, content_type = body
    _check_http(alice_client.generic(method, url, data, content_type=content_type))


# --- the websockets ---------------------------------------------------------------------------

frames = st.one_of(
    json_texts,
    json_objects.map(lambda data: {"HEADERS": {"HX-Request": "true"}, **data}).map(_dumps),
    st.binary(max_size=50),
)


async def _send(communicator: WebsocketCommunicator, frame: str | bytes) -> None:
    SENT["socket frames"] += 1
    if isinstance(frame, bytes):
        await communicator.send_input({"type": "websocket.receive", "bytes": frame})
    else:  # a text frame is UTF-8 on the wire: a raw surrogate cannot arrive, its JSON escape can
        text = frame.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        await communicator.send_input({"type": "websocket.receive", "text": text})


async def _receive_until(communicator: WebsocketCommunicator, expected: str, timeout: float = 20) -> None:
    """Read what the consumer sends until a fragment holds `expected`; a close fails the test.

    A consumer that raised re-raises here: daphne would close its socket with 1011."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        message = await communicator.receive_output(timeout=deadline - asyncio.get_running_loop().time())
        if message["type"] == "websocket.close":
            SENT[f"socket close {message.get('code')}"] += 1
        assert message["type"] == "websocket.send", message
        if expected in (message.get("text") or ""):
            return


async def _exchange(path: str, cookie: str, sent: list) -> None:
    """Send the frames, then a probe the consumer must still answer after them; then close.

    A consumer reads its frames one at a time, so the probe's answer comes after theirs. The
    probe is refused naming its one field, which no other frame has."""
    headers = [(b"origin", b"http://127.0.0.1"), (b"cookie", cookie.encode())]
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=10)  # a loaded machine takes its time
    assert connected
    for frame in sent:
        await _send(communicator, frame)
    probe = f"probe-{uuid.uuid4().hex}"
    await _send(communicator, json.dumps({probe: "\u0000"}))
    await _receive_until(communicator, f"{probe}: the text holds a NUL")
    await communicator.disconnect()


@pytest.fixture
def alice_cookie(alice) -> str:
    return session_cookie(alice)


@PROPERTY
@given(sent=st.lists(frames, min_size=1, max_size=4))
def test_no_frame_closes_the_chat_socket(alice_cookie, kb, sent):
    async_to_sync(_exchange)("/ws/chat/", alice_cookie, sent)


@PROPERTY
@given(sent=st.lists(frames, min_size=1, max_size=4))
def test_no_frame_closes_the_kb_socket(alice_cookie, kb, sent):
    async_to_sync(_exchange)(f"/ws/kb/{kb.slug}/", alice_cookie, sent)
