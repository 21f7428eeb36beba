"""Tools offered to the model: only `ctx.resources.tools` the run may call, schemas inlined (or fetched
with `GetToolDetail` when the host did not inline them); calls go through the host and results are cut
to `max-tool-result-chars`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from agentrunner import RunContext, tool_text
from agentrunner.errors import AgentRunnerError
from agentrunner.results import to_struct
from agentrunner.v1 import common_pb2, context_pb2

_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def _granted(resource: context_pb2.ToolResource, operation: str) -> bool:
    return not resource.operations or operation in resource.operations


async def definitions(
    ctx: RunContext, budget: Callable[[], float]
) -> tuple[list[common_pb2.ToolDefinition], list[str]]:
    """Tool definitions for the model, and warnings (a detail that could not be fetched)."""
    out: list[common_pb2.ToolDefinition] = []
    warnings: list[str] = []
    for res in ctx.resources.tools:
        if not res.tool_name or not _granted(res, "call"):
            continue
        params = json_format.MessageToDict(res.parameters) if res.HasField("parameters") else {}
        description = res.description
        if not params and _granted(res, "detail") and ctx.api.available:
            try:
                detail = (await ctx.api.get_tool_detail(res.tool_name, timeout=budget())).tool
                params = json_format.MessageToDict(detail.parameters)
                description = description or detail.description
            except AgentRunnerError as exc:
                warnings.append(f"{res.tool_name}: {exc.reason}")
        out.append(
            common_pb2.ToolDefinition(
                name=res.tool_name,
                description=description or res.tool_name,
                parameters=to_struct(params or _EMPTY_SCHEMA),
            )
        )
    return out, warnings


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to `limit` characters with a marker saying how much was dropped."""
    if len(text) <= limit:
        return text, False
    dropped = len(text) - limit
    return f"{text[:limit]}\n…[truncated {dropped} characters]", True


def parse_arguments(raw: str) -> dict[str, Any]:
    """The model's JSON arguments (empty means none); raises ValueError when not a JSON object."""
    if not raw.strip():
        return {}
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("tool arguments must be a JSON object")
    return value


@dataclass
class ToolOutcome:
    """One executed (or refused) tool call: what the model reads and what telemetry shows."""

    call: common_pb2.ToolCall
    text: str
    preview: dict[str, Any]
    error_code: str = ""
    error_message: str = ""

    def message(self) -> common_pb2.ModelMessage:
        return common_pb2.ModelMessage(role="tool", tool_call_id=self.call.id, content=self.text)


async def execute(
    ctx: RunContext,
    call: common_pb2.ToolCall,
    *,
    allowed: set[str],
    max_chars: int,
    budget: Callable[[], float],
) -> ToolOutcome:
    """Runs one tool call through the host; every failure becomes a result the model can read."""
    if call.name not in allowed:
        message = f"tool {call.name!r} is not available to this agent"
        return ToolOutcome(call, f"error: {message}", {}, "unauthorized", message)
    try:
        params = parse_arguments(call.arguments_json)
    except ValueError as exc:
        message = f"invalid arguments: {exc}"
        return ToolOutcome(call, f"error: {message}", {}, "invalid_argument", message)
    try:
        resp = await ctx.api.call_tool(call.name, params, tool_call_id=call.id, timeout=budget())
    except AgentRunnerError as exc:
        return ToolOutcome(call, f"error: {exc.spec_code}: {exc.message}", {}, exc.spec_code, exc.message)
    text = tool_text(resp) or "(no output)"
    text, cut = truncate(text, max_chars)
    if resp.truncated:
        note = f" (full result: artifact {resp.artifact.artifact_id})" if resp.artifact.artifact_id else ""
        text += f"\n[the host cut this result{note}]"
    preview: dict[str, Any] = {
        "text": text[:500],
        "is_error": resp.is_error,
        "truncated": cut or resp.truncated,
    }
    if resp.is_error:
        return ToolOutcome(call, f"error: {text}", preview, "tool_error", text[:500])
    return ToolOutcome(call, text, preview)
