"""What runners send, repaired where the boundary's rules allow it (`boundary.check_message`).

Results are this host's to store and serve, so a runner's NaN or NUL never reaches a JSON column or a
client's JSON parser (PostgreSQL and SQLite alike): what can be repaired without losing its meaning is,
and what cannot is reported for the caller to drop the message.
"""

from __future__ import annotations

import math
from typing import Any, Final

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from agentrunner_host.wire.boundary import (
    INT64_MAX,
    K_FLOAT,
    K_MESSAGE,
    K_STRING,
    K_UINT64,
    Violation,
    check_message,
    field_info,
    out_of_range,
)

#: what a repaired string carries instead of a NUL character
NUL_REPLACEMENT: Final = "\ufffd"


def repair_message(msg: Message) -> tuple[list[Violation], list[Violation]]:
    """Repairs in place what a runner's message breaks of the rules and can be repaired without losing
    its meaning: NUL characters become U+FFFD, non-finite numbers become null (in a `Struct`) or 0,
    `uint64` values are clamped below 2^63, out-of-range timestamps and durations are cleared. Returns
    `(repaired, unrepairable)`: what it changed, and what it could not (a string over its cap, too many
    entries), for which the caller drops the message. Results are this host's to store and serve, so a
    runner's NaN never reaches a JSON column or a client's JSON parser (PostgreSQL and SQLite alike)."""
    found = check_message(msg, enums=False)
    if not found:
        return [], []
    _Repair().message(msg)
    left = check_message(msg, enums=False)
    return found, left


class _Repair:
    """The walk of `repair_message` (only run on a message `check_message` found faults in)."""

    def message(self, msg: Message) -> None:
        name = msg.DESCRIPTOR.full_name
        if name == "google.protobuf.Struct":
            self.struct(msg)
            return
        if name == "google.protobuf.ListValue":
            self.list_value(msg)
            return
        if name == "google.protobuf.Value":
            self.value(msg)
            return
        for field, value in msg.ListFields():
            kind, repeated, is_map, _, _ = field_info(field)
            if is_map:
                self.map(field, value)
            elif repeated:
                self.repeated(kind, value)
            else:
                self.single(msg, field.name, kind, value)

    def repeated(self, kind: int, value: Any) -> None:
        """A repeated field's items in place: NULs replaced, non-finite floats 0, uint64 capped."""
        if kind == K_MESSAGE:
            for item in value:
                self.message(item)
        elif kind == K_STRING:
            for i, item in enumerate(value):
                if "\x00" in item:
                    value[i] = item.replace("\x00", NUL_REPLACEMENT)
        elif kind == K_FLOAT:
            for i, item in enumerate(value):
                if not math.isfinite(item):
                    value[i] = 0.0
        elif kind == K_UINT64:
            for i, item in enumerate(value):
                value[i] = min(item, INT64_MAX)

    def single(self, msg: Message, fname: str, kind: int, value: Any) -> None:
        """A singular field: a timestamp out of range or a non-finite float cleared, NULs replaced,
        uint64 capped; a message walked."""
        if kind == K_MESSAGE:
            if out_of_range(value):
                msg.ClearField(fname)
            else:
                self.message(value)
        elif kind == K_STRING and "\x00" in value:
            setattr(msg, fname, value.replace("\x00", NUL_REPLACEMENT))
        elif kind == K_FLOAT and not math.isfinite(value):
            msg.ClearField(fname)
        elif kind == K_UINT64 and value > INT64_MAX:
            setattr(msg, fname, INT64_MAX)

    def map(self, field: FieldDescriptor, value: Any) -> None:
        entry = field.message_type
        assert entry is not None
        vkind = field_info(entry.fields[1])[0]
        for key in list(value):
            item = value[key]
            if vkind == K_MESSAGE:
                self.message(item)
            elif vkind == K_STRING and "\x00" in item:
                value[key] = item.replace("\x00", NUL_REPLACEMENT)
            elif vkind == K_FLOAT and not math.isfinite(item):
                value[key] = 0.0
            if isinstance(key, str) and "\x00" in key:
                fixed = key.replace("\x00", NUL_REPLACEMENT)
                if vkind == K_MESSAGE:
                    value[fixed].CopyFrom(value[key])
                else:
                    value[fixed] = value[key]
                del value[key]

    def value(self, value: Any) -> None:
        kind = value.WhichOneof("kind")
        if kind == "number_value" and not math.isfinite(value.number_value):
            value.null_value = 0
        elif kind == "string_value" and "\x00" in value.string_value:
            value.string_value = value.string_value.replace("\x00", NUL_REPLACEMENT)
        elif kind == "struct_value":
            self.struct(value.struct_value)
        elif kind == "list_value":
            self.list_value(value.list_value)

    def struct(self, msg: Any) -> None:
        fields = msg.fields
        for key in list(fields):
            self.value(fields[key])
            if "\x00" in key:
                fields[key.replace("\x00", NUL_REPLACEMENT)].CopyFrom(fields[key])
                del fields[key]

    def list_value(self, msg: Any) -> None:
        for value in msg.values:
            self.value(value)
