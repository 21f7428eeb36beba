"""The typed platform event of a run (`ctx.platform_event`).

The host sets `EventContext.platform_event` for the stable event types. When it did not (an older host,
an entry adapter that only fills `data`), the SDK parses `event.data` into the same typed message,
leniently: unknown keys are ignored, numeric ids become strings, `"group"` becomes `CHAT_TYPE_GROUP`,
epoch seconds become timestamps. Other event types have no typed event (None).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import structlog
from google.protobuf import descriptor, json_format
from google.protobuf import message as pb_message

from agentrunner.protocol import INTERACTION_SUBMITTED_EVENT
from agentrunner.v1 import context_pb2

log = structlog.get_logger("agentrunner.events")

FD = descriptor.FieldDescriptor

#: Stable event type -> `PlatformEvent.event` member (`message.deleted` is the public SDK's alias).
EVENT_MEMBERS: dict[str, str] = {
    "message.received": "message_received",
    "message.recalled": "message_recalled",
    "message.deleted": "message_recalled",
    "group.member_joined": "group_member_joined",
    "friend.request_received": "friend_request_received",
    INTERACTION_SUBMITTED_EVENT: "interaction_submitted",
    "schedule.triggered": "schedule_triggered",
    "api.invoked": "api_invoked",
}

TypedEvent = (
    context_pb2.MessageReceivedEvent
    | context_pb2.MessageRecalledEvent
    | context_pb2.GroupMemberJoinedEvent
    | context_pb2.FriendRequestReceivedEvent
    | context_pb2.InteractionSubmittedEvent
    | context_pb2.ScheduleTriggeredEvent
    | context_pb2.ApiInvokedEvent
)

_WELL_KNOWN_JSON = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}


def _enum_value(value: Any, enum: descriptor.EnumDescriptor) -> Any:
    if isinstance(value, str):
        if value in enum.values_by_name:
            return value
        suffix = "_" + value.upper()
        for v in enum.values:
            if v.name.endswith(suffix) and not v.name.endswith("_UNSPECIFIED"):
                return v.name
        return None
    return value


def _scalar(value: Any, field: FD) -> Any:
    if field.type == FD.TYPE_STRING:
        if isinstance(value, bool) or value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return value if isinstance(value, str) else str(value)
    if field.type == FD.TYPE_ENUM and field.enum_type is not None:
        return _enum_value(value, field.enum_type)
    return value


def _value(value: Any, field: FD) -> Any:
    msg = field.message_type
    if msg is None:
        return _scalar(value, field)
    if msg.full_name == "google.protobuf.Timestamp":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return dt.datetime.fromtimestamp(value, tz=dt.UTC).isoformat().replace("+00:00", "Z")
        return value if isinstance(value, str) else None
    if msg.full_name in _WELL_KNOWN_JSON:
        return value
    if isinstance(value, dict):
        return _coerce(value, msg)
    return None


def _coerce(data: dict[str, Any], desc: descriptor.Descriptor) -> dict[str, Any]:
    """`data` reshaped for `json_format.ParseDict` into `desc`: unknown keys dropped, values coerced."""
    out: dict[str, Any] = {}
    for key, raw in data.items():
        f = desc.fields_by_name.get(key) or desc.fields_by_camelcase_name.get(key)
        if f is None or raw is None:
            continue
        if f.is_repeated:
            if not isinstance(raw, list):
                continue
            items = [_value(v, f) for v in raw]
            value: Any = [v for v in items if v is not None]
        else:
            value = _value(raw, f)
        if value is not None:
            out[f.name] = value
    return out


def _chain_text(chain: Any) -> str:
    """Plain text of a public-SDK message chain (`[{"type": "Plain", "text": ...}, ...]`)."""
    if not isinstance(chain, list):
        return ""
    return "".join(
        str(c.get("text", "")) for c in chain if isinstance(c, dict) and c.get("type") in ("Plain", "text")
    )


def parse_platform_event(
    event: context_pb2.EventContext, run_input: context_pb2.RunInput | None = None
) -> context_pb2.PlatformEvent | None:
    """The event's `PlatformEvent`: the host's when set, else parsed from `event.data`; None otherwise."""
    if event.platform_event.WhichOneof("event"):
        return event.platform_event
    member = EVENT_MEMBERS.get(event.event_type)
    if member is None:
        return None
    out = context_pb2.PlatformEvent()
    data = json_format.MessageToDict(event.data) if event.data.fields else {}  # (no data: the usual case)
    out.bot_id = str(data.get("bot_id") or data.get("bot_uuid") or "")
    out.adapter_name = str(data.get("adapter_name") or "")
    target = getattr(out, member)
    if member == "interaction_submitted" and run_input is not None and run_input.HasField("interaction"):
        target.submission.CopyFrom(run_input.interaction)
        return out
    body = dict(data)
    if member == "message_received" and "text" not in body and "message_chain" in body:
        body["text"] = _chain_text(body["message_chain"])
    if member == "interaction_submitted" and "submission" not in body:
        body = {"submission": body}
    try:
        if body:
            json_format.ParseDict(_coerce(body, target.DESCRIPTOR), target, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        log.warning("event data does not parse as a typed event", event_type=event.event_type, error=str(exc))
        target.Clear()
    target.SetInParent()
    return out


def typed_event(
    event: context_pb2.EventContext, run_input: context_pb2.RunInput | None = None
) -> pb_message.Message | None:
    """The set member of the event's `PlatformEvent` (for example a `MessageReceivedEvent`), or None."""
    parsed = parse_platform_event(event, run_input)
    if parsed is None:
        return None
    member = parsed.WhichOneof("event")
    return getattr(parsed, member) if member else None
