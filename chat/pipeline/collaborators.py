"""What the stages need from their collaborators: a cache, and JSON answers from a real model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from agentic_rag.llm import CompletionOptions, ExtractiveProvider, LLMUnavailable, Message, extract_json
from agentic_rag.llm.base import json_messages


class Cache(Protocol):
    """Django's cache API, as far as the stages use it."""

    def get(self, key: str, default: Any = None) -> Any: ...

    def set(self, key: str, value: Any, timeout: float | None = None) -> None: ...


def model_json(
    llm: Any, messages: Sequence[Message], options: CompletionOptions, schema_hint: str, *, field: str
) -> dict:
    """Ask the configured model for a JSON object.

    Raise LLMUnavailable when the answer came from the router's extractive fallback: it
    quotes documents, it cannot classify or rewrite, and its text would be taken for a result.
    """
    completion = llm.complete(json_messages(messages, schema_hint), replace(options, json_mode=True))
    if getattr(completion, "provider", "") == ExtractiveProvider.name:
        raise LLMUnavailable("no language model answered (the extractive fallback did)")
    return extract_json(completion.text, field=field)
