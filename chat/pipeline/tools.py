"""The tool channel of S6: a registry of tools, empty until tools are registered.

A tool has a name, a description, a JSON-schema of its parameters, a rule that extracts
those parameters from a message (None: the message does not call it) and a handler. The
pipeline asks the channel which calls a message makes and runs them beside the KB search;
their outputs become TOOL evidence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    handler: Callable[[dict[str, Any]], str]
    extract: Callable[[str], dict[str, Any] | None]
    parameters: dict[str, Any] = field(default_factory=dict)  # JSON schema


@dataclass(frozen=True)
class ToolCall:
    name: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolResult:
    name: str
    parameters: dict[str, Any]
    output: str
    ok: bool = True
    error: str = ""
    ms: float = 0.0

    def as_event(self) -> dict[str, Any]:
        return {"name": self.name, "parameters": self.parameters, "result": self.output, "ok": self.ok, "error": self.error}


class ToolChannel(Protocol):
    def available(self) -> frozenset[str]: ...

    def plan(self, message: str, tools: tuple[str, ...]) -> list[ToolCall]: ...

    def run(self, call: ToolCall) -> ToolResult: ...


class ToolRegistry:
    """Tools by name; a ToolChannel."""

    def __init__(self, tools: tuple[Tool, ...] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def available(self) -> frozenset[str]:
        return frozenset(self._tools)

    def plan(self, message: str, tools: tuple[str, ...]) -> list[ToolCall]:
        """The calls the message makes to the given tools (those whose parameters it yields)."""
        calls = []
        for name in tools:
            tool = self._tools.get(name)
            parameters = tool.extract(message) if tool else None
            if parameters is not None:
                calls.append(ToolCall(name, parameters))
        return calls

    def run(self, call: ToolCall) -> ToolResult:
        """Run one call; a failing handler gives a failed result, not an exception."""
        started = time.perf_counter()
        try:
            output = self._tools[call.name].handler(call.parameters)
        except Exception as error:  # a tool's failure must not end the chat (seed 001 §10)
            ms = (time.perf_counter() - started) * 1000
            return ToolResult(call.name, call.parameters, "", False, f"{type(error).__name__}: {error}", ms)
        return ToolResult(call.name, call.parameters, output, ms=(time.perf_counter() - started) * 1000)


_registry = ToolRegistry()


def get_tool_channel() -> ToolRegistry:
    """This process's tool registry (empty by default; the tools module registers built-ins)."""
    return _registry
