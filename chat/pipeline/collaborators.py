"""What the stages need from their collaborators: a cache, and JSON answers from a real model."""

from __future__ import annotations

from typing import Any, Protocol

from agentic_rag.llm.extractive import model_json  # noqa: F401 (the stages import it from here)


class Cache(Protocol):
    """Django's cache API, as far as the stages use it."""

    def get(self, key: str, default: Any = None) -> Any: ...

    def set(self, key: str, value: Any, timeout: float | None = None) -> None: ...


