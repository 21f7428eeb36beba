"""MCP server over streamable HTTP: `python -m tests.mocks.mcp_http_server --port 0`.

Prints `MOCK_MCP_HTTP_LISTENING <port>` once it accepts connections; the endpoint is `/mcp`.
"""

from __future__ import annotations

import argparse
import asyncio
import socket

import uvicorn

from tests.mocks.mcp_tools import build_server


async def _main(port: int) -> None:
    app = build_server("mock-http").streamable_http_app()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    print(f"MOCK_MCP_HTTP_LISTENING {sock.getsockname()[1]}", flush=True)
    await task


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(_main(parser.parse_args().port))
