"""Protocol messages as JSON-ready data for people and scripts (the CLI's `--json`, the web console):
proto field names, enum words, and 64-bit integers as numbers (proto JSON writes them as strings)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from agentrunner.v1 import common_pb2


def status_name(status: int) -> str:
    return common_pb2.RunStatus.Name(status).removeprefix("RUN_STATUS_").lower()  # type: ignore[arg-type]


def message_dict(message: Message) -> dict[str, Any]:
    """A message as JSON-ready data: proto field names, and 64-bit integers as numbers (proto JSON
    writes them as strings, which reads wrong in a table or a script)."""
    data: dict[str, Any] = _ints(
        json_format.MessageToDict(message, preserving_proto_field_name=True), message
    )
    return data


def _ints(data: Any, message: Message | None) -> Any:
    if not isinstance(data, dict) or message is None:
        return data
    out: dict[str, Any] = {}
    fields = message.DESCRIPTOR.fields_by_name
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            out[key] = value
            continue
        if field.type in (field.TYPE_INT64, field.TYPE_UINT64, field.TYPE_SINT64, field.TYPE_FIXED64):
            out[key] = [int(v) for v in value] if isinstance(value, list) else int(value)
        elif field.message_type is None or field.message_type.full_name.startswith("google.protobuf."):
            out[key] = (
                value  # scalars, enums, and well-known types (Struct, Value, Timestamp) as JSON has them
            )
        elif field.message_type.GetOptions().map_entry:
            out[key] = value
        elif isinstance(value, list):
            out[key] = [_ints(v, m) for v, m in zip(value, getattr(message, key), strict=False)]
        else:
            out[key] = _ints(value, getattr(message, key))
    return out


def usage_dict(usage: common_pb2.Usage | None) -> dict[str, Any]:
    """Token counts as numbers (proto JSON would write int64 as strings)."""
    if usage is None:
        return {}
    out: dict[str, Any] = {}
    for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if usage.HasField(name):
            out[name] = int(getattr(usage, name))
    if usage.HasField("extra"):
        out["extra"] = json_format.MessageToDict(usage.extra)
    return out
