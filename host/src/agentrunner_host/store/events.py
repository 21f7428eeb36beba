"""The append-only event log (HOST_SDK §4.7) and the proxy-call audit sink (PROTOCOL_V1 §11).

One table, one `kind` per record family: `event` (incoming events, keyed by their event id), `result`
(run results other than deltas), `tool` (tool telemetry), `action` (`action.requested` telemetry),
`error`, and `audit` (proxy calls; never shown to runners). Only summaries and small structured data
are stored: bodies live in the artifact store, messages in the transcript.

One writer: `append_sync(conn, log_values(...))`, in the caller's transaction (the run start, a
result's effects, an incoming event) or, for an audit record, in a transaction of its own.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from agentrunner.errors import bounded
from agentrunner.v1 import host_service_pb2, proxy_service_pb2
from agentrunner_host.store.common import (
    CursorCodec,
    clip_json,
    dict_to_struct,
    insert_for,
    json_to_message,
    message_to_json,
    new_id,
    struct_to_dict,
    to_timestamp,
    utcnow,
)
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import EventLogRow, table_of
from agentrunner_host.store.sqlite.compiled import fast_execute

KINDS = frozenset({"event", "result", "tool", "action", "error", "audit"})
#: kinds a runner may read through GetEvent / ListEvents
RUNNER_VISIBLE_KINDS = ("event", "result", "tool", "action", "error")
SUMMARY_CHARS = 500
DATA_CAP_BYTES = 16 * 1024


def _quoted(value: Any) -> Any:
    """An audit detail value: strings bounded and NUL-free, numbers and flags as they are."""
    if isinstance(value, str):
        return bounded(value, 512)
    if isinstance(value, bool | int) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return bounded(str(value), 512)


def summarize(text: str, limit: int = SUMMARY_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def log_values(
    *,
    kind: str,
    event_type: str,
    record_id: str = "",
    conversation_id: str = "",
    thread_id: str = "",
    run_id: str = "",
    runner_id: str = "",
    bot_id: str = "",
    workspace_id: str = "",
    source: str = "",
    actor: Mapping[str, Any] | None = None,
    subject: Mapping[str, Any] | None = None,
    summary: str = "",
    data: Mapping[str, Any] | None = None,
    occurred_at: dt.datetime | None = None,
) -> dict[str, Any]:
    """The column values of one log record (what `append_sync` writes): a generated record id unless
    given, the summary cut to `SUMMARY_CHARS`, the data clipped to `DATA_CAP_BYTES`."""
    if kind not in KINDS:
        raise ValueError(f"unknown event log kind {kind!r}")
    now = utcnow()
    return {
        "record_id": record_id or new_id(kind),
        "kind": kind,
        "event_type": event_type,
        "conversation_id": conversation_id,
        "thread_id": thread_id,
        "run_id": run_id,
        "runner_id": runner_id,
        "bot_id": bot_id,
        "workspace_id": workspace_id,
        "source": source,
        "actor": dict(actor or {}),
        "subject": dict(subject or {}),
        "summary": summarize(summary),
        "data": clip_json(data or {}, DATA_CAP_BYTES) if data else {},
        "occurred_at": occurred_at or now,
        "created_at": now,
    }


def incoming_fields(
    envelope: host_service_pb2.EventEnvelope,
    *,
    run_id: str = "",
    runner_id: str = "",
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`log_values` keyword arguments for an incoming event (summary and small data only)."""
    conversation = envelope.conversation
    data = struct_to_dict(envelope.data) if envelope.HasField("data") else {}
    if extra:
        data = {**data, **extra}
    return {
        "kind": "event",
        "event_type": envelope.event_type,
        "record_id": envelope.event_id,
        "conversation_id": conversation.conversation_id,
        "thread_id": conversation.thread_id,
        "run_id": run_id,
        "runner_id": runner_id,
        "bot_id": envelope.bot_id or conversation.bot_id,
        "workspace_id": envelope.workspace_id or conversation.workspace_id,
        "source": envelope.source,
        "actor": message_to_json(envelope.actor) if envelope.HasField("actor") else {},
        "subject": message_to_json(envelope.subject) if envelope.HasField("subject") else {},
        "summary": envelope.input.text,
        "data": data,
        "occurred_at": envelope.event_time.ToDatetime(tzinfo=dt.UTC)
        if envelope.HasField("event_time")
        else None,
    }


@functools.cache
def _insert_returning_seq(dialect: str) -> Any:
    insert = insert_for(dialect)
    table = table_of(EventLogRow)
    return insert(table).on_conflict_do_nothing(index_elements=["record_id"]).returning(table.c.seq)


