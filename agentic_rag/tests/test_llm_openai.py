"""The OpenAI-compatible provider against a fake server on 127.0.0.1 (real sockets)."""

from __future__ import annotations

import json
import socket
import time
from email.utils import formatdate

import pytest

from agentic_rag.embeddings import EmbedderOptions, OpenAIEmbedder
from agentic_rag.llm import (
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
    OpenAICompatibleProvider,
    Timeouts,
)
from agentic_rag.llm.openai import parse_retry_after
from agentic_rag.llm.testing import FakeOpenAIServer, FakeReply
from agentic_rag.tests.llm_support import fake_openai_server  # noqa: F401

MESSAGES = [Message("system", "Be brief."), Message("user", "Say hello.")]
OPTIONS = CompletionOptions(temperature=0.2, max_tokens=50, stop=("###",))
# A fake server on this machine answers in milliseconds; a loaded CI machine once took over 0.3 s.
# Tests of a timeout set their own shorter one.
FAST = Timeouts(connect_s=1, first_token_s=2, chunk_s=2, total_s=5)


@pytest.fixture
def server():
    with FakeOpenAIServer(text="Hello there, how are you today?") as fake:
        yield fake


@pytest.fixture
def provider(server):
    return OpenAICompatibleProvider(server.base_url, "sk-test", "fake-model", FAST)


def collect(
    provider: OpenAICompatibleProvider, options: CompletionOptions = OPTIONS
) -> tuple[list[str], LLMError | None]:
    """The pieces a stream delivered, and the error that ended it, if any."""
    pieces: list[str] = []
    try:
        for piece in provider.stream(MESSAGES, options):
            pieces.append(piece)
    except LLMError as error:
        return pieces, error
    return pieces, None


def test_it_streams_the_reply_piece_by_piece(server, provider):
    pieces, error = collect(provider)
    assert error is None
    assert pieces == ["Hello ", "there, ", "how ", "are ", "you ", "today?"]
    request = server.chat_requests[-1]
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert request.body == {
        "model": "fake-model",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}],
        "temperature": 0.2,
        "stream": True,
        "max_tokens": 50,
        "stop": ["###"],
    }


def test_it_completes_without_streaming(server, provider):
    completion = provider.complete(MESSAGES, OPTIONS)
    assert completion.text == "Hello there, how are you today?"
    assert completion.provider == "openai:fake-model"
    assert completion.model == "fake-model"
    assert completion.usage.prompt_tokens == 4
    assert completion.usage.completion_tokens == 6
    assert server.chat_requests[-1].body["stream"] is False


def test_it_accepts_a_whole_reply_to_a_streamed_request(server, provider):
    server.reply(raw_body=json.dumps({"choices": [{"message": {"content": "All at once."}}]}))
    assert list(provider.stream(MESSAGES, OPTIONS)) == ["All at once."]


def test_it_adds_the_extra_body_fields_to_every_request(server):
    provider = OpenAICompatibleProvider(
        server.base_url, "", "qwen", FAST, extra_body={"enable_thinking": False}
    )
    provider.complete(MESSAGES, OPTIONS)
    list(provider.stream(MESSAGES, OPTIONS))
    assert [r.body["enable_thinking"] for r in server.chat_requests] == [False, False]


def test_it_sends_no_authorization_header_without_a_key(server):
    OpenAICompatibleProvider(server.base_url, "", "fake-model", FAST).complete(MESSAGES, OPTIONS)
    assert "Authorization" not in server.chat_requests[-1].headers


def test_it_asks_for_a_json_object_and_parses_the_reply(server, provider):
    server.reply('```json\n{"intent": "KB", "confidence": 0.9}\n```')
    data = provider.complete_json(MESSAGES, OPTIONS, '"intent": string, "confidence": number')
    assert data == {"intent": "KB", "confidence": 0.9}
    body = server.chat_requests[-1].body
    assert body["response_format"] == {"type": "json_object"}
    assert '"intent": string' in body["messages"][0]["content"]


@pytest.mark.parametrize(
    "chunks",
    [
        ("<think>plan the", " answer</think>", "\n\nParis", " is the capital."),
        ("<thi", "nk>", "pla", "n</th", "ink>Paris is the capital."),
        ("Paris<think>", "</think> is the capital."),
    ],
)
def test_it_removes_think_blocks_split_across_chunks(server, provider, chunks):
    server.reply(chunks=chunks)
    server.reply(chunks=chunks)
    pieces, _ = collect(provider)
    assert "".join(pieces) == "Paris is the capital."
    assert provider.complete(MESSAGES, OPTIONS).text == "Paris is the capital."


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (401, LLMAuthError),
        (403, LLMAuthError),
        (429, LLMRateLimited),
        (500, LLMUnavailable),
        (503, LLMUnavailable),
        (404, LLMBadRequest),
        (408, LLMTimeout),
    ],
)
@pytest.mark.parametrize("is_streaming", [True, False])
def test_it_maps_http_errors_to_error_types(server, provider, status, error_class, is_streaming):
    server.fail(status)
    with pytest.raises(error_class) as raised:
        if is_streaming:
            list(provider.stream(MESSAGES, OPTIONS))
        else:
            provider.complete(MESSAGES, OPTIONS)
    assert f"HTTP {status}" in str(raised.value)
    assert "scripted failure" in str(raised.value)
    assert raised.value.provider == "openai:fake-model"
    if isinstance(raised.value, LLMUnavailable):
        assert raised.value.status == status


