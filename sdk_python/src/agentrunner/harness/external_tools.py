"""`ExternalTools`: the small, annotated surface of host APIs an external harness may call.

Each tool is a pydantic-typed function bound to one run that forwards to the host's ProxyService with
the run token. There is no local permission check: the host answers from the run's frozen
authorization snapshot and audits every call, so an ungranted tool or knowledge base is refused by the
host (and shows up in its audit log) exactly as it would be for any runner. A tool is offered only when
the run has the API at all (no `langbot_call_tool` for a run without tools).

New tools are added here (the one surface); the MCP bridge projects them automatically: name,
description, annotations and the JSON schema of the args model.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentrunner import results
from agentrunner.api import tool_text
from agentrunner.context import RunContext
from agentrunner.errors import AgentRunnerError
from agentrunner.v1 import proxy_service_pb2 as P

_PREVIEW_CHARS = 2000


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoArgs(_Args):
    """Arguments of a tool that takes none (the schema the harness sees is an empty object)."""

    pass


class HistoryPageArgs(_Args):
    """Arguments of the history tool: a page of the conversation before a cursor."""

    before_cursor: str = Field(
        "", description="Items before this cursor; empty starts before the current event."
    )
    limit: int = Field(20, ge=1, le=100, description="How many items (the host caps it).")


class RetrieveKnowledgeArgs(_Args):
    """Arguments of the knowledge tool: one query against one knowledge base the run was granted."""

    kb_id: str = Field(description="Knowledge base id from the run context.")
    query: str = Field(min_length=1, description="What to search for.")
    top_k: int = Field(5, ge=1, le=50, description="How many chunks.")


class CallToolArgs(_Args):
    """Arguments of the host-tool passthrough: which granted host tool to call, and with what."""

    tool_name: str = Field(min_length=1, description="A host tool name from the run context.")
    arguments: dict[str, Any] = Field(
        default_factory=dict, description="Arguments matching the tool's schema."
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ExternalTool:
    """One tool of the surface."""

    name: str
    description: str
    args: type[BaseModel]
    handler: Callable[[ExternalTools, Any], Awaitable[Any]]
    #: whether this run has the API at all (else the tool is not offered)
    available: Callable[[RunContext], bool]
    read_only: bool = True

    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's arguments as MCP publishes it (pydantic's, without the title that
        would name our model class instead of the tool)."""
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        return schema


_SURFACE: list[ExternalTool] = []


def external_tool(
    name: str,
    description: str,
    args: type[BaseModel],
    *,
    available: Callable[[RunContext], bool],
    read_only: bool = True,
) -> Callable[
    [Callable[[ExternalTools, Any], Awaitable[Any]]], Callable[[ExternalTools, Any], Awaitable[Any]]
]:
    """Registers a method of `ExternalTools` on the surface."""

    def register(
        fn: Callable[[ExternalTools, Any], Awaitable[Any]],
    ) -> Callable[[ExternalTools, Any], Awaitable[Any]]:
        _SURFACE.append(ExternalTool(name, description, args, fn, available, read_only))
        return fn

    return register


class ToolCallFailed(Exception):
    """A surface call the host refused or that failed; its message is safe to show the harness."""


