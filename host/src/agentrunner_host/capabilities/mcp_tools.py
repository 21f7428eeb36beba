"""Tools of an MCP server (stdio or streamable HTTP), one `McpToolSource` per configured server."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field

from agentrunner.v1 import common_pb2
from agentrunner_host.capabilities.tool_source import SourceUnavailable, ToolInfo, ToolOutcome, text_outcome

log = structlog.get_logger("agentrunner_host.capabilities.tools")  # (the registry's logger)


class McpServerConfig(BaseModel):
    """One MCP server. `stdio`: command/args/env/cwd; `streamable-http`: url/headers."""

    model_config = ConfigDict(extra="forbid")

    name: str
    transport: Literal["stdio", "streamable-http"]
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    #: seconds to connect and list tools
    startup_timeout: float = 20.0
    #: per-call timeout; the run deadline clips it
    call_timeout: float = 60.0
    #: prepended to every tool name of this server (avoids clashes between servers)
    tool_prefix: str = ""


class McpToolSource:
    """One MCP server reached through the `mcp` SDK.

    The SDK's transports are anyio context managers that must be entered and exited in one task, so
    a dedicated task owns the connection for its whole life; calls from other tasks go through the
    session, which is safe within one event loop.
    """

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.name = config.name
        self._session: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[None] | None = None

    async def start(self) -> None:
        await self.close()
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready = loop.create_future()
        self._task = asyncio.create_task(self._run(self._ready), name=f"mcp:{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.config.startup_timeout)
        except BaseException:
            await self.close()
            raise

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done() and self._session is not None

    async def _run(self, ready: asyncio.Future[None]) -> None:
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self._session = session
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(
                    exc if isinstance(exc, Exception) else RuntimeError(f"MCP server {self.name} stopped")
                )
            elif not self._stop.is_set():
                log.warning("mcp_server_lost", server=self.name, error=repr(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._session = None

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        cfg = self.config
        if cfg.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            if not cfg.command:
                raise ValueError(f"MCP server {cfg.name}: stdio needs a command")
            return stdio_client(
                StdioServerParameters(command=cfg.command, args=cfg.args, env=cfg.env or None, cwd=cfg.cwd)
            )
        if not cfg.url:
            raise ValueError(f"MCP server {cfg.name}: streamable-http needs a url")
        return _http_transport(cfg.url, cfg.headers)

    def _require_session(self) -> Any:
        if not self.alive:
            raise SourceUnavailable(self.name)
        return self._session

    async def list_tools(self) -> list[ToolInfo]:
        session = self._require_session()
        tools: list[ToolInfo] = []
        cursor: str | None = None
        from mcp import types

        try:
            while True:
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                result = await asyncio.wait_for(
                    session.list_tools(params=params), self.config.startup_timeout
                )
                for tool in result.tools:
                    tools.append(
                        ToolInfo(
                            name=self.config.tool_prefix + tool.name,
                            description=tool.description or "",
                            parameters=dict(tool.input_schema or {"type": "object", "properties": {}}),
                            tool_type="mcp",
                            source=self.name,
                        )
                    )
                cursor = result.next_cursor
                if not cursor:
                    return tools
        except (TimeoutError, asyncio.CancelledError):
            raise
        except Exception as exc:
            raise SourceUnavailable(f"{self.name}: {exc!r}") from exc

    async def call(self, tool: str, arguments: dict[str, Any], time_limit: float) -> ToolOutcome:
        session = self._require_session()
        remote = tool.removeprefix(self.config.tool_prefix)
        try:
            async with asyncio.timeout(time_limit):
                result = await session.call_tool(remote, arguments, read_timeout_seconds=time_limit)
        except TimeoutError:
            raise
        except Exception as exc:
            if not self.alive or _is_connection_error(exc):
                raise SourceUnavailable(f"{self.name}: {exc!r}") from exc
            return text_outcome(f"tool {tool} failed: {exc}", is_error=True)
        contents: list[common_pb2.ContentElement] = []
        for block in getattr(result, "content", None) or []:
            kind = getattr(block, "type", "")
            if kind == "text":
                contents.append(common_pb2.ContentElement(text=block.text))
            elif kind == "image":
                contents.append(
                    common_pb2.ContentElement(
                        image=common_pb2.ImageContent(
                            uri=f"data:{block.mime_type};base64,{block.data}", mime_type=block.mime_type
                        )
                    )
                )
            else:
                contents.append(common_pb2.ContentElement(text=json.dumps(block.model_dump(mode="json"))))
        structured = getattr(result, "structured_content", None)
        return ToolOutcome(
            contents=contents,
            structured=dict(structured) if isinstance(structured, dict) else None,
            is_error=bool(getattr(result, "is_error", False)),
        )

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 5)
        except BaseException:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: Mapping[str, str]) -> Any:
    from mcp.client.streamable_http import streamable_http_client

    if headers:
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = create_mcp_http_client(headers=dict(headers))
        async with client, streamable_http_client(url, http_client=client) as streams:
            yield streams
    else:
        async with streamable_http_client(url) as streams:
            yield streams


def _is_connection_error(exc: BaseException) -> bool:
    import anyio

    if isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)):
        return True
    text = str(exc).lower()
    return "connection closed" in text or "connection lost" in text
