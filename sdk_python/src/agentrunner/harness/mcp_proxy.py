"""`python -m agentrunner.harness.mcp_proxy`: the LangBot MCP bridge over stdio.

A harness that only spawns MCP servers starts this command; it serves MCP on its stdin/stdout and
forwards `tools/list` and `tools/call` to the run's HTTP bridge, whose URL and bearer token come from
`LANGBOT_MCP_URL` and `LANGBOT_MCP_TOKEN` (never argv). When the run ends the bridge closes and so do
the calls of this proxy; it exits when its stdin closes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import anyio

from agentrunner.harness.mcp_bridge import SERVER_NAME, TOKEN_ENV, URL_ENV


async def _serve(url: str, token: str) -> None:
    from mcp import ClientSession, types
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        )
        read, write = await stack.enter_async_context(streamable_http_client(url, http_client=client))
        upstream = await stack.enter_async_context(ClientSession(read, write))
        await upstream.initialize()

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return await upstream.list_tools(params=params)

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return await upstream.call_tool(params.name, params.arguments or {})

        server = Server(SERVER_NAME, version="1", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (stdin, stdout):
            await server.run(stdin, stdout, server.create_initialization_options())


def main() -> int:
    """The stdio-to-HTTP proxy's entry point: serves MCP on stdio for a harness that only speaks stdio,
    forwarding to the bridge named by the environment; the exit status says why it stopped."""
    url, token = os.environ.get(URL_ENV, ""), os.environ.get(TOKEN_ENV, "")
    if not url or not token:
        print(f"mcp_proxy: {URL_ENV} and {TOKEN_ENV} must be set", file=sys.stderr)
        return 2
    try:
        anyio.run(_serve, url, token)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one line, never a traceback: the harness shows it to its user
        print(f"mcp_proxy: the LangBot bridge is unavailable: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
