"""The tool channel of S6: a registry of tools; chat.apps registers the built-ins and MCP tools.

A tool has a name, a description, a JSON-schema of its parameters, a rule that extracts
those parameters from a message (None: the message does not call it) and a handler. The
pipeline asks the channel which calls a message makes and runs them beside the KB search;
their outputs become TOOL evidence.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentic_rag.db_threads import DatabaseThreadPool

# Tool calls get threads of their own: the KB search holds the pipeline's pool meanwhile.
_TOOL_POOL = DatabaseThreadPool(max_workers=8, thread_name_prefix="chat-tool")


@dataclass(frozen=True)
class ToolContext:
    """Who asks, for tools that must respect access (knowledge_lookup); None outside a chat."""

    user: Any = None
    kb: Any = None


def always_on() -> bool:
    return True


@dataclass(frozen=True)
class Tool:
    """A tool; `handler(parameters)`, or `handler(parameters, context)` when `uses_context`,
    returning text or a CitedOutput. While `is_on()` is false the channel neither offers nor
    runs it (asked on each use, so a setting changed at run time holds at once)."""

    name: str
    description: str
    handler: Callable[..., str | CitedOutput]
    extract: Callable[[str], dict[str, Any] | None]
    parameters: dict[str, Any] = field(default_factory=dict)  # JSON schema
    uses_context: bool = False
    is_on: Callable[[], bool] = always_on

    def call(self, parameters: dict[str, Any], context: ToolContext) -> str | CitedOutput:
        return self.handler(parameters, context) if self.uses_context else self.handler(parameters)


@dataclass(frozen=True)
class ToolCall:
    name: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class CitedOutput:
    """A handler's output with the passages it read (web pages): each becomes evidence of its
    own, cited by its URL, instead of one TOOL item."""

    text: str
    sources: tuple[Any, ...] = ()  # each with url, title, text and section (chat.web.WebPassage)


@dataclass(frozen=True)
class ToolResult:
    name: str
    parameters: dict[str, Any]
    output: str
    ok: bool = True
    error: str = ""
    ms: float = 0.0
    sources: tuple[Any, ...] = ()  # a CitedOutput's passages

    def as_event(self) -> dict[str, Any]:
        event = {"name": self.name, "parameters": self.parameters, "result": self.output, "ok": self.ok, "error": self.error}
        return {**event, "sources": [source.url for source in self.sources]} if self.sources else event


class ToolChannel(Protocol):
    def available(self) -> frozenset[str]: ...

    def get(self, name: str) -> Tool | None: ...

    def plan(self, message: str, tools: tuple[str, ...]) -> list[ToolCall]: ...

    def run(self, call: ToolCall, context: ToolContext | None = None) -> ToolResult: ...


class ToolRegistry:
    """Tools by name; a ToolChannel."""

    def __init__(self, tools: tuple[Tool, ...] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        tool = self._tools.get(name)
        return tool if tool is not None and tool.is_on() else None

    def available(self) -> frozenset[str]:
        return frozenset(name for name, tool in self._tools.items() if tool.is_on())

    def plan(self, message: str, tools: tuple[str, ...]) -> list[ToolCall]:
        """The calls the message makes to the given tools (those whose parameters it yields)."""
        calls = []
        for name in tools:
            tool = self.get(name)
            parameters = tool.extract(message) if tool else None
            if parameters is not None:
                calls.append(ToolCall(name, parameters))
        return calls

    def run(self, call: ToolCall, context: ToolContext | None = None) -> ToolResult:
        """Run one call; a failing handler gives a failed result, not an exception."""
        started = time.perf_counter()
        try:
            tool = self.get(call.name)
            if tool is None:
                raise LookupError(f"no tool {call.name!r} is on")
            output = tool.call(call.parameters, context or ToolContext())
        except Exception as error:  # a tool's failure must not end the chat
            ms = (time.perf_counter() - started) * 1000
            return ToolResult(call.name, call.parameters, "", False, f"{type(error).__name__}: {error}", ms)
        ms = (time.perf_counter() - started) * 1000
        if isinstance(output, CitedOutput):
            return ToolResult(call.name, call.parameters, output.text, ms=ms, sources=output.sources)
        return ToolResult(call.name, call.parameters, output, ms=ms)


def run_calls(
    channel: ToolChannel, calls: Sequence[ToolCall], context: ToolContext | None = None, *, timeout_s: float = 5.0
) -> list[ToolResult]:
    """Run the calls concurrently; a call still running after `timeout_s` is a failed result."""
    started = time.perf_counter()
    # Each call carries the request's context (its trace id lands on the tool's log lines).
    futures = [_TOOL_POOL.submit(contextvars.copy_context().run, channel.run, call, context) for call in calls]
    results = []
    for call, future in zip(calls, futures, strict=True):
        left = max(timeout_s - (time.perf_counter() - started), 0.0)
        try:
            results.append(future.result(timeout=left))
        except FutureTimeout:
            future.cancel()
            ms = (time.perf_counter() - started) * 1000
            results.append(ToolResult(call.name, call.parameters, "", False, f"timed out after {timeout_s:g} s", ms))
    return results


@dataclass(frozen=True)
class AgentTools:
    """The chat's tools as an agent gets them: the channel, and the tools the intent stage
    found the question asking for (an agent without a model calls only those; their rules
    alone match too much, "which broker …" reads as a time zone to the datetime tool)."""

    channel: ToolChannel
    suggested: tuple[str, ...] = ()


_registry = ToolRegistry()


def get_tool_channel() -> ToolRegistry:
    """This process's tool registry (chat.tools' built-ins, and MCP_SERVERS' tools when set)."""
    return _registry
