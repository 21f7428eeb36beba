"""The run ledger on the database (`ports.RunLedger`): one row per run plus its results in order.

This module is its write side: `SqlRunLedger`'s writes (its reads are `store/ledger_reads.py`) and
the sync statements the start and finish transactions run on one connection (`insert_run_sync`,
`insert_results_sync`, `finish_run_sync`, ...). How a run and its results lie in rows is
`store/ledger_rows.py`.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import BindParameter, and_, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from agentrunner.errors import AlreadyExistsError, InvalidArgumentError
from agentrunner.protocol import result_type
from agentrunner.usage import add_counts
from agentrunner.v1 import common_pb2, result_pb2
from agentrunner_host.ports import TERMINAL_STATUSES, RunRecord, utcnow
from agentrunner_host.store.common import CursorCodec, UnitOfWork, dialect_insert, rowcount
from agentrunner_host.store.db import Database
from agentrunner_host.store.errors import StoreError
from agentrunner_host.store.ledger_reads import LedgerReads
from agentrunner_host.store.ledger_rows import RECORD_FIELDS, packed_rows, result_rows, to_record
from agentrunner_host.store.schema import RunResultRow, RunRow, table_of
from agentrunner_host.store.sqlite.compiled import bind_processor, driver_execute, fast_execute

_OPEN_STATUSES = (common_pb2.RUN_STATUS_CREATED, common_pb2.RUN_STATUS_RUNNING)


def run_values(record: RunRecord, owner: str) -> dict[str, Any]:
    return {
        **{name: getattr(record, name) for name in RECORD_FIELDS},
        "meta": dict(record.metadata),
        "owner": owner,
    }


# Sync hot-path statements are built once per dialect and executed with parameters: building
# `.values(**row)` per call costs more CPU (cache keys for every literal) than SQLite's whole commit.
_RUNS = table_of(RunRow)
_RESULTS = table_of(RunResultRow)
_RECORD_COLUMNS = (*(_RUNS.c[name] for name in RECORD_FIELDS), _RUNS.c["metadata"])


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
def _created_at_bind(dialect: Dialect) -> Callable[[Any], Any]:
    """The bind conversion SQLAlchemy applies to `run_results.created_at` on this dialect."""
    processor = bind_processor(_RESULTS.c.created_at.type, dialect)
    return processor or (lambda value: value)


def _row_to_record(row: Sequence[Any]) -> RunRecord:
    values = tuple(row)
    return RunRecord(**dict(zip(RECORD_FIELDS, values[:-1], strict=True)), metadata=dict(values[-1] or {}))


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


class SqlRunLedger(LedgerReads):
    """`ports.RunLedger` on SQLite/PostgreSQL.

    `owner` names this host instance: `mark_interrupted` only touches runs it created, so a replica
    restarting does not interrupt runs another replica is serving.
    """

    def __init__(self, db: Database, codec: CursorCodec, *, owner: str = "") -> None:
        super().__init__(db, codec)
        self.uow = UnitOfWork(db)
        self.owner = owner

    async def create_run(self, record: RunRecord) -> RunRecord:
        row = RunRow(
            **{name: getattr(record, name) for name in RECORD_FIELDS},
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
        return to_record(existing)

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
        return None if row is None else to_record(row)

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
        return None if row is None else to_record(row)

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
