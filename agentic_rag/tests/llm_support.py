"""Test helpers around the fake OpenAI-compatible server: a fixture, and the server set up as
the project's model."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agentic_rag.llm.config import reset_llm
from agentic_rag.llm.testing import FakeOpenAIServer, FakeReply


@pytest.fixture
def fake_openai_server() -> Iterator[FakeOpenAIServer]:
    """A started FakeOpenAIServer, stopped after the test."""
    with FakeOpenAIServer() as server:
        yield server


@contextmanager
def configured_as_the_model(settings, reply: FakeReply | None = None) -> Iterator[FakeOpenAIServer]:
    """A started FakeOpenAIServer configured (through pytest-django's `settings`) as the
    project's one model for the block; the router is rebuilt on the way in and out."""
    with FakeOpenAIServer() as server:
        if reply is not None:
            server.default = reply
        settings.LLM_PROVIDERS = ["openai"]
        settings.OPENAI_BASE_URL = server.base_url
        settings.OPENAI_API_KEY = "test-key"
        reset_llm()
        try:
            yield server
        finally:
            reset_llm()
