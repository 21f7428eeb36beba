"""The run ledger on the database (`ports.RunLedger`): one row per run plus its results in order.

This module is its write side, and every write of the `runs` and `run_results` tables is here once,
as a sync statement function over a `Connection` (`insert_run_sync`, `insert_results_sync`,
`finish_run_sync`, ...): the run path's transactions run them on the SQLite writer's connection
(`Database.run_write`, group commit) or, in a transaction of their own, `SqlRunLedger`'s async methods
do (its reads are `store/ledger_reads.py`). The async twins these had on an `AsyncSession` cost far
more per run and were deleted (docs/performance.md, "One writer per table"). How a run and its
results lie in rows is `store/ledger_rows.py`.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import BindParameter, and_, bindparam, select, update
from sqlalchemy.engine import Connection, Dialect

from agentrunner.errors import AlreadyExistsError, InvalidArgumentError
from agentrunner.usage import add_counts
from agentrunner.v1 import common_pb2, result_pb2
from agentrunner_host.ports import TERMINAL_STATUSES, RunRecord, utcnow
from agentrunner_host.store.common import insert_for
from agentrunner_host.store.ledger_reads import LedgerReads
from agentrunner_host.store.ledger_rows import RECORD_FIELDS, packed_rows, result_rows
from agentrunner_host.store.schema import RunResultRow, RunRow, table_of
from agentrunner_host.store.sqlite.compiled import bind_processor, driver_execute, fast_execute

_OPEN_STATUSES = (common_pb2.RUN_STATUS_CREATED, common_pb2.RUN_STATUS_RUNNING)
#: where a cancel request is noted: an open run, or one its runner already ended `cancelled` (the
#: signal goes out before the request is written, and the runner's terminal may commit first)
_CANCELLABLE = (*_OPEN_STATUSES, common_pb2.RUN_STATUS_CANCELLED)


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
_RECORD_COLUMNS = (*(_RUNS.c[name] for name in RECORD_FIELDS), _RUNS.c["metadata"], _RUNS.c.owner)


@functools.cache
def _statements(dialect: str) -> dict[str, Any]:
    insert = insert_for(dialect)
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
        # results are appended in sequence order: a batch starts after the run's last stored result
        "advance": update(_RUNS)
        .where(_RUNS.c.run_id == bindparam("b_run"), _RUNS.c.last_sequence < bindparam("b_first"))
        .values(last_sequence=bindparam("b_last"))
        .returning(_RUNS.c.id),
        "last_sequence": select(_RUNS.c.last_sequence).where(_RUNS.c.run_id == bindparam("b_run")),
        "finish": update(_RUNS).where(_RUNS.c.run_id == bindparam("b_run"), not_terminal).values(**finish),
        "finish_usage": update(_RUNS)
        .where(_RUNS.c.run_id == bindparam("b_run"), not_terminal)
        .values(**finish, usage=bindparam("b_usage", type_=_RUNS.c.usage.type)),
        "cancel": update(_RUNS)
        .where(
            _RUNS.c.run_id == bindparam("b_run"),
            _RUNS.c.status.in_(_CANCELLABLE),
            _RUNS.c.cancel_requested_at.is_(None),
        )
        .values(cancel_requested_at=bindparam("b_at", type_=_RUNS.c.cancel_requested_at.type)),
        "meta": select(_RUNS.c["metadata"]).where(_RUNS.c.run_id == bindparam("b_run")).with_for_update(),
        "set_meta": update(_RUNS)
        .where(_RUNS.c.run_id == bindparam("b_run"))
        .values(metadata=bindparam("b_meta", type_=_RUNS.c["metadata"].type)),
        "open_runs": select(_RUNS.c.run_id, _RUNS.c.last_sequence)
        .where(_RUNS.c.status.in_(_OPEN_STATUSES), _RUNS.c.owner == bindparam("b_owner"))
        .order_by(_RUNS.c.id)
        .with_for_update(),
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
    return RunRecord(
        **dict(zip(RECORD_FIELDS, values[:-2], strict=True)),
        metadata=dict(values[-2] or {}),
        owner=values[-1] or "",
    )


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
    """Stores a batch of one run's results in the caller's transaction (`packed_rows`: consecutive deltas
    share a row) and moves the run's `last_sequence` to the batch's last. Results are appended in
    sequence order, as the run numbers them: a batch that does not start after the run's last stored
    result raises `AlreadyExistsError` (nothing of it is written), so no sequence is stored twice, also
    none a packed row holds."""
    if not results:
        return
    stmts = _statements(conn.dialect.name)
    first, last = min(r.sequence for r in results), max(r.sequence for r in results)
    if first <= 0:
        raise InvalidArgumentError("result sequence must start at 1", field="sequence")
    if (
        fast_execute(conn, stmts["advance"], {"b_run": run_id, "b_first": first, "b_last": last}).first()
        is None
    ):
        stored = fast_execute(conn, stmts["last_sequence"], {"b_run": run_id}).scalar_one_or_none()
        if stored is not None:  # (no run row: the insert below fails on its foreign key)
            raise AlreadyExistsError(
                f"run {run_id} has results stored up to sequence {stored}; result {first} is not after them",
                metadata={"runId": run_id, "sequence": first},
            )
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


#: PostgreSQL: the delta batch of several runs as ONE statement (`insert_deltas_sync`)
_PG_DELTAS = """
WITH v AS (
  SELECT * FROM unnest(%(runs)s::varchar[], %(firsts)s::bigint[], %(lasts)s::bigint[]) AS v(run_id, first_seq, last_seq)
), adv AS (
  UPDATE runs SET last_sequence = v.last_seq FROM v
  WHERE runs.run_id = v.run_id AND runs.last_sequence < v.first_seq
  RETURNING runs.run_id
), ins AS (
  INSERT INTO run_results (run_id, sequence, result_type, payload, result_count, created_at)
  SELECT r.run_id, r.seq, r.kind, r.payload, r.n, %(at)s
  FROM unnest(%(r_runs)s::varchar[], %(r_seqs)s::bigint[], %(r_kinds)s::varchar[], %(r_payloads)s::bytea[],
              %(r_counts)s::int[]) AS r(run_id, seq, kind, payload, n)
  WHERE r.run_id IN (SELECT run_id FROM adv)
)
SELECT run_id FROM adv
"""


def insert_deltas_sync(
    conn: Connection, batches: Sequence[tuple[str, Sequence[result_pb2.RunResult]]]
) -> None:
    """`insert_results_sync` for the batches of several runs in the caller's transaction. On PostgreSQL
    it is ONE statement (every run's `last_sequence` advanced and every row inserted): a round trip
    is what a write waits for on a loaded machine, and the delta batch's commit time is the durability
    bound's (README "Durability"). A run whose batch does not start after its stored results raises
    `AlreadyExistsError` as `insert_results_sync` does (the caller's transaction is then rolled back)."""
    batches = [(run_id, results) for run_id, results in batches if results]
    if conn.dialect.name != "postgresql" or len(batches) < 2:
        for run_id, results in batches:
            insert_results_sync(conn, run_id, results)
        return
    params: dict[str, Any] = {k: [] for k in ("runs", "firsts", "lasts", "r_runs", "r_seqs", "r_kinds")}
    params.update(r_payloads=[], r_counts=[], at=_created_at_bind(conn.dialect)(utcnow()))
    for run_id, results in batches:
        first, last = min(r.sequence for r in results), max(r.sequence for r in results)
        if first <= 0:
            raise InvalidArgumentError("result sequence must start at 1", field="sequence")
        params["runs"].append(run_id)
        params["firsts"].append(first)
        params["lasts"].append(last)
        for sequence, kind, payload, count in packed_rows(results):
            params["r_runs"].append(run_id)
            params["r_seqs"].append(sequence)
            params["r_kinds"].append(kind)
            params["r_payloads"].append(payload)
            params["r_counts"].append(count)
    advanced = {row[0] for row in conn.exec_driver_sql(_PG_DELTAS, params).all()}
    for run_id, results in batches:
        if run_id not in advanced:  # (the whole batch is rolled back with the caller's transaction)
            insert_results_sync(conn, run_id, results)  # raises the typed error (or the foreign key's)


def finish_run_sync(
    conn: Connection,
    run_id: str,
    status: common_pb2.RunStatus.ValueType,
    reason: str,
    usage: Mapping[str, Any] | None = None,
) -> RunRecord | None:
    """Sets a run's terminal status, reason and usage (a run already ended keeps its own); the record
    as stored, None when there is no such run."""
    if status not in TERMINAL_STATUSES:
        raise InvalidArgumentError(f"status {status} is not terminal", field="status")
    stmts = _statements(conn.dialect.name)
    params: dict[str, Any] = {"b_run": run_id, "b_status": status, "b_reason": reason, "b_at": utcnow()}
    if usage is not None:
        params["b_usage"] = dict(usage)
    fast_execute(conn, stmts["finish" if usage is None else "finish_usage"], params)
    row = fast_execute(conn, stmts["by_run"], {"b_run": run_id}, typed=True).first()
    return None if row is None else _row_to_record(row)


def request_cancel_sync(conn: Connection, run_id: str, at: dt.datetime) -> RunRecord | None:
    """Marks the cancel request of an open run, or of one just ended `cancelled` (the first request's
    time is kept); the record as stored."""
    stmts = _statements(conn.dialect.name)
    conn.execute(stmts["cancel"], {"b_run": run_id, "b_at": at})
    row = fast_execute(conn, stmts["by_run"], {"b_run": run_id}, typed=True).first()
    return None if row is None else _row_to_record(row)


def add_model_usage_sync(
    conn: Connection, run_id: str, model_id: str, usage: Mapping[str, Any], calls: int
) -> None:
    """Adds one model call's usage to the run's `model_usage` metadata (per model: every count summed,
    `Usage.extra` details included, calls counted). Read-modify-write under the SQLite write lock / a
    row lock on PostgreSQL."""
    stmts = _statements(conn.dialect.name)
    row = conn.execute(stmts["meta"], {"b_run": run_id}).first()
    if row is None:
        return
    meta = dict(row[0] or {})
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
    conn.execute(stmts["set_meta"], {"b_run": run_id, "b_meta": meta})


def open_runs_sync(conn: Connection, owner: str) -> list[tuple[str, int]]:
    """(run id, last sequence) of the runs `owner` left created or running, locked for the caller's
    transaction (crash recovery: `FactStores.mark_interrupted`)."""
    rows = conn.execute(_statements(conn.dialect.name)["open_runs"], {"b_owner": owner}).all()
    return [(str(run_id), int(last)) for run_id, last in rows]


class SqlRunLedger(LedgerReads):
    """`ports.RunLedger` on SQLite/PostgreSQL: the reads of `LedgerReads` and the writes a caller makes
    outside the run path's transactions, each one transaction running this module's statements."""

    async def add_model_usage(self, run_id: str, model_id: str, usage: Mapping[str, Any], calls: int) -> None:
        """`add_model_usage_sync` in a transaction of its own."""
        await self.db.run_write(lambda conn: add_model_usage_sync(conn, run_id, model_id, usage, calls))

    async def request_cancel(self, run_id: str, at: dt.datetime) -> RunRecord | None:
        return await self.db.run_write(lambda conn: request_cancel_sync(conn, run_id, at))

    async def finish_run(
        self,
        run_id: str,
        status: common_pb2.RunStatus.ValueType,
        reason: str,
        usage: Mapping[str, Any] | None = None,
    ) -> RunRecord | None:
        """`finish_run_sync` in a transaction of its own (the status alone, when the run's ending could
        not be recorded with its results: `RunService`)."""
        return await self.db.run_write(lambda conn: finish_run_sync(conn, run_id, status, reason, usage))
