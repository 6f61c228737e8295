"""The MCP client: tools of a stdio MCP server (started by the test) join the tool registry."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chat.pipeline.tools import ToolCall, ToolRegistry
from chat.tools.mcp_client import McpServer, register_mcp_tools

SERVER = {"name": "demo", "command": sys.executable, "args": [str(Path(__file__).with_name("mcp_server.py"))]}


@pytest.fixture(scope="module")
def registry() -> ToolRegistry:
    registry = ToolRegistry()
    registered = register_mcp_tools(registry, [SERVER, {"name": "broken", "command": "/nonexistent/mcp-server"}])
    assert registered == ["demo.add", "demo.fail"]  # the broken server is skipped
    return registry


def test_it_registers_the_servers_tools_with_their_schemas(registry):
    add = registry.get("demo.add")

    assert add.description == "Add two integers."
    assert add.parameters["required"] == ["a", "b"] and add.parameters["properties"]["a"]["type"] == "integer"


def test_it_extracts_arguments_when_the_message_names_the_tool(registry):
    assert registry.plan("please run demo.add a=2 b=40", ("demo.add", "demo.fail")) == [
        ToolCall("demo.add", {"a": 2, "b": 40})
    ]
    assert registry.plan("add two and forty", ("demo.add",)) == []


def test_it_calls_the_tool_on_the_server(registry):
    result = registry.run(ToolCall("demo.add", {"a": 2, "b": 40}))

    assert result.ok and result.output == "42"


def test_a_tool_error_is_a_failed_result(registry):
    result = registry.run(ToolCall("demo.fail", {"reason": "no luck"}))

    assert not result.ok and "no luck" in result.error


@pytest.mark.parametrize(
    "entry", [{"name": "x"}, {"name": "x", "command": "a", "url": "http://b"}, {"command": "a"}, {"name": "a b", "url": "u"}]
)
def test_it_refuses_server_entries_without_one_transport(entry):
    with pytest.raises(ValueError, match="an MCP server needs"):
        McpServer.from_setting(entry)


def test_an_http_server_is_reached_by_its_url():
    assert McpServer.from_setting({"name": "remote", "url": "http://127.0.0.1:9/mcp"}).target() == "http://127.0.0.1:9/mcp"
