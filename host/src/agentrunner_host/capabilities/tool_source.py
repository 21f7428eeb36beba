"""What every tool source gives the registry (`capabilities/tools.py:ToolRegistry`): its tools
(`ToolInfo`) and a call's outcome (`ToolOutcome`), behind one `ToolSource` interface; a source whose
connection is gone raises `SourceUnavailable`."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from agentrunner.v1 import common_pb2


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
