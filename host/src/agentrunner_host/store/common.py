"""Helpers shared by the repositories: ids, time, proto/JSON conversion, opaque cursors, upserts."""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import hashlib
import hmac
import json
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from google.protobuf.message import Message
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import CursorResult, Result
from sqlalchemy.ext.asyncio import AsyncSession

from agentrunner.errors import InvalidArgumentError
from agentrunner_host.ports import utcnow
from agentrunner_host.store.db import Database

__all__ = ["CursorCodec", "new_id", "utcnow"]

M = TypeVar("M", bound=Message)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def to_timestamp(value: dt.datetime | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value.astimezone(dt.UTC))
    return ts


def from_timestamp(ts: timestamp_pb2.Timestamp | None) -> dt.datetime | None:
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return None
    return ts.ToDatetime(tzinfo=dt.UTC)


def message_to_json(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def json_to_message(data: Mapping[str, Any], message: M) -> M:
    json_format.ParseDict(dict(data), message, ignore_unknown_fields=True)
    return message


def struct_to_dict(value: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(value)


def dict_to_struct(value: Mapping[str, Any] | None) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    if value:
        out.update(dict(value))
    return out


def value_to_python(value: struct_pb2.Value) -> Any:
    return json_format.MessageToDict(value)


def python_to_value(value: Any) -> struct_pb2.Value:
    out = struct_pb2.Value()
    json_format.ParseDict(value, out)
    return out


def json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def clip_json(value: Mapping[str, Any], cap: int) -> dict[str, Any]:
    """Small structured data only: anything over `cap` bytes is replaced by a marker."""
    if json_size(value) <= cap:
        return dict(value)
    return {"_truncated": True, "_size_bytes": json_size(value)}


def dialect_insert(session: AsyncSession) -> Any:
    """`insert` of the session's dialect (both support ON CONFLICT)."""
    return insert_for(session.get_bind().dialect.name)


def insert_for(dialect: str) -> Any:
    """`insert` (with ON CONFLICT) of the dialect named `dialect`. The PostgreSQL dialect is imported
    here, when a PostgreSQL database asks for it: on SQLite it would cost every host ~2.1 MiB (issue 37)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql  # only on PostgreSQL

        return postgresql.insert
    return sqlite.insert


def rowcount(result: Result[Any]) -> int:
    """The rows an UPDATE or DELETE matched. `execute` is typed as returning a `Result`; a DML
    statement's result is a `CursorResult`, which has the count."""
    assert isinstance(result, CursorResult)
    return int(result.rowcount or 0)


def escape_like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class UnitOfWork:
    """Runs a repository method in the caller's transaction, or in a new one."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @contextlib.asynccontextmanager
    async def write(self, session: AsyncSession | None = None) -> AsyncIterator[AsyncSession]:
        if session is not None:
            yield session
            return
        async with self.db.write() as new:
            yield new

    @contextlib.asynccontextmanager
    async def read(self, session: AsyncSession | None = None) -> AsyncIterator[AsyncSession]:
        if session is not None:
            yield session
            return
        async with self.db.read() as new:
            yield new


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _token(body: bytes, mac: bytes) -> str:
    """`body.mac`, each in unpadded URL-safe base64 (`base64.urlsafe_b64encode(...).rstrip(b"=")` in C
    calls only)."""
    b2a, table = binascii.b2a_base64, _URLSAFE
    return (
        b2a(body, newline=False).translate(table).rstrip(b"=")
        + b"."
        + b2a(mac, newline=False).translate(table).rstrip(b"=")
    ).decode()


class CursorCodec:
    """Opaque, tamper-evident cursors (PROTOCOL_V1 §7.4).

    A cursor carries a kind and a position, and a MAC (keyed BLAKE2b) over kind, scope (e.g. the conversation id)
    and position with a key every replica shares (stored in `host_secrets`). A cursor edited by hand,
    minted for another conversation or another API, or by another database fails verification.
    """

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        # keyed once: copying a keyed state is cheaper than keying per cursor (a page mints 50)
        self._keyed = hashlib.blake2b(key=secret[:64], digest_size=16)

    def _mac(self, kind: str, scope: str, position: int) -> bytes:
        # Keyed BLAKE2b is a MAC in one pass (a third of HMAC-SHA256's cost; a history page mints one
        # cursor per item). The key is the shared secret's first 64 bytes (BLAKE2b's key limit).
        state = self._keyed.copy()
        state.update(f"{kind}\x1f{scope}\x1f{position}".encode())
        return state.digest()

    def _legacy_mac(self, kind: str, scope: str, position: int) -> bytes:
        """The HMAC-SHA256 tag cursors carried before; still accepted so cursors issued by an older
        replica (or before an upgrade) stay valid."""
        msg = f"{kind}\x1f{scope}\x1f{position}".encode()
        return hmac.digest(self._secret, msg, "sha256")[:16]

    def encode(self, kind: str, scope: str, position: int) -> str:
        return _token(f"{kind}.{position}".encode(), self._mac(kind, scope, position))

    def encoder(self, kind: str, scope: str) -> Callable[[int], str]:
        """`encode` for many positions of one kind and scope (a history page mints one per item): the
        MAC state is keyed and fed the shared prefix once (the same MAC as `_mac`)."""
        prefix = self._keyed.copy()
        prefix.update(f"{kind}\x1f{scope}\x1f".encode())
        head = f"{kind}.".encode()
        copy = prefix.copy

        def encode(position: int) -> str:
            digits = b"%d" % position
            state = copy()
            state.update(digits)
            return _token(head + digits, state.digest())

        return encode

    def decode(self, token: str, *, kind: str, scope: str, field: str) -> int:
        try:
            body_b64, mac_b64 = token.split(".")
            body = base64.urlsafe_b64decode(body_b64 + "=" * (-len(body_b64) % 4)).decode()
            mac = base64.urlsafe_b64decode(mac_b64 + "=" * (-len(mac_b64) % 4))
            got_kind, _, position_text = body.partition(".")
            position = int(position_text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError("the cursor is malformed", field=field) from exc
        if got_kind != kind or not (
            hmac.compare_digest(mac, self._mac(kind, scope, position))
            or hmac.compare_digest(mac, self._legacy_mac(kind, scope, position))
        ):
            raise InvalidArgumentError(
                "the cursor is not valid here: it was issued for another conversation or API, "
                "by another host database, or was modified",
                field=field,
            )
        return position
