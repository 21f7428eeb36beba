"""Shapes both ways between the plugin SDK's API payloads and this protocol's ProxyService messages.

Requests in (a plugin's `Message`, `LLMTool`, `MessageChain` dicts -> `ModelMessage`, `ToolDefinition`,
text) and answers out (`ModelMessage` -> `Message`, `TranscriptItem`, `EventRecord`, `Run`, `RunResult`
-> the SDK's `TranscriptItem`, `AgentEventRecord`, `AgentRun`, `AgentRunEvent`), field by field with the
SDK's names; timestamps become epoch seconds and empty strings null.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format

from agentrunner.protocol import RESULT_TYPES
from agentrunner.results import to_struct
from agentrunner.v1 import common_pb2, host_service_pb2, proxy_service_pb2, result_pb2
from agentrunner_runners.langbot_bridge.context import plain, seconds


def _str(value: str) -> str | None:
    return value or None


# -- requests in ----------------------------------------------------------------------------------
def _content(element: Mapping[str, Any]) -> common_pb2.ContentElement | None:
    kind = element.get("type")
    if kind == "text":
        return common_pb2.ContentElement(text=str(element.get("text") or ""))
    if kind == "image_url" and isinstance(element.get("image_url"), Mapping):
        return common_pb2.ContentElement(
            image=common_pb2.ImageContent(uri=str(element["image_url"].get("url") or ""))
        )
    if kind == "image_base64" and element.get("image_base64"):
        uri = str(element["image_base64"])
        return common_pb2.ContentElement(
            image=common_pb2.ImageContent(
                uri=uri if uri.startswith("data:") else f"data:image/png;base64,{uri}"
            )
        )
    if kind == "file_url" and element.get("file_url"):
        return common_pb2.ContentElement(
            file=common_pb2.FileContent(
                uri=str(element["file_url"]), name=str(element.get("file_name") or "")
            )
        )
    return None


def model_message(raw: Mapping[str, Any]) -> common_pb2.ModelMessage:
    """An SDK `Message` dict as a `ModelMessage`."""
    out = common_pb2.ModelMessage(
        role=str(raw.get("role") or "user"),
        name=str(raw.get("name") or ""),
        tool_call_id=str(raw.get("tool_call_id") or ""),
    )
    content = raw.get("content")
    if isinstance(content, str):
        out.content = content
    elif isinstance(content, list):
        elements = [_content(c) for c in content if isinstance(c, Mapping)]
        out.contents.extend(e for e in elements if e is not None)
    for call in raw.get("tool_calls") or []:
        function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
        arguments = function.get("arguments")
        out.tool_calls.add(
            id=str(call.get("id") or ""),
            name=str(function.get("name") or ""),
            arguments_json=arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
        )
    return out


def tool_definition(raw: Mapping[str, Any]) -> common_pb2.ToolDefinition:
    """An SDK `LLMTool` dict as a `ToolDefinition`."""
    params = raw.get("parameters")
    return common_pb2.ToolDefinition(
        name=str(raw.get("name") or ""),
        description=str(raw.get("description") or raw.get("human_desc") or ""),
        parameters=to_struct(params if isinstance(params, Mapping) else None),
    )


def chain_text(chain: Any) -> str:
    """The text of a platform `MessageChain` (its `Plain` components), or the string given."""
    if isinstance(chain, str):
        return chain
    if isinstance(chain, list):
        return "".join(
            str(c.get("text") or "") for c in chain if isinstance(c, Mapping) and c.get("type") == "Plain"
        )
    return ""


# -- answers out ----------------------------------------------------------------------------------
def message(raw: common_pb2.ModelMessage) -> dict[str, Any]:
    """A `ModelMessage` as an SDK `Message` dict."""
    content: Any = raw.content
    if raw.contents:
        content = [
            {"type": "text", "text": c.text}
            if c.WhichOneof("kind") == "text"
            else {"type": "image_url", "image_url": {"url": c.image.uri}}
            for c in raw.contents
            if c.WhichOneof("kind") in ("text", "image")
        ]
    return {
        "role": raw.role or "assistant",
        "name": _str(raw.name),
        "content": content,
        "tool_calls": [
            {
                "id": t.id,
                "type": "function",
                "function": {"name": t.name, "arguments": t.arguments_json or "{}"},
            }
            for t in raw.tool_calls
        ]
        or None,
        "tool_call_id": _str(raw.tool_call_id),
    }


def usage(raw: common_pb2.Usage) -> dict[str, Any] | None:
    out = {
        "prompt_tokens": raw.prompt_tokens if raw.HasField("prompt_tokens") else None,
        "completion_tokens": raw.completion_tokens if raw.HasField("completion_tokens") else None,
        "total_tokens": raw.total_tokens if raw.HasField("total_tokens") else None,
    }
    return out if any(v is not None for v in out.values()) else None


def stream_chunk(raw: proxy_service_pb2.ModelChunk, sequence: int) -> dict[str, Any]:
    """One streamed model chunk as an SDK `MessageChunk` (the increment in `content`)."""
    return {
        "role": "assistant",
        "content": raw.content,
        "tool_calls": [
            {"id": t.id, "type": "function", "function": {"name": t.name, "arguments": t.arguments_json}}
            for t in raw.tool_calls
        ]
        or None,
        "is_final": bool(raw.finish_reason),
        "msg_sequence": sequence,
    }


def transcript_item(raw: proxy_service_pb2.TranscriptItem) -> dict[str, Any]:
    metadata = plain(raw.metadata)
    if raw.run_id:
        metadata.setdefault("run_id", raw.run_id)
    return {
        "transcript_id": raw.transcript_id,
        "event_id": raw.event_id,
        "conversation_id": _str(raw.conversation_id),
        "thread_id": _str(raw.thread_id),
        "role": raw.role,
        "item_type": raw.item_type or "message",
        "content": raw.content,
        "content_json": None,
        "attachment_refs": [plain(a) for a in raw.artifacts],
        "seq": raw.seq,
        "cursor": _str(raw.cursor),
        "created_at": seconds(raw.create_time),
        "metadata": metadata,
    }


def event_record(raw: proxy_service_pb2.EventRecord) -> dict[str, Any]:
    return {
        "event_id": raw.event_id,
        "event_type": raw.event_type,
        "event_time": seconds(raw.event_time),
        "source": raw.source or "host_adapter",
        "bot_id": _str(raw.bot_id),
        "workspace_id": _str(raw.workspace_id),
        "conversation_id": _str(raw.conversation_id),
        "thread_id": _str(raw.thread_id),
        "actor_type": _str(raw.actor.actor_type),
        "actor_id": _str(raw.actor.actor_id),
        "actor_name": _str(raw.actor.actor_name),
        "subject_type": _str(raw.subject.subject_type),
        "subject_id": _str(raw.subject.subject_id),
        "input_summary": _str(raw.input_summary),
        "seq": raw.seq,
        "cursor": _str(raw.cursor),
        "created_at": seconds(raw.event_time),
        "metadata": {"data": plain(raw.data)} if raw.HasField("data") else {},
    }


def run_record(raw: host_service_pb2.Run) -> dict[str, Any]:
    status = common_pb2.RunStatus.Name(raw.status).removeprefix("RUN_STATUS_").lower()
    return {
        "run_id": raw.run_id,
        "event_id": _str(raw.event_id),
        "agent_id": _str(raw.agent_id),
        "binding_id": _str(raw.binding_id),
        "runner_id": _str(raw.runner_id),
        "conversation_id": _str(raw.conversation_id),
        "thread_id": _str(raw.thread_id),
        "workspace_id": _str(raw.workspace_id),
        "bot_id": _str(raw.bot_id),
        "status": "created" if status == "unspecified" else status,
        "status_reason": _str(raw.status_reason),
        "created_at": seconds(raw.create_time),
        "started_at": seconds(raw.start_time),
        "finished_at": seconds(raw.finish_time),
        "deadline_at": seconds(raw.deadline_time),
        "cancel_requested_at": seconds(raw.cancel_request_time),
        "usage": usage(raw.usage),
        "metadata": plain(raw.metadata),
    }


def run_event(raw: result_pb2.RunResult) -> dict[str, Any]:
    kind = raw.WhichOneof("payload")
    data = json_format.MessageToDict(getattr(raw, kind), preserving_proto_field_name=True) if kind else {}
    return {
        "run_id": raw.run_id,
        "sequence": raw.sequence,
        "type": RESULT_TYPES.get(kind or "", "unknown"),
        "data": data,
        "usage": usage(raw.usage) if raw.HasField("usage") else None,
        "created_at": seconds(raw.timestamp),
        "source": "runner",
    }


def reply_result(raw: proxy_service_pb2.SendReplyResponse) -> dict[str, Any]:
    return {
        "reply_id": raw.reply_id,
        "delivered": raw.delivered,
        "message_id": _str(raw.platform_message_id),
    }
