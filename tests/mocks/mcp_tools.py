"""The tools both mock MCP servers expose (written with the `mcp` SDK's MCPServer)."""

from __future__ import annotations

import asyncio
import os

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel


class Event(BaseModel):
    name: str
    minutes: int


def build_server(name: str) -> MCPServer:
    server = MCPServer(name, log_level="WARNING")

    @server.tool(description="Echoes the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Adds two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Sleeps for the given seconds, then answers.")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="Returns a text of `size` characters.")
    def huge(size: int) -> str:
        return ("0123456789" * (size // 10 + 1))[:size]

    @server.tool(description="Plans events (a nested schema).")
    def plan(events: list[Event]) -> str:
        return ", ".join(f"{e.name} ({e.minutes} min)" for e in events)

    @server.tool(description="Always fails.")
    def fail(reason: str = "boom") -> str:
        raise ToolError(reason)

    @server.tool(description="Exits the server process at once (a crashing server).")
    def crash() -> str:
        os._exit(3)

    return server
