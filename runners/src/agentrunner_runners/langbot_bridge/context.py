"""This protocol's `RunContext` as the plugin SDK's `RunnerContext` (the JSON the runtime validates).

Field by field: ids, trigger, event, conversation, actor, subject, input, delivery, resources, context
access, state, runtime, variables, config, adapter and metadata carry over with the SDK's names and
types (timestamps as epoch seconds, enums as the SDK's strings, empty strings as null). What needs a
decision:

- `input.attachments`: our artifact references become `InputAttachment`s (`ref`/`id` = artifact id,
  `source` "artifact", `url` the artifact's `uri` when it has one); the bytes stay with the host.
- `resources.tools`: when the run may reply (`available_apis.reply`), the tool `event_reply` is added, the
  grant `ctx.reply(text)` and `ctx.reply_stream()` check before they send anything.
- `context.available_apis`: ours, plus `reply_stream` = our `reply`; `box` is always off (no Box here).
- `runtime.metadata.component_kind` selects the plugin's component kind (the mapping table's row), and
  `runtime.deadline_at` is the host's deadline, which the runtime enforces itself as well.
- `event.data`: passed as the host has it; when it carries no EBA event and the host parsed a
  `message.received` platform event, the EBA form is built from it, so `ctx.platform_event` and typed
  `@handler` runners see the message.
- Never in the context: the run token and the host's API address (the bridge calls the host itself).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, timestamp_pb2
from google.protobuf import message as pb_message

from agentrunner.context import RunContext
from agentrunner.v1 import common_pb2, context_pb2
from agentrunner_runners.langbot_bridge.kinds import ComponentKind

_SOURCES = {
    context_pb2.TRIGGER_SOURCE_PLATFORM: "platform",
    context_pb2.TRIGGER_SOURCE_WEBUI: "webui",
    context_pb2.TRIGGER_SOURCE_API: "api",
    context_pb2.TRIGGER_SOURCE_SCHEDULER: "scheduler",
    context_pb2.TRIGGER_SOURCE_SYSTEM: "system",
    context_pb2.TRIGGER_SOURCE_HOST_ADAPTER: "host_adapter",
}
_INLINE = {
    context_pb2.INLINE_MODE_NONE: "none",
    context_pb2.INLINE_MODE_CURRENT_EVENT: "current_event",
    context_pb2.INLINE_MODE_RECENT_TAIL: "recent_tail",
    context_pb2.INLINE_MODE_SUMMARY_TAIL: "summary_tail",
}
_MODEL_OPS = frozenset({"invoke", "stream", "rerank", "count_tokens"})
_TOOL_OPS = frozenset({"detail", "call"})
_KB_OPS = frozenset({"list", "retrieve"})
_APIS = (
    "prompt_get",
    "history_page",
    "history_search",
    "event_get",
    "event_page",
    "state",
    "storage",
    "steering_pull",
    "run_get",
    "run_list",
    "run_events_page",
    "run_cancel",
    "run_append_result",
    "run_finalize",
)
EVENT_REPLY_TOOL = "event_reply"


def integral(value: Any) -> Any:
    """JSON from a `Struct` / `Value` with whole numbers as ints: protobuf keeps every number as a
    double, LangBot's host (plain JSON) gives plugins `2`, not `2.0`, for what was written as `2`."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral(v) for v in value]
    return value


def plain(message: pb_message.Message) -> dict[str, Any]:
    """A Struct (or any message) as plain JSON data (whole numbers as ints)."""
    out: dict[str, Any] = integral(json_format.MessageToDict(message, preserving_proto_field_name=True))
    return out


def seconds(ts: timestamp_pb2.Timestamp) -> int | None:
    return ts.seconds if ts.seconds or ts.nanos else None


def _str(value: str) -> str | None:
    return value or None


def interaction_submission(raw: common_pb2.InteractionSubmission) -> dict[str, Any]:
    return {
        "interaction_id": raw.interaction_id,
        "action_id": _str(raw.action_id),
        "values": plain(raw.values),
        "submitted_at": seconds(raw.submitted_at),
    }


def content_element(raw: common_pb2.ContentElement) -> dict[str, Any] | None:
    kind = raw.WhichOneof("kind")
    if kind == "text":
        return {"type": "text", "text": raw.text}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": raw.image.uri}}
    if kind == "file":
        return {"type": "file_url", "file_url": raw.file.uri, "file_name": _str(raw.file.name)}
    if kind == "artifact":
        ref = raw.artifact
        return {
            "type": "file_url",
            "file_url": ref.uri or f"artifact://{ref.artifact_id}",
            "file_name": _str(ref.name),
        }
    return None


