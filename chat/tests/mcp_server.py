"""A tiny stdio MCP server for the MCP client tests: `python chat/tests/mcp_server.py`."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("tests")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(reason: str) -> str:
    """Always fail, with the reason given."""
    raise ToolError(reason)


if __name__ == "__main__":
    server.run()
