"""Build the process's model router from settings."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.utils.module_loading import import_string

from agentic_rag.llm import registry
from agentic_rag.llm.base import LLMProvider
from agentic_rag.llm.extractive import ExtractiveProvider, Tokenize
from agentic_rag.llm.openai import OpenAICompatibleProvider, Timeouts
from agentic_rag.llm.resilience import BreakerOptions, CircuitBreaker, RetryPolicy
from agentic_rag.llm.router import ModelRouter

logger = logging.getLogger(__name__)
KNOWN_PROVIDERS = ("openai", "extractive")


@dataclass(frozen=True)
class LLMConfig:
    providers: tuple[str, ...] = ("extractive",)
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: str = ""
    openai_model: str = "gpt-4o-mini"
    timeouts: Timeouts = field(default_factory=Timeouts)
    breaker: BreakerOptions = field(default_factory=BreakerOptions)
    retry_max_attempts: int = 10
    retry_deadline_s: float = 30.0
    retry_max_retry_after_s: float = 10.0
    extractive_tokenizer: str = ""  # dotted path of a `str -> list[str]` function
    # dotted path of a `str -> list[str]` function giving the question and its translations,
    # so the reader matches an English question to a Chinese passage as retrieval did
    extractive_expander: str = ""


def config_from_settings() -> LLMConfig:
    """Read the LLM settings (with defaults, so it works before they are declared)."""
    from django.conf import settings

    d, t, b = LLMConfig(), Timeouts(), BreakerOptions()
    return LLMConfig(
        providers=_names(getattr(settings, "LLM_PROVIDERS", d.providers)),
        openai_base_url=getattr(settings, "OPENAI_BASE_URL", d.openai_base_url),
        openai_api_key=getattr(settings, "OPENAI_API_KEY", d.openai_api_key),
        openai_model=getattr(settings, "OPENAI_MODEL", d.openai_model),
        timeouts=Timeouts(
            connect_s=float(getattr(settings, "LLM_CONNECT_TIMEOUT_S", t.connect_s)),
            first_token_s=float(getattr(settings, "LLM_FIRST_TOKEN_TIMEOUT_S", t.first_token_s)),
            chunk_s=float(getattr(settings, "LLM_CHUNK_TIMEOUT_S", t.chunk_s)),
            total_s=float(getattr(settings, "LLM_TIMEOUT_S", t.total_s)),
        ),
        breaker=BreakerOptions(
            failure_rate=float(getattr(settings, "LLM_BREAKER_FAILURE_RATE", b.failure_rate)),
            window_s=float(getattr(settings, "LLM_BREAKER_WINDOW_S", b.window_s)),
            min_calls=int(getattr(settings, "LLM_BREAKER_MIN_CALLS", b.min_calls)),
            open_s=float(getattr(settings, "LLM_BREAKER_OPEN_S", b.open_s)),
            probe_timeout_s=float(getattr(settings, "LLM_PROBE_TIMEOUT_S", b.probe_timeout_s)),
        ),
        retry_max_attempts=int(getattr(settings, "LLM_RETRY_MAX_ATTEMPTS", d.retry_max_attempts)),
        retry_deadline_s=float(getattr(settings, "LLM_RETRY_DEADLINE_S", d.retry_deadline_s)),
        retry_max_retry_after_s=float(
            getattr(settings, "LLM_RETRY_MAX_RETRY_AFTER_S", d.retry_max_retry_after_s)
        ),
        extractive_tokenizer=getattr(settings, "LLM_EXTRACTIVE_TOKENIZER", d.extractive_tokenizer),
        extractive_expander=getattr(settings, "LLM_EXTRACTIVE_EXPANDER", d.extractive_expander),
    )


def build_llm(
    config: LLMConfig, *, tokenize: Tokenize | None = None, added: Sequence[LLMProvider] = ()
) -> ModelRouter:
    """Make the router config describes, then the added providers (the app's settings page);
    it always ends with the extractive provider."""
    unknown = [name for name in config.providers if name not in KNOWN_PROVIDERS]
    if unknown:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"LLM_PROVIDERS: unknown {unknown}; known: {', '.join(KNOWN_PROVIDERS)}")
    if tokenize is None and config.extractive_tokenizer:
        tokenize = import_string(config.extractive_tokenizer)
    expand = import_string(config.extractive_expander) if config.extractive_expander else None
    providers = []
    if "openai" in config.providers:
        providers.append(
            OpenAICompatibleProvider(
                config.openai_base_url, config.openai_api_key, config.openai_model, config.timeouts
            )
        )
    taken = {provider.name for provider in providers}
    providers.extend(provider for provider in added if provider.name not in taken)
    retry = RetryPolicy(
        max_attempts=config.retry_max_attempts,
        deadline_s=config.retry_deadline_s,
        max_retry_after_s=config.retry_max_retry_after_s,
    )
    return ModelRouter(
        providers,
        functools.partial(CircuitBreaker, config.breaker),
        retry,
        fallback=ExtractiveProvider(tokenize, expand=expand, encoder=_reader_encoder()),
    )


def _reader_encoder():  # -> EncoderSimilarity | None
    """The extractive reader's sentence encoder (settings.READER_ENCODER), reading the vectors
    ingestion kept; None when it is off or not installed."""
    from django.conf import settings

    from agentic_rag.embeddings import reader_encoder

    name = getattr(settings, "READER_ENCODER", "")
    if not name:
        return None
    from knowledge.meaning import UnitVectorStore

    return reader_encoder(UnitVectorStore(), name)


_router: tuple[int, ModelRouter] | None = None
_router_lock = threading.Lock()


def get_llm() -> ModelRouter:
    """Return this process's router, built from settings and the models added in the app,
    and built again when those change (registry.registry_changed)."""
    global _router
    version = registry.registry_version()
    current = _router
    if current is not None and current[0] == version:
        return current[1]
    with _router_lock:
        if _router is None or _router[0] != version:
            _router = (version, build_llm(config_from_settings(), added=_added_providers()))
        return _router[1]


def _added_providers() -> list[LLMProvider]:
    try:
        return list(registry.stored_providers())
    except Exception as exc:  # answering must not depend on the registry being readable
        logger.warning("models added in the app are not used: %s", exc)
        return []


def reset_llm() -> None:
    """Forget the cached router (tests that change the LLM settings call this)."""
    global _router
    with _router_lock:
        _router = None


def _names(value: str | Sequence[str]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    return tuple(item.strip().lower() for item in items if item.strip()) or ("extractive",)