def test_it_passes_on_the_retry_after_header(server, provider):
    server.fail(429, retry_after="7")
    with pytest.raises(LLMRateLimited) as raised:
        provider.complete(MESSAGES, OPTIONS)
    assert raised.value.retry_after == 7.0


def test_it_reads_retry_after_as_seconds_or_a_date():
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert 8 < parse_retry_after(formatdate(time.time() + 10, usegmt=True)) <= 10


def test_it_reports_a_refused_connection_as_unavailable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = OpenAICompatibleProvider(f"http://127.0.0.1:{port}/v1", "", "m", FAST)
    with pytest.raises(LLMUnavailable, match="cannot reach"):
        provider.complete(MESSAGES, OPTIONS)


def test_it_times_out_waiting_for_the_first_packet(server, provider):
    server.reply(headers_delay_s=5)
    started = time.monotonic()
    pieces, error = collect(provider, CompletionOptions(first_token_timeout_s=0.2))
    assert pieces == []
    assert isinstance(error, LLMTimeout)
    assert 0.15 < time.monotonic() - started < 1.5


def test_it_times_out_when_the_stream_stalls_after_some_tokens(server):
    provider = OpenAICompatibleProvider(server.base_url, "", "fake-model", Timeouts(chunk_s=0.2, total_s=5))
    server.reply(stall_after=2)
    started = time.monotonic()
    pieces, error = collect(provider)
    assert pieces == ["Hello ", "there, "]
    assert isinstance(error, LLMTimeout)
    assert "stream stalled: nothing for 0.2 s" in str(error)
    assert time.monotonic() - started < 1.5


def test_it_stops_a_slow_stream_at_the_overall_deadline(server, provider):
    server.reply(token_delay_s=0.1)
    pieces, error = collect(provider, CompletionOptions(timeout_s=0.35))
    assert 1 <= len(pieces) < 6
    assert isinstance(error, LLMTimeout)


def test_it_reports_a_connection_cut_mid_stream(server, provider):
    server.reply(cut_after=3)
    pieces, error = collect(provider)
    assert pieces == ["Hello ", "there, ", "how "]
    assert isinstance(error, LLMUnavailable)


@pytest.mark.parametrize("raw", ["not json", '{"choices": []}', "[1, 2]"])
def test_it_rejects_replies_that_break_the_protocol(server, provider, raw):
    server.reply(raw_body=raw)
    with pytest.raises(LLMBadResponse):
        provider.complete(MESSAGES, OPTIONS)


def test_it_rejects_a_base_url_that_is_not_http():
    with pytest.raises(ValueError, match="base URL"):
        OpenAICompatibleProvider("ftp://example.com/v1", "", "m")


def test_the_fake_server_serves_embeddings_to_the_real_embedder(server):
    embedder = OpenAIEmbedder(EmbedderOptions(openai_base_url=server.base_url, openai_model="fake-embed"))
    first, again = embedder.embed_query("熔断器"), embedder.embed_query("熔断器")
    assert first.shape == (8,)
    assert (first == again).all()
    assert server.requests[-1].path == "/v1/embeddings"


def test_the_fake_server_records_requests_and_replays_its_script(server, provider):
    server.script(FakeReply(text="one"), FakeReply(text="two"))
    texts = [provider.complete(MESSAGES, OPTIONS).text for _ in range(3)]
    assert texts == ["one", "two", "Hello there, how are you today?"]
    assert len(server.chat_requests) == 3


def test_the_shared_fixture_is_a_started_fake_server(fake_openai_server):  # noqa: F811 (a fixture)
    provider = OpenAICompatibleProvider(fake_openai_server.base_url, "", "fake-model", FAST)
    assert provider.complete(MESSAGES, OPTIONS).text == FakeReply.text


@pytest.mark.parametrize("chunks", [("<think>planning the", " answer"), ("<think>done</think>", "  \n"), ("\n",)])
def test_a_reply_without_an_answer_raises_and_delivers_nothing(server, provider, chunks):
    server.script(FakeReply(chunks=chunks), FakeReply(chunks=chunks))

    pieces, error = collect(provider)
    with pytest.raises(LLMEmptyReply):
        provider.complete(MESSAGES, OPTIONS)

    assert pieces == [] and isinstance(error, LLMEmptyReply)


def test_whitespace_before_the_answer_comes_with_its_first_words(server, provider):
    server.reply(chunks=("\n", "  ", "Hello", " there"))
    assert collect(provider) == (["\n  Hello", " there"], None)
