"""Builds fully populated instances of any contract message, for round-trip tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from google.protobuf import descriptor, duration_pb2, struct_pb2, timestamp_pb2
from google.protobuf.message import Message

FD = descriptor.FieldDescriptor
_SCALARS: dict[int, Any] = {
    FD.TYPE_STRING: "sample-ü",
    FD.TYPE_BYTES: b"\x00\xffbytes",
    FD.TYPE_BOOL: True,
    FD.TYPE_INT32: -7,
    FD.TYPE_SINT32: -7,
    FD.TYPE_SFIXED32: -7,
    FD.TYPE_INT64: -(2**40),
    FD.TYPE_SINT64: -(2**40),
    FD.TYPE_SFIXED64: -(2**40),
    FD.TYPE_UINT32: 7,
    FD.TYPE_FIXED32: 7,
    FD.TYPE_UINT64: 2**40,
    FD.TYPE_FIXED64: 2**40,
    FD.TYPE_DOUBLE: 0.5,
    FD.TYPE_FLOAT: 0.5,
}


def _fill_well_known(msg: Message) -> bool:
    if isinstance(msg, struct_pb2.Struct):
        msg.update({"k": "v", "n": 1.5, "b": True, "nested": {"list": [1, "two", None]}})
        return True
    if isinstance(msg, struct_pb2.Value):
        msg.struct_value.update({"answer": 42})
        return True
    if isinstance(msg, timestamp_pb2.Timestamp):
        msg.FromJsonString("2026-11-30T01:02:03.456Z")
        return True
    if isinstance(msg, duration_pb2.Duration):
        msg.FromJsonString("1.500s")
        return True
    return False


def populate(msg: Message, depth: int = 0, oneof_choice: dict[str, str] | None = None) -> Message:
    """Sets every field (the chosen member of each oneof, by default the first) to a non-default value."""
    if _fill_well_known(msg):
        return msg
    choice = oneof_choice or {}
    for field in msg.DESCRIPTOR.fields:
        oneof = field.containing_oneof
        if oneof is not None:
            synthetic = len(oneof.fields) == 1 and oneof.name.startswith("_")
            if not synthetic and choice.get(oneof.name, oneof.fields[0].name) != field.name:
                continue
        _set_field(msg, cast(FD, field), depth)
    return msg


def _set_field(msg: Message, field: FD, depth: int) -> None:
    is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
    if is_map:
        value_field = field.message_type.fields_by_name["value"]
        target = getattr(msg, field.name)
        if value_field.message_type is not None:
            if depth < 4:
                populate(target["key-1"], depth + 1)
        elif value_field.enum_type is not None:
            target["key-1"] = value_field.enum_type.values[-1].number
        else:
            target["key-1"] = _SCALARS[value_field.type]
        return
    repeated = field.is_repeated
    if field.message_type is not None:
        if depth >= 4:
            return
        if repeated:
            populate(getattr(msg, field.name).add(), depth + 1)
        else:
            populate(getattr(msg, field.name), depth + 1)
        return
    if field.enum_type is not None:
        value = field.enum_type.values[-1].number
    else:
        value = _SCALARS[field.type]
    if repeated:
        getattr(msg, field.name).append(value)
    else:
        setattr(msg, field.name, value)


def variants(cls: type[Message]) -> Iterator[Message]:
    """One populated instance per member of each (non-synthetic) oneof, or one when there is none."""
    oneofs = [o for o in cls.DESCRIPTOR.oneofs if not (len(o.fields) == 1 and o.name.startswith("_"))]
    if not oneofs:
        yield populate(cls())
        return
    for oneof in oneofs:
        for member in oneof.fields:
            yield populate(cls(), oneof_choice={oneof.name: member.name})
