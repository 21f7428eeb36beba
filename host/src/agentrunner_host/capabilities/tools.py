"""Tools the host offers runners (PROTOCOL_V1 §8 "Tool", HOST_SDK §4.5).

Every tool, whether it lives in an MCP server (stdio or streamable HTTP) or in the host itself, sits
behind one `ToolSource` interface, so authorization, timeouts and result size caps apply uniformly and
runners never learn where a tool runs.

This module is the registry over them (`ToolRegistry`: the tools of every source, a call by name under
its timeout, the result size cap) and the `tools` config; the sources are
`capabilities/mcp_tools.py` and `capabilities/native_tools.py`, their interface
`capabilities/tool_source.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

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
from agentrunner_host.capabilities.mcp_tools import McpServerConfig, McpToolSource
from agentrunner_host.capabilities.native_tools import NativeToolsConfig, NativeToolSource
from agentrunner_host.capabilities.tool_source import SourceUnavailable, ToolInfo, ToolOutcome, ToolSource
from agentrunner_host.observability.telemetry import TOOL_CALL_DURATION, observed_call

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

log = structlog.get_logger(__name__)


class ToolsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mcp_servers: list[McpServerConfig] = Field(default_factory=list)
    native: NativeToolsConfig = Field(default_factory=NativeToolsConfig)
    #: result text beyond this many characters is cut (and stored as an artifact when a sink exists)
    max_result_chars: int = 20_000
    #: default per-call timeout for native tools
    call_timeout: float = 60.0


class ArtifactSink(Protocol):
    """Stores an oversized tool result so the runner can read it whole through the artifact RPCs."""

    async def store_tool_result(
        self, run_id: str, name: str, data: bytes, mime_type: str
    ) -> common_pb2.ArtifactRef: ...


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
    "ToolRegistry",
    "ToolsConfig",
]
