"""The run ledger on the database (`ports.RunLedger`): one row per run plus its results in order."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import BindParameter, and_, bindparam, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from agentrunner.errors import AlreadyExistsError, InvalidArgumentError
from agentrunner.protocol import result_type
from agentrunner.usage import add_counts
from agentrunner.v1 import common_pb2, host_service_pb2, result_pb2
from agentrunner_host.ports import TERMINAL_STATUSES, RunRecord, utcnow
from agentrunner_host.store.base import table_of
from agentrunner_host.store.common import (
    CursorCodec,
    UnitOfWork,
    dialect_insert,
    dict_to_struct,
    json_to_message,
    message_to_json,
    rowcount,
    to_timestamp,
)
from agentrunner_host.store.db import Database
from agentrunner_host.store.errors import StoreError
from agentrunner_host.store.models import RunResultRow, RunRow
from agentrunner_host.store.sqlite.compiled import bind_processor, driver_execute, fast_execute

_RECORD_FIELDS = (
    "run_id",
    "event_id",
    "agent_id",
    "binding_id",
    "runner_id",
    "status",
    "status_reason",
    "conversation_id",
    "thread_id",
    "bot_id",
    "workspace_id",
    "trace_id",
    "created_at",
    "started_at",
    "finished_at",
    "deadline_at",
    "cancel_requested_at",
    "usage",
    "last_sequence",
)
_OPEN_STATUSES = (common_pb2.RUN_STATUS_CREATED, common_pb2.RUN_STATUS_RUNNING)
DEFAULT_RUNS_PAGE = 50
MAX_RUNS_PAGE = 200


@dataclasses.dataclass(frozen=True, slots=True)
class RunQuery:
    """The filters of `HostService.ListRuns` (all optional; they combine with AND)."""

    statuses: tuple[int, ...] = ()
    agent_id: str = ""
    runner_id: str = ""
    conversation_id: str = ""
    binding_id: str = ""
    #: the caller's scope (`auth.clients[].bots` / `agents`): only runs of these; None: every run
    bot_ids: tuple[str, ...] | None = None
    agent_ids: tuple[str, ...] | None = None

    def digest(self) -> str:
        """What a page token is bound to: the same filters, in a canonical form."""
        scoped = [
            "*" if ids is None else ",".join(sorted(set(ids))) for ids in (self.bot_ids, self.agent_ids)
        ]
        canonical = "\x1f".join(
            [",".join(map(str, sorted(set(self.statuses)))), self.agent_id, self.runner_id,
             self.conversation_id, self.binding_id, *scoped]
        )  # fmt: skip
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]


#: room a page of runs keeps for its other fields (the next page's token, the cap itself)
_PAGE_OVERHEAD_BYTES = 1024


def _fitting(records: Sequence[RunRecord], max_bytes: int | None) -> int:
    """How many of the leading `records` fit in a page of `max_bytes` serialized bytes (all when None);
    at least one, so paging always moves on."""
    if max_bytes is None:
        return len(records)
    used = _PAGE_OVERHEAD_BYTES
    for n, record in enumerate(records):
        used += run_to_proto(record).ByteSize() + 6  # the run's tag and length prefix
        if used > max_bytes and n > 0:
            return n
    return len(records)


def _to_record(row: RunRow) -> RunRecord:
    return RunRecord(
        **{name: getattr(row, name) for name in _RECORD_FIELDS},
        metadata=dict(row.meta or {}),
    )


def run_values(record: RunRecord, owner: str) -> dict[str, Any]:
    return {
        **{name: getattr(record, name) for name in _RECORD_FIELDS},
        "meta": dict(record.metadata),
        "owner": owner,
    }


#: `result_type` of the ledger rows that hold a run of consecutive `message.delta` results
DELTA_TYPE = "message.delta"
_FRAME = struct.Struct(">I")


def _pack(payloads: Sequence[bytes]) -> bytes:
    """Several serialized results in one ledger payload: each one prefixed with its 4-byte length."""
    return b"".join([_FRAME.pack(len(p)) + p for p in payloads])


def unpack_results(payload: bytes, count: int) -> list[result_pb2.RunResult]:
    """The results a ledger row holds (`count` of them; one plain serialized result when `count` is 1)."""
    if count == 1:
        return [result_pb2.RunResult.FromString(payload)]
    out: list[result_pb2.RunResult] = []
    at = 0
    while at < len(payload):
        (size,) = _FRAME.unpack_from(payload, at)
        at += _FRAME.size
        out.append(result_pb2.RunResult.FromString(payload[at : at + size]))
        at += size
    return out


def packed_rows(results: Sequence[result_pb2.RunResult]) -> list[tuple[int, str, bytes, int]]:
    """`(sequence, result_type, payload, result_count)` ledger rows for results in sequence order.

    Consecutive `message.delta` results (contiguous sequences) share ONE row, keyed by the last
    sequence it holds: a streaming run writes a row per delta batch instead of a row per delta. With
    many runs streaming at once, their rows land on as many index pages per commit, so per-delta rows
    cost most of a batch's write (measured: about 3x the commit work of packed rows). Every other
    result keeps a row of its own (`result_count` 1, the plain serialized result)."""
    if any(r.sequence <= 0 for r in results):
        raise InvalidArgumentError("result sequence must start at 1", field="sequence")
    rows: list[tuple[int, str, bytes, int]] = []
    deltas: list[bytes] = []
    last = 0

    def close_deltas() -> None:
        if len(deltas) == 1:
            rows.append((last, DELTA_TYPE, deltas[0], 1))
        elif deltas:
            rows.append((last, DELTA_TYPE, _pack(deltas), len(deltas)))
        deltas.clear()

    for r in results:
        payload = r.SerializeToString(deterministic=True)
        if r.WhichOneof("payload") == "message_delta":
            if deltas and r.sequence != last + 1:
                close_deltas()
            deltas.append(payload)
        else:
            close_deltas()
            rows.append((r.sequence, result_type(r) or "", payload, 1))
        last = r.sequence
    close_deltas()
    return rows


def result_rows(
    run_id: str, results: Sequence[result_pb2.RunResult], now: dt.datetime | None = None
) -> list[dict[str, Any]]:
    """`run_results` rows for a batch (`packed_rows`; sequences must be positive)."""
    now = now or utcnow()
    return [
        {
            "run_id": run_id,
            "sequence": sequence,
            "result_type": kind,
            "payload": payload,
            "result_count": count,
            "created_at": now,
        }
        for sequence, kind, payload, count in packed_rows(results)
    ]


# Sync hot-path statements are built once per dialect and executed with parameters: building
# `.values(**row)` per call costs more CPU (cache keys for every literal) than SQLite's whole commit.
_RUNS = table_of(RunRow)
_RESULTS = table_of(RunResultRow)
_RECORD_COLUMNS = (*(_RUNS.c[name] for name in _RECORD_FIELDS), _RUNS.c["metadata"])


@functools.cache
def _statements(dialect: str) -> dict[str, Any]:
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    # `status <> a AND status <> b ...` rather than NOT IN (list): plain binds, so `fast_execute` can
    # run it without SQLAlchemy's expanding-parameter step
    not_terminal = and_(*(_RUNS.c.status != status for status in sorted(TERMINAL_STATUSES)))
    finish: dict[str, BindParameter[Any]] = {
        "status": bindparam("b_status"),
        "status_reason": bindparam("b_reason"),
        "finished_at": bindparam("b_at"),
    }
    return {
        "insert_run": insert(_RUNS).on_conflict_do_nothing().returning(_RUNS.c.id),
        "by_event": select(*_RECORD_COLUMNS).where(_RUNS.c.event_id == bindparam("b_event")),
        "by_run": select(*_RECORD_COLUMNS).where(_RUNS.c.run_id == bindparam("b_run")),
        "insert_results": _RESULTS.insert(),
        "last_sequence": update(_RUNS)
        .where(_RUNS.c.run_id == bindparam("b_run"), _RUNS.c.last_sequence < bindparam("b_last"))
        .values(last_sequence=bindparam("b_last")),
        "finish": update(_RUNS).where(_RUNS.c.run_id == bindparam("b_run"), not_terminal).values(**finish),
        "finish_usage": update(_RUNS)
        .where(_RUNS.c.run_id == bindparam("b_run"), not_terminal)
        .values(**finish, usage=bindparam("b_usage", type_=_RUNS.c.usage.type)),
    }


#: rows per multi-row insert (6 parameters a row: far below SQLite's bound-parameter limit)
_SQLITE_ROWS_PER_INSERT = 200


@functools.cache
def _sqlite_insert_results(rows: int) -> str:
    """A multi-row insert of `rows` ledger rows."""
    return (
        "INSERT INTO run_results (run_id, sequence, result_type, payload, result_count, created_at) VALUES "
        + ", ".join(["(?, ?, ?, ?, ?, ?)"] * rows)
    )


@functools.cache
def _created_at_bind(dialect: Any) -> Callable[[Any], Any]:
    """The bind conversion SQLAlchemy applies to `run_results.created_at` on this dialect."""
    processor = bind_processor(_RESULTS.c.created_at.type, dialect)
    return processor or (lambda value: value)


def _row_to_record(row: Any) -> RunRecord:
    values = tuple(row)
    return RunRecord(**dict(zip(_RECORD_FIELDS, values[:-1], strict=True)), metadata=dict(values[-1] or {}))


def insert_run_sync(conn: Connection, values: Mapping[str, Any]) -> bool:
    """Inserts a run row (`run_values`) in a sync transaction; False (nothing written) when its event
    id (or run id) is already in the ledger."""
    params = dict(values)
    params["metadata"] = params.pop("meta")
    return (
        fast_execute(conn, _statements(conn.dialect.name)["insert_run"], params).scalar_one_or_none()
        is not None
    )


def get_run_by_event_sync(conn: Connection, event_id: str) -> RunRecord | None:
    row = fast_execute(
        conn, _statements(conn.dialect.name)["by_event"], {"b_event": event_id}, typed=True
    ).first()
    return None if row is None else _row_to_record(row)


def insert_results_sync(conn: Connection, run_id: str, results: Sequence[result_pb2.RunResult]) -> None:
    """`SqlRunLedger.insert_results` in a sync transaction (`packed_rows`; results numbered by the host,
    a row's duplicate key raises)."""
    if not results:
        return
    stmts = _statements(conn.dialect.name)
    if conn.dialect.name == "sqlite":
        # The delta-batch hot path: plain DBAPI with the bind values converted once per batch
        # (SQLAlchemy's per-row parameter processing cost more than SQLite's insert itself), and
        # multi-row INSERTs rather than executemany: executemany steps SQLite once per row, and every
        # step hands the GIL back and forth with the busy event loop (a hand-off can wait a switch
        # interval, 5 ms, while the loop runs).
        created = _created_at_bind(conn.dialect)(utcnow())
        rows = packed_rows(results)
        for start in range(0, len(rows), _SQLITE_ROWS_PER_INSERT):
            chunk = rows[start : start + _SQLITE_ROWS_PER_INSERT]
            values: list[Any] = []
            for sequence, kind, payload, count in chunk:
                values += (run_id, sequence, kind, payload, count, created)
            driver_execute(conn, _sqlite_insert_results(len(chunk)), tuple(values))
    else:
        conn.execute(stmts["insert_results"], result_rows(run_id, results))
    fast_execute(conn, stmts["last_sequence"], {"b_run": run_id, "b_last": max(r.sequence for r in results)})


def finish_run_sync(
    conn: Connection,
    run_id: str,
    status: common_pb2.RunStatus.ValueType,
    reason: str,
    usage: Mapping[str, Any] | None = None,
) -> RunRecord | None:
    """`SqlRunLedger.finish_run` in a sync transaction (a run already ended keeps its status)."""
    if status not in TERMINAL_STATUSES:
        raise InvalidArgumentError(f"status {status} is not terminal", field="status")
    stmts = _statements(conn.dialect.name)
    params: dict[str, Any] = {"b_run": run_id, "b_status": status, "b_reason": reason, "b_at": utcnow()}
    if usage is not None:
        params["b_usage"] = dict(usage)
    fast_execute(conn, stmts["finish" if usage is None else "finish_usage"], params)
    row = fast_execute(conn, stmts["by_run"], {"b_run": run_id}, typed=True).first()
    return None if row is None else _row_to_record(row)


#: ledger metadata the host keeps for itself (e.g. the digest that tells a duplicate event from a conflicting
#: one): never sent to clients or runners
PRIVATE_METADATA_KEYS = frozenset({"event_digest"})


def run_to_proto(record: RunRecord) -> host_service_pb2.Run:
    """The wire form of a ledger record (`agentrunner.v1.Run`), for clients and runners alike."""
    run = host_service_pb2.Run(
        run_id=record.run_id,
        event_id=record.event_id,
        agent_id=record.agent_id,
        binding_id=record.binding_id,
        runner_id=record.runner_id,
        conversation_id=record.conversation_id,
        thread_id=record.thread_id,
        status=record.status,
        status_reason=record.status_reason,
        last_sequence=record.last_sequence,
        trace_id=record.trace_id,
        bot_id=record.bot_id,
        workspace_id=record.workspace_id,
        metadata=dict_to_struct({k: v for k, v in record.metadata.items() if k not in PRIVATE_METADATA_KEYS}),
    )
    for field, value in (
        ("create_time", record.created_at),
        ("start_time", record.started_at),
        ("finish_time", record.finished_at),
        ("deadline_time", record.deadline_at),
        ("cancel_request_time", record.cancel_requested_at),
    ):
        ts = to_timestamp(value)
        if ts is not None:
            getattr(run, field).CopyFrom(ts)
    if record.usage:
        json_to_message(record.usage, run.usage)
    return run


def usage_to_json(usage: common_pb2.Usage) -> dict[str, Any]:
    return message_to_json(usage)


class SqlRunLedger:
    """`ports.RunLedger` on SQLite/PostgreSQL.

    `owner` names this host instance: `mark_interrupted` only touches runs it created, so a replica
    restarting does not interrupt runs another replica is serving.
    """

    def __init__(self, db: Database, codec: CursorCodec, *, owner: str = "") -> None:
        self.db = db
        self.uow = UnitOfWork(db)
        self.codec = codec
        self.owner = owner

    async def create_run(self, record: RunRecord) -> RunRecord:
        row = RunRow(
            **{name: getattr(record, name) for name in _RECORD_FIELDS},
            meta=dict(record.metadata),
            owner=self.owner,
        )
        try:
            async with self.db.write() as session:
                session.add(row)
                await session.flush()
            return record
        except StoreError as exc:
            if not isinstance(exc.__cause__, IntegrityError):
                raise
        # The unique event id lost a race (or is a duplicate): attach to the stored run.
        async with self.db.read() as session:
            existing = await session.scalar(select(RunRow).where(RunRow.event_id == record.event_id))
        if existing is None:
            raise AlreadyExistsError(f"run id {record.run_id} already exists")
        return _to_record(existing)

    async def get_run(self, run_id: str) -> RunRecord | None:
        async with self.db.read() as session:
            row = await session.scalar(select(RunRow).where(RunRow.run_id == run_id))
        return None if row is None else _to_record(row)

    async def mark_running(self, run_id: str, started_at: dt.datetime) -> None:
        async with self.db.write() as session:
            await session.execute(
                update(RunRow)
                .where(RunRow.run_id == run_id, RunRow.status == common_pb2.RUN_STATUS_CREATED)
                .values(status=common_pb2.RUN_STATUS_RUNNING, started_at=started_at)
            )

    async def insert_result(self, session: AsyncSession, run_id: str, result: result_pb2.RunResult) -> bool:
        """Stores one result in the caller's transaction; False when `(run_id, sequence)` exists."""
        if result.sequence <= 0:
            raise InvalidArgumentError("result sequence must start at 1", field="sequence")
        held = await session.scalar(  # a packed delta row holding this sequence (`packed_rows`)
            select(RunResultRow.id)
            .where(
                RunResultRow.run_id == run_id,
                RunResultRow.sequence >= result.sequence,
                RunResultRow.sequence - RunResultRow.result_count < result.sequence,
            )
            .limit(1)
        )
        if held is not None:
            return False
        insert = dialect_insert(session)
        stmt = (
            insert(RunResultRow)
            .values(
                run_id=run_id,
                sequence=result.sequence,
                result_type=result_type(result) or "",
                payload=result.SerializeToString(deterministic=True),
                created_at=utcnow(),
            )
            .on_conflict_do_nothing(index_elements=["run_id", "sequence"])
            .returning(RunResultRow.id)
        )
        if (await session.execute(stmt)).scalar_one_or_none() is None:
            return False
        await session.execute(
            update(RunRow)
            .where(RunRow.run_id == run_id, RunRow.last_sequence < result.sequence)
            .values(last_sequence=result.sequence)
        )
        return True

    async def insert_results(
        self, session: AsyncSession, run_id: str, results: Sequence[result_pb2.RunResult]
    ) -> None:
        """Stores several results in the caller's transaction with one multi-row insert (a duplicate
        sequence raises, rolling the transaction back)."""
        if not results:
            return
        await session.execute(_RESULTS.insert(), result_rows(run_id, results))
        last = max(r.sequence for r in results)
        await session.execute(
            update(RunRow)
            .where(RunRow.run_id == run_id, RunRow.last_sequence < last)
            .values(last_sequence=last)
        )

    async def add_model_usage(self, run_id: str, model_id: str, usage: Mapping[str, Any], calls: int) -> None:
        """Adds one model call's usage to the run's `model_usage` metadata (per model: every count
        summed, `Usage.extra` details included, calls counted). Read-modify-write under the write lock / a row lock."""
        async with self.db.write() as session:
            stmt = select(RunRow).where(RunRow.run_id == run_id)
            if not self.db.is_sqlite:
                stmt = stmt.with_for_update()
            row = await session.scalar(stmt)
            if row is None:
                return
            meta = dict(row.meta or {})
            per_model = dict(meta.get("model_usage") or {})
            entry = dict(per_model.get(model_id) or {})
            counts = {k: v for k, v in usage.items() if k != "extra"}
            extra = usage.get("extra")
            # provider details (cached, reasoning, audio tokens, ...) sum next to the standard counts
            add_counts(entry, {**(extra if isinstance(extra, Mapping) else {}), **counts})
            entry["calls"] = int(entry.get("calls", 0)) + calls
            per_model[model_id] = entry
            meta["model_usage"] = per_model
            meta["model_calls"] = int(meta.get("model_calls", 0)) + calls
            row.meta = meta

    async def append_result(self, run_id: str, result: result_pb2.RunResult) -> None:
        async with self.db.write() as session:
            if not await self.insert_result(session, run_id, result):
                raise AlreadyExistsError(
                    f"result {result.sequence} of run {run_id} is already stored",
                    metadata={"runId": run_id, "sequence": result.sequence},
                )

    async def list_results(
        self, run_id: str, after_sequence: int = 0, limit: int | None = None
    ) -> Sequence[result_pb2.RunResult]:
        # a row is keyed by the last sequence it holds: every row with a result after `after_sequence`
        stmt = (
            select(RunResultRow.payload, RunResultRow.result_count)
            .where(RunResultRow.run_id == run_id, RunResultRow.sequence > after_sequence)
            .order_by(RunResultRow.sequence)
        )
        if limit is not None:
            stmt = stmt.limit(limit)  # each row holds at least one result
        async with self.db.read() as session:
            rows = (await session.execute(stmt)).all()
        results = [
            r
            for payload, count in rows
            for r in unpack_results(payload, count)
            if r.sequence > after_sequence
        ]
        return results if limit is None else results[:limit]

    async def request_cancel(self, run_id: str, at: dt.datetime) -> RunRecord | None:
        async with self.db.write() as session:
            await session.execute(
                update(RunRow)
                .where(
                    RunRow.run_id == run_id,
                    RunRow.status.in_(_OPEN_STATUSES),
                    RunRow.cancel_requested_at.is_(None),
                )
                .values(cancel_requested_at=at)
            )
            row = await session.scalar(select(RunRow).where(RunRow.run_id == run_id))
        return None if row is None else _to_record(row)

    async def finish_run(
        self,
        run_id: str,
        status: common_pb2.RunStatus.ValueType,
        reason: str,
        usage: Mapping[str, Any] | None = None,
    ) -> RunRecord | None:
        if status not in TERMINAL_STATUSES:
            raise InvalidArgumentError(f"status {status} is not terminal", field="status")
        values: dict[str, Any] = {"status": status, "status_reason": reason, "finished_at": utcnow()}
        if usage is not None:
            values["usage"] = dict(usage)
        async with self.db.write() as session:
            await session.execute(
                update(RunRow)
                .where(RunRow.run_id == run_id, RunRow.status.not_in(list(TERMINAL_STATUSES)))
                .values(**values)
            )
            row = await session.scalar(select(RunRow).where(RunRow.run_id == run_id))
        return None if row is None else _to_record(row)

    async def list_runs(
        self,
        conversation_id: str,
        statuses: Sequence[int] = (),
        before_cursor: str = "",
        limit: int = 50,
        max_bytes: int | None = None,
    ) -> tuple[Sequence[RunRecord], str]:
        """Newest first, at most `limit` records (and, with `max_bytes`, at most that many serialized
        bytes, at least one record); returns them and the next cursor ('' when none)."""
        stmt = select(RunRow).where(RunRow.conversation_id == conversation_id)
        if statuses:
            stmt = stmt.where(RunRow.status.in_(list(statuses)))
        if before_cursor:
            position = self.codec.decode(
                before_cursor, kind="run", scope=conversation_id, field="before_cursor"
            )
            stmt = stmt.where(RunRow.id < position)
        stmt = stmt.order_by(RunRow.id.desc()).limit(limit + 1)
        async with self.db.read() as session:
            rows = list((await session.scalars(stmt)).all())
        more = len(rows) > limit
        rows = rows[:limit]
        records = [_to_record(r) for r in rows]
        keep = _fitting(records, max_bytes)
        more, rows, records = more or keep < len(records), rows[:keep], records[:keep]
        cursor = self.codec.encode("run", conversation_id, rows[-1].id) if more and rows else ""
        return records, cursor

    async def search_runs(
        self, query: RunQuery, page_token: str = "", page_size: int = 0, max_bytes: int | None = None
    ) -> tuple[list[RunRecord], str]:
        """`HostService.ListRuns`: runs matching `query`, newest first, one page (AIP-158) of at most
        `page_size` runs and, with `max_bytes`, at most that many serialized bytes (at least one run).
        The page token names the last run returned and is bound to the query: reusing it with other
        filters is `INVALID_ARGUMENT`."""
        if page_size < 0:
            raise InvalidArgumentError("page_size must not be negative", field="page_size")
        limit = min(page_size or DEFAULT_RUNS_PAGE, MAX_RUNS_PAGE)
        stmt = select(RunRow)
        if query.statuses:
            stmt = stmt.where(RunRow.status.in_(sorted(set(query.statuses))))
        for column, value in (
            (RunRow.agent_id, query.agent_id),
            (RunRow.runner_id, query.runner_id),
            (RunRow.conversation_id, query.conversation_id),
            (RunRow.binding_id, query.binding_id),
        ):
            if value:
                stmt = stmt.where(column == value)
        if query.bot_ids is not None:
            stmt = stmt.where(RunRow.bot_id.in_(sorted(set(query.bot_ids))))
        if query.agent_ids is not None:
            stmt = stmt.where(RunRow.agent_id.in_(sorted(set(query.agent_ids))))
        scope = query.digest()
        if page_token:
            position = self.codec.decode(page_token, kind="host-runs", scope=scope, field="page_token")
            stmt = stmt.where(RunRow.id < position)
        stmt = stmt.order_by(RunRow.id.desc()).limit(limit + 1)
        async with self.db.read() as session:
            rows = list((await session.scalars(stmt)).all())
        more = len(rows) > limit
        rows = rows[:limit]
        records = [_to_record(r) for r in rows]
        keep = _fitting(records, max_bytes)
        more, rows, records = more or keep < len(records), rows[:keep], records[:keep]
        token = self.codec.encode("host-runs", scope, rows[-1].id) if more and rows else ""
        return records, token

    async def mark_interrupted(self) -> int:
        async with self.db.write() as session:
            result = await session.execute(
                update(RunRow)
                .where(RunRow.status.in_(_OPEN_STATUSES), RunRow.owner == self.owner)
                .values(
                    status=common_pb2.RUN_STATUS_INTERRUPTED,
                    status_reason="host.restarted: the host stopped while the run was open",
                    finished_at=utcnow(),
                )
            )
        return rowcount(result)

    async def count_runs(self, conversation_id: str) -> int:
        async with self.db.read() as session:
            return int(
                await session.scalar(
                    select(func.count()).select_from(RunRow).where(RunRow.conversation_id == conversation_id)
                )
                or 0
            )