def append_sync(conn: Connection, values: Mapping[str, Any]) -> int | None:
    """Appends one record (`values` from `log_values`) in the caller's transaction; its log sequence,
    or None when `record_id` is already logged (nothing is written). The statement is built once and
    executed with parameters."""
    seq: int | None = fast_execute(
        conn, _insert_returning_seq(conn.dialect.name), dict(values)
    ).scalar_one_or_none()
    return seq


class EventLog:
    """The log's audit records (`record_proxy_call`: `proxy.api.AuditSink`), reads and pages."""

    def __init__(self, db: Database, codec: CursorCodec) -> None:
        self.db = db
        self.codec = codec

    async def record_proxy_call(
        self,
        *,
        run_id: str,
        runner_id: str,
        method: str,
        resource: str,
        outcome: str,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """`AuditSink`: one record per proxy call (run, runner, method, resource, outcome). What the
        caller claimed (run id, resource, key) is recorded as a bounded, NUL-free quote: an audit row
        never fails for the input it records."""
        detail = {k: _quoted(v) for k, v in (detail or {}).items()}
        resource = bounded(resource, 512)
        values = log_values(
            kind="audit",
            event_type=bounded(method, 128),
            run_id=bounded(run_id, 64),
            runner_id=bounded(runner_id, 256),
            conversation_id=bounded(str(detail.pop("conversation_id", "")), 256),
            summary=f"{method} {resource} -> {outcome}",
            data={"resource": resource, "outcome": outcome, **detail},
        )
        await self.db.run_write(lambda conn: append_sync(conn, values))

    async def run_audit(self, run_id: str, limit: int = 500) -> list[dict[str, Any]]:
        """A run's proxy-call audit records in order, for operators (the console's run page)."""
        stmt = (
            select(EventLogRow)
            .where(EventLogRow.kind == "audit", EventLogRow.run_id == run_id)
            .order_by(EventLogRow.seq)
            .limit(limit)
        )
        async with self.db.read() as s:
            rows = (await s.scalars(stmt)).all()
        return [
            {"time": row.created_at.isoformat(), "method": row.event_type, "summary": row.summary,
             "resource": str(row.data.get("resource", "")), "outcome": str(row.data.get("outcome", ""))}
            for row in rows
        ]  # fmt: skip

    async def get(self, record_id: str, *, kinds: Sequence[str] = RUNNER_VISIBLE_KINDS) -> EventLogRow | None:
        async with self.db.read() as s:
            return await s.scalar(
                select(EventLogRow).where(EventLogRow.record_id == record_id, EventLogRow.kind.in_(kinds))
            )

    async def page(
        self,
        *,
        conversation_id: str,
        before_seq: int | None = None,
        event_types: Sequence[str] = (),
        kinds: Sequence[str] = RUNNER_VISIBLE_KINDS,
        run_id: str = "",
        limit: int = 50,
    ) -> tuple[list[EventLogRow], bool]:
        """Newest `limit` records before `before_seq`, returned oldest first, and whether more exist."""
        stmt = select(EventLogRow).where(EventLogRow.kind.in_(kinds))
        if conversation_id:
            stmt = stmt.where(EventLogRow.conversation_id == conversation_id)
        if run_id:
            stmt = stmt.where(EventLogRow.run_id == run_id)
        if event_types:
            stmt = stmt.where(EventLogRow.event_type.in_(list(event_types)))
        if before_seq is not None:
            stmt = stmt.where(EventLogRow.seq < before_seq)
        stmt = stmt.order_by(EventLogRow.seq.desc()).limit(limit + 1)
        async with self.db.read() as s:
            rows = list((await s.scalars(stmt)).all())
        has_more = len(rows) > limit
        rows = rows[:limit]
        rows.reverse()
        return rows, has_more

    def cursor(self, row: EventLogRow) -> str:
        return self.codec.encode("event", row.conversation_id, row.seq)

    def decode_cursor(self, conversation_id: str, token: str, field: str) -> int:
        return self.codec.decode(token, kind="event", scope=conversation_id, field=field)

    def to_proto(self, row: EventLogRow) -> proxy_service_pb2.EventRecord:
        record = proxy_service_pb2.EventRecord(
            event_id=row.record_id,
            event_type=row.event_type,
            source=row.source or row.kind,
            conversation_id=row.conversation_id,
            thread_id=row.thread_id,
            input_summary=row.summary,
            data=dict_to_struct({**row.data, **({"run_id": row.run_id} if row.run_id else {})}),
            seq=row.seq,
            cursor=self.cursor(row),
            bot_id=row.bot_id,
            workspace_id=row.workspace_id,
        )
        ts = to_timestamp(row.occurred_at)
        if ts is not None:
            record.event_time.CopyFrom(ts)
        if row.actor:
            json_to_message(row.actor, record.actor)
        if row.subject:
            json_to_message(row.subject, record.subject)
        return record
