"""The only package that talks to model APIs: providers, the router and its safety nets."""

from __future__ import annotations

from agentic_rag.llm.base import (
    Attempt,
    Completion,
    CompletionOptions,
    LLMAuthError,
    LLMBadRequest,
    LLMBadResponse,
    LLMEmptyReply,
    LLMError,
    LLMProvider,
    LLMRateLimited,
    LLMStreamInterrupted,
    LLMTimeout,
    LLMUnavailable,
    Message,
    Usage,
)
from agentic_rag.llm.config import LLMConfig, build_llm, get_llm, reset_llm
from agentic_rag.llm.extractive import ExtractiveProvider
from agentic_rag.llm.json_reply import extract_json, parse_json_reply
from agentic_rag.llm.openai import OpenAICompatibleProvider, Timeouts
from agentic_rag.llm.resilience import (
    BreakerOptions,
    BreakerState,
    CircuitBreaker,
    RequestBudget,
    RetryPolicy,
)
from agentic_rag.llm.router import ModelRouter, RoutedStream
from agentic_rag.llm.thinking import ThinkFilter, strip_think

__all__ = [
    "Attempt",
    "BreakerOptions",
    "BreakerState",
    "CircuitBreaker",
    "Completion",
    "CompletionOptions",
    "ExtractiveProvider",
    "LLMAuthError",
    "LLMBadRequest",
    "LLMBadResponse",
    "LLMConfig",
    "LLMEmptyReply",
    "LLMError",
    "LLMProvider",
    "LLMRateLimited",
    "LLMStreamInterrupted",
    "LLMTimeout",
    "LLMUnavailable",
    "Message",
    "ModelRouter",
    "OpenAICompatibleProvider",
    "RequestBudget",
    "RetryPolicy",
    "RoutedStream",
    "ThinkFilter",
    "Timeouts",
    "Usage",
    "build_llm",
    "extract_json",
    "get_llm",
    "parse_json_reply",
    "reset_llm",
    "strip_think",
]
