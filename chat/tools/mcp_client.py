"""Tools of external MCP servers (settings.MCP_SERVERS), registered into the chat's tool registry.

Each server is a stdio command (`{"name", "command", "args"?, "env"?}`) or a Streamable
HTTP endpoint (`{"name", "url"}`). At start-up its tools are listed and each becomes a
`Tool` named `<server>.<tool>`; a call opens a session, calls the tool and closes it, so a
server that crashed is simply started again on the next call. MCP tools have no keyword
rules: they are called when the message names them (`<server>.<tool> key=value …`) or when
the LLM intent classifier picks them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp import Client, StdioServerParameters

from chat.pipeline.tools import Tool, ToolRegistry

logger = logging.getLogger(__name__)

LIST_TIMEOUT_S = 20.0
# A key from its first character: tried from each character of a long word, "\w+" would read
# to the word's end again each time.
_PAIR = re.compile(r"(?<!\w)(\w++)=(\"[^\"]*\"|'[^']*'|\S+)")


@dataclass(frozen=True)
class McpServer:
    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str = ""

    @classmethod
    def from_setting(cls, entry: Mapping[str, Any]) -> McpServer:
        """One MCP_SERVERS entry; ValueError when it names neither a command nor a URL."""
        name = str(entry.get("name") or "")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name) or bool(entry.get("command")) == bool(entry.get("url")):
            raise ValueError(f"an MCP server needs a name and either a command or a url: {dict(entry)!r}")
        return cls(name, str(entry.get("command") or ""), tuple(map(str, entry.get("args") or ())),
                   dict(entry.get("env") or {}), str(entry.get("url") or ""))

    def target(self) -> StdioServerParameters | str:
        if self.url:
            return self.url
        return StdioServerParameters(command=self.command, args=list(self.args), env=dict(self.env) or None)


def list_tools(server: McpServer, timeout_s: float = LIST_TIMEOUT_S) -> list[Any]:
    """The tools the server offers (the SDK's `Tool` objects)."""

    async def listing() -> list[Any]:
        async with Client(server.target()) as client:
            return list((await client.list_tools()).tools)

    return asyncio.run(asyncio.wait_for(listing(), timeout_s))


def call_tool(server: McpServer, name: str, arguments: dict[str, Any]) -> str:
    """Call one tool in a fresh session; its text content, or RuntimeError when it reports an error."""

    async def calling() -> Any:
        async with Client(server.target()) as client:
            return await client.call_tool(name, arguments)

    result = asyncio.run(calling())
    text = "\n".join(getattr(block, "text", "") for block in result.content if getattr(block, "text", ""))
    if result.is_error:
        raise RuntimeError(text or f"{server.name}.{name} failed")
    return text or str(result.structured_content or "")


def mcp_tool(server: McpServer, spec: Any, caller: Callable[..., str] = call_tool) -> Tool:
    """Wrap one MCP tool as a registry Tool named `<server>.<tool>`."""
    qualified = f"{server.name}.{spec.name}"
    schema = dict(spec.input_schema or {"type": "object", "properties": {}})

    def handle(parameters: dict[str, Any]) -> str:
        return caller(server, spec.name, parameters)

    return Tool(qualified, spec.description or qualified, handle, _extractor(qualified, schema), schema)


def _extractor(qualified: str, schema: Mapping[str, Any]) -> Callable[[str], dict[str, Any] | None]:
    """Arguments as `key=value` after the tool's name in the message; None when it is not named."""
    properties = schema.get("properties") or {}
    named = re.compile(rf"(?<![\w.]){re.escape(qualified)}(?![\w.])")

    def extract(message: str) -> dict[str, Any] | None:
        found = named.search(message)
        if not found:
            return None
        arguments = {}
        for key, raw in _PAIR.findall(message[found.end():]):
            if key in properties:
                arguments[key] = _typed(raw.strip("\"'"), properties[key].get("type"))
        return arguments

    return extract


def _typed(value: str, kind: Any) -> Any:
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            return float(value)
    except ValueError:
        return value
    if kind == "boolean":
        return value.lower() in {"1", "true", "yes"}
    return value


def register_mcp_tools(registry: ToolRegistry, entries: Iterable[Mapping[str, Any]]) -> list[str]:
    """Register every tool of every configured server; a server that fails is logged and skipped."""
    registered = []
    for entry in entries:
        try:
            server = McpServer.from_setting(entry)
            for spec in list_tools(server):
                tool = mcp_tool(server, spec)
                registry.register(tool)
                registered.append(tool.name)
        except Exception as error:  # one broken server must not stop the app from starting
            logger.warning("MCP server %r skipped: %s", entry.get("name"), error)
    return registered
