"""The router built from settings, once per process."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentic_rag.llm import CompletionOptions, Message, OpenAICompatibleProvider, get_llm, reset_llm
from agentic_rag.llm.config import config_from_settings
from agentic_rag.llm.testing import FakeOpenAIServer


@pytest.fixture(autouse=True)
def _fresh_router():
    reset_llm()
    yield
    reset_llm()


def test_it_is_the_extractive_provider_alone_by_default(settings):
    for name in ("LLM_PROVIDERS", "OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"):
        if hasattr(settings, name):
            delattr(settings, name)
    router = get_llm()
    assert not router.has_model
    assert router.fallback.name == "extractive"


def test_it_builds_the_router_once_per_process(settings):
    settings.LLM_PROVIDERS = "extractive"
    assert get_llm() is get_llm()


def test_it_reads_providers_and_timeouts_from_settings(settings):
    settings.LLM_PROVIDERS = ["openai", "extractive"]
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    settings.OPENAI_MODEL = "qwen-plus"
    settings.LLM_FIRST_TOKEN_TIMEOUT_S = 2.5
    settings.LLM_BREAKER_OPEN_S = 60
    config = config_from_settings()
    assert config.providers == ("openai", "extractive")
    assert config.timeouts.first_token_s == 2.5
    assert config.breaker.open_s == 60.0
    router = get_llm()
    (provider,) = router.providers
    assert isinstance(provider, OpenAICompatibleProvider)
    assert (provider.base_url, provider.model, provider.name) == (
        "http://127.0.0.1:9/v1",
        "qwen-plus",
        "openai:qwen-plus",
    )
    assert router.breaker("openai:qwen-plus").options.open_s == 60.0


def test_it_rejects_unknown_provider_names(settings):
    settings.LLM_PROVIDERS = "openai,gpt5000"
    with pytest.raises(ImproperlyConfigured, match="gpt5000"):
        get_llm()


def test_it_loads_the_extractive_tokenizer_by_dotted_path(settings):
    settings.LLM_PROVIDERS = "extractive"
    documents = (
        '<documents><document id="4">Nothing in common here. The breaker opens at 10%.</document></documents>'
    )
    messages = [Message("system", documents), Message("user", "trip?")]
    default_text = get_llm().complete(messages, CompletionOptions()).text
    reset_llm()
    settings.LLM_EXTRACTIVE_TOKENIZER = "agentic_rag.tests.test_llm_config.synonym_tokenize"
    text = get_llm().complete(messages, CompletionOptions()).text
    assert "None of the passages found answers" in default_text
    assert text.endswith("\n\nThe breaker opens at 10%. [4]")


def synonym_tokenize(text: str) -> list[str]:
    """Words, with "trip" meaning "opens": only this tokenizer links the test's question and source."""
    return [{"trip": "opens"}.get(word, word) for word in re.findall(r"\w+", text.lower())]


def test_it_streams_from_the_configured_endpoint(settings):
    with FakeOpenAIServer(text="Configured and streaming.") as server:
        settings.LLM_PROVIDERS = "openai,extractive"
        settings.OPENAI_BASE_URL = server.base_url
        settings.OPENAI_API_KEY = "sk-configured"
        settings.OPENAI_MODEL = "fake-model"
        stream = get_llm().stream([Message("user", "Hello?")], CompletionOptions())
        assert "".join(stream) == "Configured and streaming."
        assert stream.provider == "openai:fake-model"
        assert server.chat_requests[0].headers["Authorization"] == "Bearer sk-configured"
