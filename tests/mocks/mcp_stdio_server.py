"""MCP server over stdio: `python -m tests.mocks.mcp_stdio_server`."""

from __future__ import annotations

from tests.mocks.mcp_tools import build_server

if __name__ == "__main__":
    build_server("mock-stdio").run(transport="stdio")