class ExternalTools:
    """The surface bound to one run."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def tools(self) -> list[ExternalTool]:
        """The tools this run may use: those whose host API the run was granted (the others are not offered,
        so the harness never sees a tool that could only fail)."""
        return [t for t in _SURFACE if t.available(self.ctx)]

    def get(self, name: str) -> ExternalTool | None:
        """The offered tool called `name`, or None when it is unknown or not offered to this run."""
        return next((t for t in self.tools() if t.name == name), None)

    async def call(self, name: str, arguments: dict[str, Any] | None) -> Any:
        """Validates `arguments` with the tool's args model and forwards it; raises `ToolCallFailed`."""
        tool = self.get(name)
        if tool is None:
            raise ToolCallFailed(f"unknown tool {name!r}")
        try:
            args = tool.args.model_validate(arguments or {})
        except ValidationError as exc:
            fields = ", ".join(".".join(str(p) for p in e["loc"]) or "arguments" for e in exc.errors())
            raise ToolCallFailed(f"invalid arguments for {name}: {fields}") from None
        try:
            return await tool.handler(self, args)
        except AgentRunnerError as exc:
            raise ToolCallFailed(f"{exc.reason}: {exc.message}") from None

    # -- the surface ----------------------------------------------------------------------------------

    @external_tool(
        "langbot_get_current_event",
        "The event this run answers: type, time, source, the input text and attachments, conversation and sender.",
        NoArgs,
        available=lambda ctx: True,
    )
    async def current_event(self, args: NoArgs) -> dict[str, Any]:
        """The event that started the run, its input, conversation and actor (and the stored event when the
        run may read it), so the agent can see what it is answering."""
        raw = self.ctx.raw
        out: dict[str, Any] = {
            "event": json_format.MessageToDict(raw.event, preserving_proto_field_name=True),
            "input": json_format.MessageToDict(raw.input, preserving_proto_field_name=True),
            "conversation": json_format.MessageToDict(raw.conversation, preserving_proto_field_name=True),
            "actor": json_format.MessageToDict(raw.actor, preserving_proto_field_name=True),
        }
        if raw.context.available_apis.event_get and raw.event.event_id:
            record = await self.ctx.api.call("GetEvent", P.GetEventRequest(event_id=raw.event.event_id))
            out["record"] = json_format.MessageToDict(record.event, preserving_proto_field_name=True)
        return out

    @external_tool(
        "langbot_history_page",
        "A page of the conversation's earlier messages (oldest first) and the cursor of the page before it.",
        HistoryPageArgs,
        available=lambda ctx: ctx.context.available_apis.history_page,
    )
    async def history_page(self, args: HistoryPageArgs) -> dict[str, Any]:
        """A page of the conversation's history before a cursor (by default before the current event)."""
        before = args.before_cursor or self.ctx.context.latest_cursor
        resp = await self.ctx.api.call(
            "ListHistory", P.ListHistoryRequest(before_cursor=before, limit=args.limit)
        )
        return {
            "items": [
                {"role": i.role, "content": i.content, "cursor": i.cursor, "seq": i.seq} for i in resp.items
            ],
            "next_cursor": resp.next_cursor,
            "has_more": resp.has_more,
        }

    @external_tool(
        "langbot_retrieve_knowledge",
        "Searches one of the run's knowledge bases and returns the best chunks.",
        RetrieveKnowledgeArgs,
        available=lambda ctx: len(ctx.resources.knowledge_bases) > 0,
    )
    async def retrieve_knowledge(self, args: RetrieveKnowledgeArgs) -> dict[str, Any]:
        """Chunks from a knowledge base for a query, with their scores and source documents."""
        req = P.RetrieveKnowledgeRequest(kb_id=args.kb_id, query_text=args.query, top_k=args.top_k)
        resp = await self.ctx.api.call("RetrieveKnowledge", req)
        return {
            "results": [
                {
                    "content": c.content,
                    "score": c.score,
                    "document_id": c.document_id,
                    "metadata": json_format.MessageToDict(c.metadata),
                }
                for c in resp.results
            ]
        }

    @external_tool(
        "langbot_call_tool",
        "Calls one of the host tools listed in the run context (LANGBOT_CONTEXT.md) with its arguments.",
        CallToolArgs,
        available=lambda ctx: len(ctx.resources.tools) > 0,
        read_only=False,
    )
    async def call_tool(self, args: CallToolArgs) -> dict[str, Any]:
        """Calls a host tool on the agent's behalf; the call is recorded as `tool.started` / `tool.completed`
        results of the run, so it shows in the transcript like a tool call the runner made itself."""
        call_id = results.new_id("call")
        ctx = self.ctx
        await ctx.emit(results.tool_started(call_id, args.tool_name, args.arguments, metadata={"via": "mcp"}))
        req = P.CallToolRequest(
            tool_name=args.tool_name, parameters=results.to_struct(args.arguments), tool_call_id=call_id
        )
        try:
            resp = await ctx.api.call("CallTool", req)
        except AgentRunnerError as exc:
            await ctx.emit(results.tool_completed(call_id, args.tool_name, error=exc))
            raise
        text = tool_text(resp)
        preview: dict[str, Any] = {"text": text[:_PREVIEW_CHARS]}
        if resp.is_error:
            done = results.tool_completed(
                call_id,
                args.tool_name,
                preview,
                error_code="tool.error",
                error_message=text[:500] or "tool error",
            )
        else:
            done = results.tool_completed(call_id, args.tool_name, preview)
        await ctx.emit(done)
        out: dict[str, Any] = {"text": text, "is_error": resp.is_error}
        if resp.HasField("structured"):
            out["structured"] = json_format.MessageToDict(resp.structured)
        if resp.truncated:
            out["truncated"] = True
        return out


def as_text(value: Any) -> str:
    """A surface result as the text an MCP client reads."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1)
