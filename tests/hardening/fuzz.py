"""Requests generated from the contract's descriptors: random messages, mutated encodings, garbage.

`RequestFuzzer(seed).cases(method, n)` yields `n` request bodies (bytes) for one RPC: mostly messages
filled from the method's input descriptor with values chosen to hurt (NUL, huge and odd strings,
NaN and infinities, out-of-range timestamps, integer extremes, unknown enum values, deep Structs),
plus mutated encodings of such messages and bytes that are no protobuf at all. Nothing is specific to
one RPC: methods added to the protos are covered as they appear.
"""

from __future__ import annotations

import math
import random
import string
from collections.abc import Iterator
from typing import Any, cast

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message

F = FieldDescriptor
_INT_RANGES = {
    F.TYPE_INT32: (-(2**31), 2**31 - 1),
    F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1),
    F.TYPE_FIXED32: (0, 2**32 - 1),
    F.TYPE_INT64: (-(2**63), 2**63 - 1),
    F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1),
    F.TYPE_FIXED64: (0, 2**64 - 1),
}
_NASTY_STRINGS = [
    "",
    "a",
    "\x00",
    "nul\x00inside",
    "../../etc/passwd",
    "' OR 1=1 --",
    "%s%n%x",
    "😀" * 5,
    "\u202e\u200b",
    "[::1",
    "http://[::1",
    "data:;base64,@@@",
    "data:image/png;base64,",
    "message.*",
    "*",
    "plugin:x/y/z",
    "run_" + "0" * 32,
]


def _json_value(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        return rng.choice([None, True, 0, -1, 1.5, 1e308, float("nan"), float("inf"), "x", "\x00", "a" * 200])
    if roll < 0.75:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["k", "\x00", "a.b", ""]) + str(i): _json_value(rng, depth + 1) for i in range(3)}