def _attachment(ref: common_pb2.ArtifactRef) -> dict[str, Any]:
    kind = "image" if ref.mime_type.startswith("image/") else "file"
    return {
        "ref": ref.artifact_id,
        "id": ref.artifact_id,
        "type": kind,
        "mime_type": _str(ref.mime_type),
        "size": ref.size_bytes or None,
        "name": _str(ref.name),
        "source": "artifact",
        "url": _str(ref.uri),
    }


def run_input(raw: context_pb2.RunInput) -> dict[str, Any]:
    out: dict[str, Any] = {
        "text": raw.text,
        "contents": [c for c in (content_element(x) for x in raw.contents) if c is not None],
        "attachments": [_attachment(a) for a in raw.attachments],
    }
    if raw.HasField("interaction"):
        out["interaction"] = interaction_submission(raw.interaction)
    return out


def conversation(raw: context_pb2.ConversationContext) -> dict[str, Any]:
    return {f.name: _str(getattr(raw, f.name)) for f in raw.DESCRIPTOR.fields}


def actor(raw: context_pb2.ActorContext) -> dict[str, Any]:
    return {
        "actor_type": raw.actor_type or "user",
        "actor_id": _str(raw.actor_id),
        "actor_name": _str(raw.actor_name),
        "metadata": plain(raw.metadata),
    }


def subject(raw: context_pb2.SubjectContext) -> dict[str, Any]:
    return {
        "subject_type": raw.subject_type or "message",
        "subject_id": _str(raw.subject_id),
        "data": plain(raw.data),
    }


def _eba_message(raw: context_pb2.EventContext) -> dict[str, Any] | None:
    """The EBA `message.received` event for a host that sent only the typed platform event."""
    if raw.platform_event.WhichOneof("event") != "message_received":
        return None
    msg = raw.platform_event.message_received
    text = msg.text or "\n".join(c.text for c in msg.contents if c.WhichOneof("kind") == "text")
    out: dict[str, Any] = {
        "type": "message.received",
        "bot_uuid": raw.platform_event.bot_id,
        "adapter_name": raw.platform_event.adapter_name,
        "timestamp": float(seconds(raw.event_time) or 0),
        "message_id": msg.message_id,
        "message_chain": [{"type": "Plain", "text": text}] if text else [],
        "sender": {"id": msg.sender.id, "nickname": msg.sender.nickname},
        "chat_type": "group" if msg.chat_type == context_pb2.CHAT_TYPE_GROUP else "private",
        "chat_id": msg.chat_id,
    }
    if msg.HasField("group"):
        out["group"] = {"id": msg.group.id, "name": msg.group.name}
    return out


def event(raw: context_pb2.EventContext) -> dict[str, Any]:
    data = plain(raw.data)
    if "type" not in data:
        data = _eba_message(raw) or data
    return {
        "event_id": raw.event_id,
        "event_type": raw.event_type,
        "event_time": seconds(raw.event_time),
        "source": raw.source or "host_adapter",
        "source_event_type": _str(raw.source_event_type),
        "raw_ref": (
            {"ref_id": _str(raw.raw_ref.ref_id), "storage_key": _str(raw.raw_ref.storage_key)}
            if raw.HasField("raw_ref")
            else None
        ),
        "data": data,
    }


def delivery(raw: context_pb2.DeliveryContext) -> dict[str, Any]:
    out: dict[str, Any] = {
        "automatic_reply": raw.automatic_reply,
        "surface": raw.surface or "api",
        "reply_target": plain(raw.reply_target) if raw.HasField("reply_target") else None,
        "supports_streaming": raw.supports_streaming,
        "supports_edit": raw.supports_edit,
        "supports_reaction": raw.supports_reaction,
        "max_message_size": raw.max_message_size if raw.HasField("max_message_size") else None,
        "platform_capabilities": plain(raw.platform_capabilities),
    }
    if raw.HasField("interactions"):
        caps = raw.interactions
        out["interactions"] = {
            "field_types": [
                common_pb2.InteractionFieldType.Name(t).removeprefix("INTERACTION_FIELD_TYPE_").lower()
                for t in caps.field_types
                if t
            ],
            "action_styles": [
                common_pb2.InteractionActionStyle.Name(s).removeprefix("INTERACTION_ACTION_STYLE_").lower()
                for s in caps.action_styles
                if s
            ],
            "supports_updates": caps.supports_updates,
            "max_fields": caps.max_fields if caps.HasField("max_fields") else None,
        }
    return out


