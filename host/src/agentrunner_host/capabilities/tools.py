"""Tools the host offers runners (PROTOCOL_V1 §8 "Tool", HOST_SDK §4.5).

Every tool, whether it lives in an MCP server (stdio or streamable HTTP) or in the host itself, sits
behind one `ToolSource` interface, so authorization, timeouts and result size caps apply uniformly and
runners never learn where a tool runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import zoneinfo
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

import httpx
import structlog
from pydantic import BaseModel, ConfigDict, Field

from agentrunner.errors import (
    AgentRunnerError,
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    RuntimeFailureError,
)
from agentrunner.v1 import common_pb2
from agentrunner_host.observability import TOOL_CALL_DURATION, observed_call

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

log = structlog.get_logger(__name__)


# --------------------------------------------------------------------------- config


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


class NativeToolsConfig(BaseModel):
    """Host-native tools. `fetch_url` exists only when `fetch_url_allow` lists URL prefixes."""

    model_config = ConfigDict(extra="forbid")

    current_time: bool = True
    fetch_url_allow: list[str] = Field(default_factory=list)
    fetch_url_timeout: float = 15.0
    fetch_url_max_bytes: int = 1_000_000


class ToolsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mcp_servers: list[McpServerConfig] = Field(default_factory=list)
    native: NativeToolsConfig = Field(default_factory=NativeToolsConfig)
    #: result text beyond this many characters is cut (and stored as an artifact when a sink exists)
    max_result_chars: int = 20_000
    #: default per-call timeout for native tools
    call_timeout: float = 60.0


# --------------------------------------------------------------------------- values


@dataclasses.dataclass(frozen=True, slots=True)
class ToolInfo:
    """A tool as listed in `resources.tools`."""

    name: str
    description: str
    parameters: dict[str, Any]
    tool_type: str  # `mcp` or `native`
    source: str


@dataclasses.dataclass(slots=True)
class ToolOutcome:
    """A tool's result before the size cap."""

    contents: list[common_pb2.ContentElement]
    structured: dict[str, Any] | None = None
    is_error: bool = False
    truncated: bool = False
    artifact: common_pb2.ArtifactRef | None = None


class ArtifactSink(Protocol):
    """Stores an oversized tool result so the runner can read it whole through the artifact RPCs."""

    async def store_tool_result(
        self, run_id: str, name: str, data: bytes, mime_type: str
    ) -> common_pb2.ArtifactRef: ...


class ToolSource(Protocol):
    """A set of tools behind one connection (an MCP server, the host itself, a plugin runtime)."""

    name: str

    async def start(self) -> None: ...

    async def list_tools(self) -> list[ToolInfo]: ...

    async def call(self, tool: str, arguments: dict[str, Any], time_limit: float) -> ToolOutcome: ...

    async def close(self) -> None: ...


def text_outcome(text: str, *, is_error: bool = False) -> ToolOutcome:
    return ToolOutcome(contents=[common_pb2.ContentElement(text=text)], is_error=is_error)


class SourceUnavailable(Exception):
    """The source's connection is gone; its tools are withdrawn until a refresh reconnects it."""


# --------------------------------------------------------------------------- MCP


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


# --------------------------------------------------------------------------- native tools


