"""The host's wire boundary: what every request must be before a handler sees it.

One sanitiser for values the stores and the wire cannot carry, applied where requests enter (the
request deserializers of HostService and ProxyService) and, with the same rules, to what runners send
(manifests, and results, which `repair.py` mends where it can). A value that breaks a rule is refused
with INVALID_ARGUMENT and a `google.rpc.BadRequest` naming the field, never stored: so no input can
fail on PostgreSQL that SQLite took (or the reverse), and no handler meets a value it cannot serialize.

The rules (`check_message`):

- strings carry no NUL (PostgreSQL text and JSONB refuse it; SQLite would keep it);
- doubles and floats are finite, also inside `Struct` / `Value` (JSON has no NaN or Infinity);
- `Timestamp` and `Duration` are in the range protobuf defines (years 1 to 9999, ±10,000 years);
- `uint64` values fit a signed 64-bit column (< 2^63);
- enum values are ones this host knows (requests only: a runner's newer enum values are its business);
- identifiers (`id`, `*_id`), names, keys, types and cursors fit the columns that store them;
- repeated fields and maps hold at most `REPEATED_MAX` entries.

A request that does not decode at all becomes `Refused` in the deserializer (gRPC would answer it
`UNKNOWN` and log a traceback): the servicer answers the refusal like any other client error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from agentrunner.errors import InvalidArgumentError
from agentrunner_host.observability.memory import LARGE_MESSAGE_BYTES, note_message

#: the longest identifier any request may carry (the narrowest id column that stores one is 128)
ID_MAX_CHARS: Final = 128
#: caps of the other strings stored in bounded columns, by field name
NAMED_CAPS: Final[dict[str, int]] = {
    "run_id": 64,
    "event_type": 128,
    "source": 128,
    "source_event_type": 128,
    "mime_type": 256,
    "name": 512,
    "key": 512,
    "prefix": 512,
}
#: cursors are short opaque strings the host minted
CURSOR_MAX_CHARS: Final = 512
#: entries of one repeated field or map
REPEATED_MAX: Final = 10_000
#: violations reported per request (the walk stops there)
VIOLATIONS_MAX: Final = 20

INT64_MAX: Final = 2**63 - 1
_TIMESTAMP_SECONDS: Final = (-62_135_596_800, 253_402_300_799)  # 0001-01-01 .. 9999-12-31T23:59:59
_DURATION_SECONDS: Final = 315_576_000_000
_NANOS: Final = 999_999_999

_FLOATS = frozenset({FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT})
_UINT64 = frozenset({FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64})

Violation = tuple[str, str]
#: a field path, rendered only when a rule is broken: `(parent, segment)` links, None at the root; a
#: segment is a field name or Struct key (str), an index (int) or a map key (a one-item list)
Path = tuple[Any, Any] | None


def render(path: Path) -> str:
    parts: list[Any] = []
    while path is not None:
        path, segment = path
        parts.append(segment)
    out = ""
    for segment in reversed(parts):
        if isinstance(segment, int):
            out += f"[{segment}]"
        elif isinstance(segment, list):
            out += f"[{_key(segment[0])}]"
        else:
            out += _key(segment) if not out else "." + _key(segment)
    return out


def string_cap(name: str) -> int | None:
    """The length cap of a string field called `name`, or None when only the message size bounds it."""
    cap = NAMED_CAPS.get(name)
    if cap is not None:
        return cap
    if name == "id" or name.endswith("_id"):
        return ID_MAX_CHARS
    if name.endswith("_cursor") or name == "cursor":
        return CURSOR_MAX_CHARS
    return None


def check_text(value: str, path: str, cap: int | None = None) -> Violation | None:
    """The rule for one string: no NUL, at most `cap` characters."""
    if "\x00" in value:
        return (path, "must not contain NUL characters")
    if cap is not None and len(value) > cap:
        return (path, f"is {len(value)} characters long; at most {cap}")
    return None


class _Stop(Exception):
    """Enough violations found."""


#: per field: (kind, repeated, map, string cap, enum values or None)
_FieldInfo = tuple[int, bool, bool, int | None, frozenset[int] | None]
_INFO: dict[FieldDescriptor, _FieldInfo] = {}
K_STRING, K_MESSAGE, K_FLOAT, K_UINT64, K_ENUM, K_OTHER = range(6)


def field_info(field: FieldDescriptor) -> _FieldInfo:
    info = _INFO.get(field)
    if info is None:
        kind = field.type
        if kind == FieldDescriptor.TYPE_STRING:
            k = K_STRING
        elif kind == FieldDescriptor.TYPE_MESSAGE:
            k = K_MESSAGE
        elif kind in _FLOATS:
            k = K_FLOAT
        elif kind in _UINT64:
            k = K_UINT64
        elif kind == FieldDescriptor.TYPE_ENUM:
            k = K_ENUM
        else:
            k = K_OTHER
        message_type, enum_type = field.message_type, field.enum_type
        is_map = k == K_MESSAGE and message_type is not None and bool(message_type.GetOptions().map_entry)
        enum_values = frozenset(enum_type.values_by_number) if enum_type is not None else None
        info = _INFO[field] = (k, field.is_repeated, is_map, string_cap(field.name), enum_values)
    return info


class _Walk:
    """One walk over a message; stops after `VIOLATIONS_MAX` violations."""

    __slots__ = ("enums", "found")

    def __init__(self, enums: bool) -> None:
        self.enums = enums
        self.found: list[Violation] = []

    def add(self, path: Path, problem: str) -> None:
        self.found.append((render(path), problem))
        if len(self.found) >= VIOLATIONS_MAX:
            raise _Stop

    def message(self, msg: Message, path: Path) -> None:
        name = msg.DESCRIPTOR.full_name
        special = _SPECIAL.get(name)
        if special is not None:
            special(self, msg, path)
            return
        for field, value in msg.ListFields():
            kind, repeated, is_map, cap, enum_values = field_info(field)
            where = (path, field.name)
            if not repeated:
                self.scalar(kind, cap, enum_values, value, where)
                continue
            if len(value) > REPEATED_MAX:
                self.add(where, f"has {len(value)} entries; at most {REPEATED_MAX}")
            if is_map:
                entry = field.message_type
                assert entry is not None  # (a map field's entry message)
                key_field, value_field = entry.fields
                vkind, _, _, vcap, venum = field_info(value_field)
                string_keys = key_field.type == FieldDescriptor.TYPE_STRING
                for key in value:
                    if string_keys and "\x00" in key:
                        self.add(where, "has a key with a NUL character")
                    self.scalar(vkind, vcap, venum, value[key], (where, [key]))
            elif kind == K_STRING:
                for i, item in enumerate(value):
                    if "\x00" in item or (cap is not None and len(item) > cap):
                        self.scalar(kind, cap, None, item, (where, i))
            elif kind != K_OTHER:
                for i, item in enumerate(value):
                    self.scalar(kind, cap, enum_values, item, (where, i))

    def scalar(
        self, kind: int, cap: int | None, enum_values: frozenset[int] | None, value: Any, where: Path
    ) -> None:
        if kind == K_MESSAGE:
            self.message(value, where)
        elif kind == K_STRING:
            if "\x00" in value:
                self.add(where, "must not contain NUL characters")
            elif cap is not None and len(value) > cap:
                self.add(where, f"is {len(value)} characters long; at most {cap}")
        elif kind == K_FLOAT:
            if not math.isfinite(value):
                self.add(where, f"must be a finite number, not {value}")
        elif kind == K_UINT64:
            if value > INT64_MAX:
                self.add(where, f"must be below 2^63, not {value}")
        elif kind == K_ENUM and self.enums and enum_values is not None and value not in enum_values:
            self.add(where, f"{value} is not a known value")

    def json_value(self, value: Any, path: Path) -> None:
        """A `google.protobuf.Value`, without the generic walk (Structs can be large)."""
        kind = value.WhichOneof("kind")
        if kind == "number_value":
            if not math.isfinite(value.number_value):
                self.add(path, f"must be a finite number, not {value.number_value}")
        elif kind == "string_value":
            if "\x00" in value.string_value:
                self.add(path, "must not contain NUL characters")
        elif kind == "struct_value":
            self.struct(value.struct_value, path)
        elif kind == "list_value":
            self.list_value(value.list_value, path)

    def struct(self, msg: Any, path: Path) -> None:
        fields = msg.fields
        if len(fields) > REPEATED_MAX:
            self.add(path, f"has {len(fields)} entries; at most {REPEATED_MAX}")
        json_value = self.json_value
        for key in fields:
            if "\x00" in key:
                self.add(path, "has a key with a NUL character")
            json_value(fields[key], (path, key))

    def list_value(self, msg: Any, path: Path) -> None:
        values = msg.values
        if len(values) > REPEATED_MAX:
            self.add(path, f"has {len(values)} entries; at most {REPEATED_MAX}")
        for i, value in enumerate(values):
            self.json_value(value, (path, i))


def _key(key: object) -> str:
    text = str(key)
    return text if len(text) <= 64 and "\x00" not in text else text[:64].replace("\x00", "?") + "…"


def timestamp_in_range(msg: Any) -> bool:
    """Whether a `Timestamp` is in the range protobuf defines (years 1 to 9999)."""
    low, high = _TIMESTAMP_SECONDS
    seconds: int = msg.seconds
    nanos: int = msg.nanos
    return low <= seconds <= high and 0 <= nanos <= _NANOS


def _timestamp(walk: _Walk, msg: Any, path: Path) -> None:
    if not timestamp_in_range(msg):
        walk.add(path, "is outside 0001-01-01 .. 9999-12-31")


def _duration(walk: _Walk, msg: Any, path: Path) -> None:
    seconds, nanos = msg.seconds, msg.nanos
    if abs(seconds) > _DURATION_SECONDS or abs(nanos) > _NANOS or (seconds * nanos < 0):
        walk.add(path, "is not a valid duration")


_SPECIAL: Final[dict[str, Callable[[_Walk, Any, Path], None]]] = {
    "google.protobuf.Timestamp": _timestamp,
    "google.protobuf.Duration": _duration,
    "google.protobuf.Struct": _Walk.struct,
    "google.protobuf.Value": _Walk.json_value,
    "google.protobuf.ListValue": _Walk.list_value,
}


def check_message(msg: Message, *, enums: bool = True, path: str = "") -> list[Violation]:
    """Every rule broken by `msg` (at most `VIOLATIONS_MAX`), as `(field path, what is wrong)`."""
    walk = _Walk(enums)
    try:
        walk.message(msg, (None, path) if path else None)
    except _Stop:
        pass
    return walk.found


def violations_error(violations: list[Violation], what: str = "the request") -> InvalidArgumentError:
    """The INVALID_ARGUMENT for `violations` (the first named in the message, all in `BadRequest`)."""
    field, problem = violations[0]
    more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
    return InvalidArgumentError(f"{what} is invalid: {field} {problem}{more}", violations=violations)


class Refused:
    """A request the deserializer refused; the servicer answers `error` (`admit`)."""

    __slots__ = ("error",)

    def __init__(self, error: InvalidArgumentError) -> None:
        self.error = error


def request_deserializer(cls: type[Message]) -> Callable[[bytes], Any]:
    """`cls.FromString` that never raises: a request that does not decode, or breaks a rule, becomes
    `Refused` (the handler answers it through `admit`)."""
    name = cls.DESCRIPTOR.full_name
    from_string = cls.FromString

    def deserialize(data: bytes) -> Message | Refused:
        if len(data) >= LARGE_MESSAGE_BYTES:
            note_message(len(data))
        try:
            msg = from_string(data)
        except Exception:  # DecodeError, and whatever else a malformed encoding raises in the decoder
            return Refused(
                InvalidArgumentError(
                    f"the request does not decode as {name}", violations=[("", "malformed protobuf encoding")]
                )
            )
        found = check_message(msg)
        return Refused(violations_error(found)) if found else msg

    return deserialize


def admit(request: Any) -> Any:
    """The request, or the refusal its deserializer found raised as INVALID_ARGUMENT."""
    if type(request) is Refused:
        raise request.error
    return request


def out_of_range(value: Message) -> bool:
    """A `Timestamp` or `Duration` outside the range protobuf defines (`repair.repair_message` clears it)."""
    name = value.DESCRIPTOR.full_name
    if name not in ("google.protobuf.Timestamp", "google.protobuf.Duration"):
        return False
    walk = _Walk(enums=False)
    _SPECIAL[name](walk, value, None)
    return bool(walk.found)