def resources(raw: context_pb2.Resources, apis: context_pb2.ContextApis) -> dict[str, Any]:
    tools = [
        {
            "tool_name": t.tool_name,
            "tool_type": _str(t.tool_type),
            "description": _str(t.description),
            "operations": [op for op in t.operations if op in _TOOL_OPS],
            "parameters": plain(t.parameters) if t.HasField("parameters") else None,
        }
        for t in raw.tools
    ]
    if apis.reply and not any(t["tool_name"] == EVENT_REPLY_TOOL for t in tools):
        tools.append(
            {
                "tool_name": EVENT_REPLY_TOOL,
                "tool_type": "event",
                "description": "Reply to the current event",
                "operations": ["call"],
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
            }
        )
    return {
        "models": [
            {
                "model_id": m.model_id,
                "model_type": _str(m.model_type),
                "provider": _str(m.provider),
                "operations": [op for op in m.operations if op in _MODEL_OPS],
            }
            for m in raw.models
        ],
        "tools": tools,
        "knowledge_bases": [
            {
                "kb_id": k.kb_id,
                "kb_name": _str(k.kb_name),
                "kb_type": _str(k.kb_type),
                "operations": [op for op in k.operations if op in _KB_OPS],
            }
            for k in raw.knowledge_bases
        ],
        "skills": [
            {
                "skill_name": s.skill_name,
                "display_name": _str(s.display_name),
                "description": _str(s.description),
            }
            for s in raw.skills
        ],
        "storage": {
            "plugin_storage": raw.storage.plugin_storage,
            "workspace_storage": raw.storage.workspace_storage,
        },
        "platform_capabilities": plain(raw.platform_capabilities),
    }


def context_access(raw: context_pb2.ContextAccess) -> dict[str, Any]:
    apis = raw.available_apis
    flags = {name: getattr(apis, name) for name in _APIS}
    flags.update(box=False, reply_stream=apis.reply)
    policy = raw.inline_policy
    return {
        "conversation_id": _str(raw.conversation_id),
        "thread_id": _str(raw.thread_id),
        "latest_cursor": _str(raw.latest_cursor),
        "event_seq": raw.event_seq if raw.HasField("event_seq") else None,
        "transcript_seq": raw.transcript_seq if raw.HasField("transcript_seq") else None,
        "has_history_before": raw.has_history_before,
        "inline_policy": {
            "mode": _INLINE.get(policy.mode, "current_event"),
            "delivered_count": policy.delivered_count,
            "source_total_count": policy.source_total_count
            if policy.HasField("source_total_count")
            else None,
            "messages_complete": policy.messages_complete,
            "reason": _str(policy.reason),
        },
        "available_apis": flags,
    }


def runner_context(ctx: RunContext, kind: ComponentKind) -> dict[str, Any]:
    """The whole `RunnerContext` for one run of a plugin runner of `kind`."""
    raw = ctx.raw
    runtime_metadata = plain(raw.runtime.metadata)
    runtime_metadata["component_kind"] = kind.name
    out: dict[str, Any] = {
        "run_id": raw.run_id,
        "trigger": {
            "type": raw.trigger.type or raw.event.event_type,
            "source": _SOURCES.get(raw.trigger.source, "host_adapter"),
            "timestamp": seconds(raw.trigger.timestamp),
        },
        "event": event(raw.event),
        "conversation": conversation(raw.conversation) if raw.HasField("conversation") else None,
        "actor": actor(raw.actor) if raw.HasField("actor") else None,
        "subject": subject(raw.subject) if raw.HasField("subject") else None,
        "input": run_input(raw.input),
        "delivery": delivery(raw.delivery),
        "resources": resources(raw.resources, raw.context.available_apis),
        "context": context_access(raw.context),
        "state": {
            "conversation": plain(raw.state.conversation),
            "actor": plain(raw.state.actor),
            "subject": plain(raw.state.subject),
            "runner": plain(raw.state.runner),
        },
        "runtime": {
            "langbot_version": _str(raw.runtime.host_version),
            "trace_id": _str(raw.runtime.trace_id),
            "deadline_at": (
                raw.runtime.deadline_at.ToNanoseconds() / 1e9 if raw.runtime.HasField("deadline_at") else None
            ),
            "metadata": runtime_metadata,
        },
        "variables": plain(raw.variables),
        "config": integral(dict(ctx.config)) if isinstance(ctx.config, dict) else plain(raw.config),
        "adapter": {"extra": plain(raw.adapter.extra)} if raw.HasField("adapter") else None,
        "metadata": plain(raw.metadata),
    }
    return out