class RequestFuzzer:
    """Deterministic for a seed. Cases alternate between hostile values (which the boundary rules
    mostly refuse) and clean ones (short strings, finite numbers, known enum values) that get past them
    to the handlers."""

    def __init__(self, seed: int, *, big_strings: bool = True) -> None:
        self.rng = random.Random(seed)
        self.big_strings = big_strings
        self.clean = False

    # -- values ----------------------------------------------------------------------------------------
    def string(self) -> str:
        rng = self.rng
        roll = rng.random()
        if self.clean:
            return rng.choice(
                ["", "a", "conv-1", "k", "x" * 40, "plugin:test/rogue/default", "run_" + "0" * 32]
            )
        if roll < 0.45:
            return rng.choice(_NASTY_STRINGS)
        if roll < 0.8:
            return "".join(rng.choices(string.ascii_letters + string.digits + "_-.:/", k=rng.randint(1, 24)))
        if roll < 0.95 or not self.big_strings:
            return "x" * rng.choice([127, 128, 129, 255, 256, 257, 513, 1025, 5000])
        return "y" * rng.choice([100_000, 300_000])

    def scalar(self, field: FieldDescriptor) -> Any:
        rng = self.rng
        kind = field.type
        if kind == F.TYPE_STRING:
            return self.string()
        if kind == F.TYPE_BYTES:
            return rng.randbytes(rng.choice([0, 1, 16, 300, 70_000]))
        if kind == F.TYPE_BOOL:
            return rng.random() < 0.5
        if kind in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
            if self.clean:
                return rng.choice([0.0, 0.5, 2.0])
            return rng.choice([0.0, -1.0, 0.5, 1e38, math.nan, math.inf, -math.inf, 3.4e38])
        if kind == F.TYPE_ENUM:
            values = [v.number for v in field.enum_type.values]
            return rng.choice(values if self.clean else [*values, *values, 99, -1, 2**31 - 1])
        low, high = _INT_RANGES[kind]
        if self.clean:
            return rng.choice([0, 1, 2, 10, 100])
        return rng.choice([0, 1, -1 if low < 0 else 2, low, high, rng.randint(low, high), 2**63 - 1, 2**63])

    def fill(self, msg: Message, depth: int = 0) -> Message:
        """Sets a random subset of `msg`'s fields (all of them near the top, fewer deeper)."""
        rng = self.rng
        descriptor = cast(Descriptor, msg.DESCRIPTOR)
        if descriptor.full_name == "google.protobuf.Struct":
            msg.update({f"f{i}": self.json(depth) for i in range(rng.randint(0, 3))})  # type: ignore[attr-defined]
            return msg
        if descriptor.full_name == "google.protobuf.Value":
            msg.MergeFrom(_value(self.json(depth)))
            return msg
        if self.clean and descriptor.full_name in ("google.protobuf.Timestamp", "google.protobuf.Duration"):
            msg.seconds = rng.choice([1, 5, 1_700_000_000])  # type: ignore[attr-defined]
            return msg
        if descriptor.full_name == "google.protobuf.Timestamp":
            msg.seconds = rng.choice([0, 1_700_000_000, -(2**40), 2**40, 253_402_300_800])  # type: ignore[attr-defined]
            msg.nanos = rng.choice([0, 5, 999_999_999, -1, 2**30])  # type: ignore[attr-defined]
            return msg
        if descriptor.full_name == "google.protobuf.Duration":
            msg.seconds = rng.choice([0, 5, -5, 2**40])  # type: ignore[attr-defined]
            msg.nanos = rng.choice([0, 5, -5, 2**30])  # type: ignore[attr-defined]
            return msg
        chance = 0.7 if depth == 0 else 0.35 / depth
        seen_oneofs: set[str] = set()
        for field in descriptor.fields:
            if rng.random() > chance:
                continue
            oneof = field.containing_oneof
            if oneof is not None and not oneof.name.startswith("_"):
                if oneof.name in seen_oneofs:
                    continue
                seen_oneofs.add(oneof.name)
            try:
                self._set(msg, field, depth)
            except (ValueError, TypeError, OverflowError):
                pass  # a value the field type itself refuses (protobuf checks ranges on assignment)
        return msg

    def _set(self, msg: Message, field: FieldDescriptor, depth: int) -> None:
        rng = self.rng
        target = getattr(msg, field.name)
        if field.type == F.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                key_field, value_field = field.message_type.fields
                for _ in range(rng.randint(0, 3)):
                    key = self.scalar(key_field)
                    if value_field.type == F.TYPE_MESSAGE:
                        if depth < 4:
                            self.fill(target[key], depth + 1)
                    else:
                        target[key] = self.scalar(value_field)
                return
            if depth >= 4:
                return
            if field.is_repeated:
                for _ in range(rng.randint(0, 3)):
                    self.fill(target.add(), depth + 1)
            else:
                self.fill(target, depth + 1)
                target.SetInParent()
            return
        if field.is_repeated:
            target.extend(self.scalar(field) for _ in range(rng.randint(0, 4)))
            return
        setattr(msg, field.name, self.scalar(field))

    def json(self, depth: int) -> Any:
        if self.clean:
            return self.rng.choice([None, True, 1, "v", [1, "a"], {"k": "v"}])
        return _json_value(self.rng, depth)

    # -- encodings -------------------------------------------------------------------------------------
    def mutate(self, data: bytes) -> bytes:
        rng = self.rng
        buf = bytearray(data or b"\x08\x01")
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            pos = rng.randrange(len(buf)) if buf else 0
            if op < 0.4 and buf:
                buf[pos] ^= 1 << rng.randrange(8)
            elif op < 0.6:
                del buf[pos:]
                buf = buf or bytearray(b"\x0a")
            elif op < 0.8:
                buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
            else:
                buf[pos:pos] = b"\x0a\xff\xff\xff\xff\x0f"  # a length that runs past the end
        return bytes(buf)

    def cases(self, method: MethodDescriptor, n: int) -> Iterator[bytes]:
        cls = message_factory.GetMessageClass(method.input_type)
        rng = self.rng
        for i in range(n):
            roll = rng.random()
            self.clean = i % 2 == 0
            if self.clean:
                yield self.fill(cls()).SerializeToString()
                continue
            if roll < 0.6:
                yield self.fill(cls()).SerializeToString()
            elif roll < 0.85:
                yield self.mutate(self.fill(cls()).SerializeToString())
            elif roll < 0.95:
                yield rng.randbytes(rng.randint(1, 64))
            else:
                yield b""


def _value(python: Any) -> Message:
    from google.protobuf import struct_pb2

    out = struct_pb2.Value()
    if python is None:
        out.null_value = 0  # type: ignore[assignment]
    elif isinstance(python, bool):
        out.bool_value = python
    elif isinstance(python, int | float):
        out.number_value = float(python)
    elif isinstance(python, str):
        out.string_value = python
    elif isinstance(python, list):
        out.list_value.extend(python)
    else:
        out.struct_value.update(python)
    return out


def service_methods(*services: str) -> list[MethodDescriptor]:
    pool = descriptor_pool.Default()
    return [m for name in services for m in pool.FindServiceByName(name).methods]
