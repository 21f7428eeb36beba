"""The per-run LangBot MCP bridge: `ExternalTools` served as an MCP server whose lifetime is the run.

    async with McpBridge(ctx) as bridge:
        config = bridge.http_server_config()     # {"type": "http", "url": ..., "headers": {...}}
        config = bridge.stdio_server_config()    # {"command": python, "args": [...], "env": {...}}

Transports (both with the `mcp` SDK):
- streamable HTTP on `127.0.0.1:<free port>/mcp`, every request checked for the per-run bearer token
  (random, 256 bits; unrelated to the run token, which never leaves the runner);
- stdio, for harnesses that only spawn MCP servers: a small proxy command
  (`python -m agentrunner.harness.mcp_proxy`) that serves MCP on its stdio and forwards every request to
  the HTTP bridge (URL and token in its environment, never in argv).

The bridge closes when the run ends; its token dies with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import structlog

from agentrunner.context import RunContext
from agentrunner.harness.external_tools import ExternalTools, ToolCallFailed, as_text

log = structlog.get_logger("agentrunner.harness.mcp")

SERVER_NAME = "langbot"
URL_ENV = "LANGBOT_MCP_URL"
TOKEN_ENV = "LANGBOT_MCP_TOKEN"

#: servers still shutting down after a cancelled `stop` (kept referenced until they finish)
_CLOSING: set[asyncio.Task[None]] = set()

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def build_server(tools: ExternalTools) -> Any:
    """A low-level MCP server exposing `tools` (schemas from their pydantic args models)."""
    from mcp import types
    from mcp.server.lowlevel import Server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t.name,
                    description=t.description,
                    input_schema=t.input_schema(),
                    annotations=types.ToolAnnotations(read_only_hint=t.read_only, open_world_hint=False),
                )
                for t in tools.tools()
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            value = await tools.call(params.name, dict(params.arguments or {}))
        except ToolCallFailed as exc:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=str(exc))], is_error=True
            )
        structured = value if isinstance(value, dict) else None
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=as_text(value))], structured_content=structured
        )

    return Server(SERVER_NAME, version="1", on_list_tools=list_tools, on_call_tool=call_tool)


class _BearerGuard:
    """ASGI middleware: every HTTP request needs `Authorization: Bearer <token>`."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"text/plain")],
                    }
                )
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)


class McpBridge:
    """One run's bridge. Enter it to start the HTTP server; leaving it stops the server."""

    def __init__(self, ctx: RunContext, *, tools: ExternalTools | None = None) -> None:
        self.ctx = ctx
        self.tools = tools or ExternalTools(ctx)
        self.token = secrets.token_urlsafe(32)
        self.port = 0
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        """The bridge's MCP endpoint (streamable HTTP on loopback), to give the harness's MCP config."""
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools the bridge offers this run (for the harness's allow-list)."""
        return [t.name for t in self.tools.tools()]

    async def start(self) -> McpBridge:
        """Starts the HTTP server on a free loopback port and returns once it accepts connections."""
        import uvicorn

        app = build_server(self.tools).streamable_http_app(host="127.0.0.1", stateless_http=False)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            _BearerGuard(app, self.token),
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(
            self._server.serve(sockets=[sock]), name=f"mcp-bridge:{self.ctx.run_id}"
        )
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the MCP bridge stopped while starting")
            await asyncio.sleep(0.01)
        log.info("mcp bridge listening", run_id=self.ctx.run_id, port=self.port, tools=self.tool_names)
        return self

    async def stop(self) -> None:
        """Stops the server (open MCP sessions are closed). Cancelled meanwhile, it lets the server finish
        shutting down in the background instead of cutting its lifespan short."""
        server, task = self._server, self._task
        self._server = self._task = None
        if server is None or task is None:
            return
        server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), 3.0)
        except TimeoutError:
            server.force_exit = True
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), 2.0)
        except asyncio.CancelledError:
            server.force_exit = True
            _CLOSING.add(task)
            task.add_done_callback(_CLOSING.discard)
            raise

    async def __aenter__(self) -> McpBridge:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- configs for harnesses ------------------------------------------------------------------------

    def http_server_config(self, url: str | None = None) -> dict[str, Any]:
        """An MCP server entry for streamable HTTP (`url` overrides, e.g. through an ssh tunnel)."""
        return {"type": "http", "url": url or self.url, "headers": {"Authorization": f"Bearer {self.token}"}}

    def stdio_server_config(self, python: str | None = None) -> dict[str, Any]:
        """An MCP server entry that starts the stdio proxy command."""
        return {
            "type": "stdio",
            "command": python or sys.executable,
            "args": ["-m", "agentrunner.harness.mcp_proxy"],
            "env": {URL_ENV: self.url, TOKEN_ENV: self.token},
        }