class NativeToolSource:
    """Tools implemented by the host itself: `current_time` and an allow-listed `fetch_url`."""

    name = "native"

    def __init__(self, config: NativeToolsConfig, http_client: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self._client = http_client

    async def start(self) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def list_tools(self) -> list[ToolInfo]:
        tools = []
        if self.config.current_time:
            tools.append(
                ToolInfo(
                    name="current_time",
                    description="The current date and time (ISO 8601) in a time zone.",
                    parameters={
                        "type": "object",
                        "properties": {
                            "timezone": {"type": "string", "description": "IANA time zone, default UTC"}
                        },
                    },
                    tool_type="native",
                    source=self.name,
                )
            )
        if self.config.fetch_url_allow:
            tools.append(
                ToolInfo(
                    name="fetch_url",
                    description="Fetches a web page or API response (only from allowed addresses) as text.",
                    parameters={
                        "type": "object",
                        "properties": {"url": {"type": "string", "description": "http(s) URL"}},
                        "required": ["url"],
                    },
                    tool_type="native",
                    source=self.name,
                )
            )
        return tools

    async def call(self, tool: str, arguments: dict[str, Any], time_limit: float) -> ToolOutcome:
        if tool == "current_time" and self.config.current_time:
            zone = str(arguments.get("timezone") or "UTC")
            try:
                tz = zoneinfo.ZoneInfo(zone)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                return text_outcome(f"unknown time zone {zone!r}", is_error=True)
            now = dt.datetime.now(tz)
            return ToolOutcome(
                contents=[common_pb2.ContentElement(text=now.isoformat())],
                structured={"iso": now.isoformat(), "timezone": zone, "unix": now.timestamp()},
            )
        if tool == "fetch_url" and self.config.fetch_url_allow:
            return await self._fetch(str(arguments.get("url") or ""), time_limit)
        raise NotFoundError(f"tool {tool!r} does not exist")

    async def _fetch(self, url: str, time_limit: float) -> ToolOutcome:
        if not url.startswith(("http://", "https://")):
            return text_outcome("url must be an http(s) URL", is_error=True)
        if not any(url.startswith(prefix) for prefix in self.config.fetch_url_allow):
            return text_outcome(f"{url} is not in the host's allow-list", is_error=True)
        assert self._client is not None
        budget = min(time_limit, self.config.fetch_url_timeout)
        try:
            async with asyncio.timeout(budget), self._client.stream("GET", url, timeout=budget) as response:
                body = bytearray()
                async for piece in response.aiter_bytes():
                    body += piece
                    if len(body) >= self.config.fetch_url_max_bytes:
                        break
        except (httpx.TimeoutException, TimeoutError):
            return text_outcome(f"fetching {url} timed out", is_error=True)
        except httpx.HTTPError as exc:
            return text_outcome(f"fetching {url} failed: {type(exc).__name__}", is_error=True)
        mime = response.headers.get("content-type", "").split(";")[0].strip()
        if 300 <= response.status_code < 400:
            return text_outcome(f"{url} redirects to {response.headers.get('location')}", is_error=True)
        text = bytes(body[: self.config.fetch_url_max_bytes]).decode(response.encoding or "utf-8", "replace")
        return ToolOutcome(
            contents=[common_pb2.ContentElement(text=text)],
            structured={"status": response.status_code, "content_type": mime, "url": url},
            is_error=response.status_code >= 400,
        )


# --------------------------------------------------------------------------- registry


class ToolRegistry:
    """All tool sources. Lists tools at `start()` and `refresh()`; a dead source loses only its tools."""

    def __init__(
        self,
        config: ToolsConfig,
        *,
        artifact_sink: ArtifactSink | None = None,
        extra_sources: Sequence[ToolSource] = (),
    ) -> None:
        self.config = config
        self.artifact_sink = artifact_sink
        self._sources: dict[str, ToolSource] = {"native": NativeToolSource(config.native)}
        self._timeouts: dict[str, float] = {"native": config.call_timeout}
        for server in config.mcp_servers:
            if server.name in self._sources:
                raise ValueError(f"duplicate tool source name {server.name!r}")
            self._sources[server.name] = McpToolSource(server)
            self._timeouts[server.name] = server.call_timeout
        for source in extra_sources:
            self._sources[source.name] = source
            self._timeouts.setdefault(source.name, config.call_timeout)
        self._tools: dict[str, ToolInfo] = {}
        #: per tool: its arguments' validator, None when its schema cannot be checked (built at first call)
        self._validators: dict[str, Validator | None] = {}
        self._dead: set[str] = set()
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Connects every source concurrently; one that fails is logged and left out."""
        async with self._lock:
            await asyncio.gather(*(self._load(s, connect=True) for s in self._sources.values()))

    async def refresh(self) -> None:
        """Re-lists every source, reconnecting the dead ones."""
        async with self._lock:
            await asyncio.gather(
                *(
                    self._load(s, connect=s.name in self._dead or not _alive(s))
                    for s in self._sources.values()
                )
            )

    async def close(self) -> None:
        for source in self._sources.values():
            with contextlib.suppress(Exception):
                await source.close()
        self._tools.clear()

    async def _load(self, source: ToolSource, *, connect: bool) -> None:
        try:
            if connect:
                await source.start()
            listed = await source.list_tools()
        except Exception as exc:
            log.warning("tool_source_unavailable", source=source.name, error=repr(exc))
            self._withdraw(source.name)
            self._dead.add(source.name)
            return
        self._dead.discard(source.name)
        self._withdraw(source.name)
        for tool in listed:
            if tool.name in self._tools:
                log.warning("tool_name_clash", tool=tool.name, kept=self._tools[tool.name].source)
                continue
            self._tools[tool.name] = tool

    def _withdraw(self, source_name: str) -> None:
        for name in [n for n, t in self._tools.items() if t.source == source_name]:
            del self._tools[name]
            self._validators.pop(name, None)

    def validate(self, tool: ToolInfo, parameters: Mapping[str, Any]) -> None:
        """Checks call arguments against the tool's JSON schema (its draft, or 2020-12 when it names
        none) before anything is sent to the tool; a violation is INVALID_ARGUMENT naming the path
        (`parameters.items[2].name`). A tool whose own schema is invalid, or cannot be applied (a
        `$ref` this host cannot resolve), is called unchecked. `jsonschema` is imported by the first
        call that needs it, not at host start."""
        import jsonschema

        if tool.name not in self._validators:
            cls = jsonschema.validators.validator_for(
                tool.parameters, default=jsonschema.Draft202012Validator
            )
            try:
                cls.check_schema(tool.parameters)
            except jsonschema.SchemaError as exc:
                log.warning("tool_schema_invalid", tool=tool.name, error=exc.message)
                self._validators[tool.name] = None
            else:
                self._validators[tool.name] = cls(tool.parameters)
        validator = self._validators[tool.name]
        if validator is None:
            return
        try:
            error = jsonschema.exceptions.best_match(validator.iter_errors(dict(parameters)))
        except Exception as exc:  # e.g. referencing.exceptions.Unresolvable: the tool decides
            log.warning("tool_schema_unusable", tool=tool.name, error=f"{type(exc).__name__}: {exc}")
            self._validators[tool.name] = None
            return
        if error is None:
            return
        path = list(error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, Mapping):
            path += [next((p for p in error.validator_value if p not in error.instance), "")]
        field = "parameters" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
        raise InvalidArgumentError(
            f"tool {tool.name}: invalid arguments at {field}: {error.message}",
            field=field,
            metadata={"toolName": tool.name},
        )

    def list_tools(self) -> list[ToolInfo]:
        return sorted(self._tools.values(), key=lambda t: t.name)

    def get(self, name: str) -> ToolInfo:
        tool = self._tools.get(name)
        if tool is None:
            raise NotFoundError(f"tool {name!r} is not available", metadata={"toolName": name})
        return tool

    async def call(
        self,
        name: str,
        parameters: Mapping[str, Any],
        *,
        run_id: str = "",
        time_remaining: float | None = None,
    ) -> ToolOutcome:
        """Calls a tool with the source's timeout (clipped by the run's budget) and caps the result."""
        tool = self.get(name)
        if not isinstance(parameters, Mapping):
            raise InvalidArgumentError("parameters must be an object", field="parameters")
        self.validate(tool, parameters)
        source = self._sources[tool.source]
        timeout = self._timeouts[tool.source]
        if time_remaining is not None:
            timeout = min(timeout, time_remaining)
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "agentrunner.tool_source": tool.source,
        }
        with observed_call(f"agentrunner.tool/{name}", TOOL_CALL_DURATION, attributes, source=tool.source):
            outcome = await self._call_source(source, tool, dict(parameters), timeout)
        return await self._cap(outcome, name, run_id)

    async def _call_source(
        self, source: ToolSource, tool: ToolInfo, parameters: dict[str, Any], time_limit: float
    ) -> ToolOutcome:
        """One call to the tool's source, its failures as typed errors (a lost source is withdrawn)."""
        name = tool.name
        try:
            return await source.call(name, parameters, time_limit)
        except TimeoutError:
            raise DeadlineExceededError(
                f"tool {name} did not answer within {time_limit:.1f}s", metadata={"toolName": name}
            ) from None
        except SourceUnavailable as exc:
            log.warning("tool_source_lost", source=tool.source, error=str(exc))
            self._withdraw(tool.source)
            self._dead.add(tool.source)
            raise RuntimeFailureError(
                f"tool {name} is unavailable: its server stopped", retryable=True, metadata={"toolName": name}
            ) from None
        except AgentRunnerError:
            raise
        except Exception as exc:
            log.warning("tool_call_failed", tool=name, error=repr(exc))
            raise RuntimeFailureError(f"tool {name} failed", metadata={"toolName": name}) from None

    async def _cap(self, outcome: ToolOutcome, name: str, run_id: str) -> ToolOutcome:
        limit = self.config.max_result_chars
        size = sum(_element_size(e) for e in outcome.contents)
        if outcome.structured is not None:
            size += len(json.dumps(outcome.structured))
        if size <= limit:
            return outcome
        artifact = None
        if self.artifact_sink is not None and run_id:
            whole = {
                "contents": [_element_json(e) for e in outcome.contents],
                "structured": outcome.structured,
                "is_error": outcome.is_error,
            }
            try:
                artifact = await self.artifact_sink.store_tool_result(
                    run_id, f"{name}-result.json", json.dumps(whole).encode(), "application/json"
                )
            except Exception:
                log.warning("tool_result_artifact_failed", tool=name, exc_info=True)
        budget = limit
        cut: list[common_pb2.ContentElement] = []
        for element in outcome.contents:
            if element.WhichOneof("kind") != "text":
                continue  # images and files of an oversized result live in the artifact only
            piece = element.text[: max(budget, 0)]
            budget -= len(piece)
            if piece:
                cut.append(common_pb2.ContentElement(text=piece))
        note = f"\n[truncated: {size} characters, cut to {limit}"
        note += f"; full result in artifact {artifact.artifact_id}]" if artifact else "]"
        cut.append(common_pb2.ContentElement(text=note))
        return ToolOutcome(
            contents=cut,
            structured=outcome.structured
            if outcome.structured and len(json.dumps(outcome.structured)) <= limit
            else None,
            is_error=outcome.is_error,
            truncated=True,
            artifact=artifact,
        )


def _alive(source: ToolSource) -> bool:
    return bool(getattr(source, "alive", True))


def _element_size(element: common_pb2.ContentElement) -> int:
    kind = element.WhichOneof("kind")
    if kind == "text":
        return len(element.text)
    if kind == "image":
        return len(element.image.uri)
    if kind == "file":
        return len(element.file.uri)
    return 0


def _element_json(element: common_pb2.ContentElement) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(element)


__all__ = [
    "ArtifactSink",
    "McpServerConfig",
    "McpToolSource",
    "NativeToolSource",
    "NativeToolsConfig",
    "ToolInfo",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSource",
    "ToolsConfig",
]
