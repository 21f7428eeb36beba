"""The database: async engine and sessions, Alembic upgrade and the "is it migrated?" check.

SQLite (`sqlite+aiosqlite:///path`) is the embedded default; PostgreSQL (`postgresql+psycopg://…`) is
the production backend. On SQLite every write transaction starts with `BEGIN IMMEDIATE` (and is
serialized in-process), so concurrent writers queue on the busy timeout instead of failing on a lock
upgrade; WAL keeps readers off the writers' path.

Hot-path writes (run start, result batches, run finish) use `run_write(fn)`: `fn` gets a sync
`Connection` and runs as ONE transaction. On SQLite that is one hop to a dedicated writer thread with
its own pysqlite connection (aiosqlite would cost a thread hop per cursor call: ~30 per transaction);
on PostgreSQL it runs in the async connection's greenlet (one round trip per statement, as before).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import re
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc
import psycopg
import sqlalchemy.exc
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event, pool
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound, OperationalError, StatementError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from agentrunner.errors import RuntimeFailureError
from agentrunner_host.store import sqlite_driver

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
DEFAULT_URL = "sqlite+aiosqlite:///var/agentrunner-host.db"
#: The command users run to migrate (the host CLI exposes `migrate_cli` under this name).
UPGRADE_COMMAND = "agentrunner-host db upgrade"
SQLITE_BUSY_TIMEOUT_MS = 30_000
#: SQLite: how often the host moves committed WAL pages into the database file (`run_checkpointer`)
WAL_CHECKPOINT_SECONDS = 1.0
#: how long a checkpoint's second step waits for readers still on the WAL (writers wait meanwhile)
CHECKPOINT_WAIT_MS = 50

T = TypeVar("T")
_log = logging.getLogger(__name__)


class DatabaseNotMigratedError(RuntimeError):
    """The database schema is not at the head revision; the message says what to run."""


class StoreError(RuntimeFailureError):
    """A database failure surfaced as the protocol's `RUNTIME_ERROR` (never a stack trace): UNAVAILABLE
    and retryable when the failure is transient (`store_error`), INTERNAL and not retryable otherwise."""


#: PostgreSQL SQLSTATE classes / codes of failures that a later attempt can get past: connection
#: exceptions, insufficient resources, operator intervention (shutdown, restart), serialization
#: failures and deadlocks, a lock not available
_TRANSIENT_SQLSTATE_CLASSES = ("08", "53", "57")
_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03"})


#: what a database call raises that becomes a `StoreError` (a statement's own error, a bind value the
#: driver refused, an exhausted pool)
_DB_ERRORS = (StatementError, sqlalchemy.exc.TimeoutError)


def is_transient(exc: BaseException) -> bool:
    """Whether a database failure may pass when retried unchanged: the connection was lost or refused,
    the server is shutting down or restarting, a lock or serialization conflict, SQLite busy. Constraint
    violations, bad data, a full disk or a corrupt file are not."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, sqlalchemy.exc.TimeoutError):  # the connection pool was exhausted
        return True
    cause = getattr(exc, "orig", None) or exc
    sqlstate = getattr(cause, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        return sqlstate in _TRANSIENT_SQLSTATES or sqlstate[:2] in _TRANSIENT_SQLSTATE_CLASSES
    if isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError):
        return True  # no SQLSTATE: the server could not be reached or the connection broke
    if isinstance(cause, sqlite3.OperationalError):
        return _is_busy(cause)
    return False


def store_error(exc: BaseException, action: str) -> StoreError:
    """The typed error for a failed database `action` (`read`, `write`): retryable only when transient."""
    cause = getattr(exc, "orig", None) or exc
    transient = is_transient(exc)
    return StoreError(
        f"database {action} failed: {type(cause).__name__}",
        retryable=transient,
        code=grpc.StatusCode.UNAVAILABLE if transient else grpc.StatusCode.INTERNAL,
    )


def _normalize(url: str | URL) -> URL:
    parsed = make_url(url)
    if parsed.drivername in {"sqlite", "sqlite+pysqlite"}:
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    elif parsed.drivername in {"postgresql", "postgres", "postgresql+psycopg2"}:
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername not in {"sqlite+aiosqlite", "postgresql+psycopg"}:
        raise ValueError(f"unsupported database URL scheme {parsed.drivername!r}")
    if parsed.drivername.startswith("sqlite"):
        if not parsed.database or parsed.database == ":memory:":
            raise ValueError("SQLite needs a file path (sqlite+aiosqlite:///path/to/host.db)")
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    return parsed


def _sync_url(url: str | URL) -> URL:
    """The same database through a sync driver, for Alembic (no event loop needed)."""
    parsed = _normalize(url)
    if parsed.drivername == "sqlite+aiosqlite":
        return parsed.set(drivername="sqlite+pysqlite")
    return parsed  # psycopg 3 is both sync and async


def safe_url(url: str | URL) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _install_sqlite_pragmas(sync_engine: Any) -> None:
    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event decide how a transaction starts (pysqlite would BEGIN lazily).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        # Only a database that is not WAL yet is switched (that needs an exclusive lock); `upgrade`
        # already switched every database it migrated.
        cursor.execute("PRAGMA journal_mode")
        if str(cursor.fetchone()[0]).lower() != "wal":
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        # No checkpoint inside a commit: the committing write (often inline on the event loop) would copy
        # the WAL into the database file and fsync it, a stall of milliseconds every few hundred
        # commits. `Database.run_checkpointer` does it in the background instead.
        cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        if conn.dialect.driver == "pysqlite":  # the writer thread: straight to the driver
            driver = conn.connection.dbapi_connection
            if not driver.in_transaction:  # (`Database._write_sync` begins on the driver itself)
                driver.execute(f"BEGIN {mode}")
        else:
            conn.exec_driver_sql(f"BEGIN {mode}")


def json_text(value: Any) -> str:
    """`json.dumps` for JSON columns, the values most of them hold (None, an empty list or object)
    answered without an encoder (a run start binds nine JSON values).

    The same rules on both backends: NaN and infinities (not JSON) and NUL characters (PostgreSQL's
    JSONB refuses `\u0000`) raise `ValueError` on SQLite too, instead of being kept there and
    refused only by PostgreSQL. Values from outside never get here with them (`boundary`)."""
    if value is None:
        return "null"
    if not value:
        kind = type(value)
        if kind is list:
            return "[]"
        if kind is dict:
            return "{}"
    text = json.dumps(value, allow_nan=False)
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise ValueError("a JSON value with a NUL character cannot be stored")
    return text


#: `\u0000` in JSON text that is an escape (not an escaped backslash followed by `u0000`)
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _driver_error(conn: Connection, statement: str, params: Any, exc: Exception) -> DBAPIError:
    """A pysqlite error as the `DBAPIError` subclass `conn.execute` would have raised."""
    error = DBAPIError.instance(statement, params, exc, conn.dialect.loaded_dbapi.Error, dialect=conn.dialect)
    assert isinstance(error, DBAPIError)  # (a driver error always makes one)
    return error


def _on_driver(conn: Connection, what: str, call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)` on the pysqlite driver (`what` names it in errors), its errors raised as
    SQLAlchemy's `DBAPIError` subclasses."""
    try:
        return call(*args)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _driver_error(conn, what, None, exc) from exc


def _begin_immediate(conn: Connection, driver: Any, wait_ms: int) -> None:
    """BEGIN IMMEDIATE on a connection whose busy timeout is 0, retried for up to `wait_ms` while
    another process holds the write lock (backing off from 1 ms to 50 ms, as SQLite's own handler)."""
    deadline: float | None = None
    delay = 0.001
    while True:
        try:
            driver.execute("BEGIN IMMEDIATE")
            return
        except conn.dialect.loaded_dbapi.Error as exc:
            now = time.monotonic()
            if deadline is None:
                deadline = now + wait_ms / 1000
            if not _is_busy(exc) or now >= deadline:
                raise _driver_error(conn, "BEGIN IMMEDIATE", None, exc) from exc
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, 0.05)


def driver_execute(conn: Connection, sql: str, params: tuple[Any, ...]) -> None:
    """`conn.exec_driver_sql(sql, params)` for a statement without rows; on the SQLite writer thread
    straight on the driver (SQLAlchemy's per-execute bookkeeping cost more than a small insert)."""
    if conn.dialect.driver != "pysqlite":
        conn.exec_driver_sql(sql, params)
        return
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    try:
        dbapi.execute(sql, params).close()
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _driver_error(conn, sql, params, exc) from exc


def bind_processor(type_: Any, dialect: Any) -> Callable[[Any], Any] | None:
    """The conversion SQLAlchemy applies to a value bound to a column of `type_` on `dialect`."""
    processor: Callable[[Any], Any] | None = type_.dialect_impl(dialect).bind_processor(dialect)
    return processor


def result_processor(type_: Any, dialect: Any) -> Callable[[Any], Any] | None:
    """The conversion SQLAlchemy applies to a value read from a column of `type_` on `dialect`."""
    processor: Callable[[Any], Any] | None = type_.dialect_impl(dialect).result_processor(dialect, None)
    return processor


class _Plan:
    """A Core statement compiled once for pysqlite: the SQL, where each positional parameter comes from
    (the caller's key with its bind conversion, or a constant) and, for `typed` reads, the result
    conversion of each column that has one, as (index, processor) pairs."""

    __slots__ = ("has_rows", "row_processors", "sources", "sql", "stmt")

    def __init__(
        self,
        stmt: Any,
        sql: str,
        sources: tuple[tuple[str | None, Any, Callable[[Any], Any] | None], ...],
        rows: bool,
        row_processors: tuple[Callable[[Any], Any] | None, ...] = (),
    ):
        self.stmt = stmt  # keeps id(stmt) from being reused while the plan is cached
        self.sql = sql
        self.has_rows = rows
        self.sources = sources
        self.row_processors = tuple((i, p) for i, p in enumerate(row_processors) if p is not None)

    def values(self, params: dict[str, Any]) -> tuple[Any, ...]:
        """The driver's parameter tuple from the caller's parameters."""
        return tuple(
            const if name is None else (params[name] if processor is None else processor(params[name]))
            for name, const, processor in self.sources
        )

    def row(self, row: Sequence[Any]) -> tuple[Any, ...]:
        """A driver row converted by its columns' result processors."""
        out = list(row)
        for i, processor in self.row_processors:
            out[i] = processor(out[i])
        return tuple(out)


_PLANS: dict[tuple[int, tuple[str, ...], bool], _Plan | None] = {}
_MAX_PLANS = 256


def _plan(conn: Connection, stmt: Any, keys: tuple[str, ...], typed: bool = False) -> _Plan | None:
    """None when the statement needs SQLAlchemy's execution context (Python-side defaults, expanding
    IN lists, or typed result columns unless `typed`): those run through `conn.execute`."""
    dialect = conn.dialect
    compiled: Any = stmt.compile(dialect=dialect, column_keys=list(keys))
    if (
        compiled.insert_prefetch
        or compiled.update_prefetch
        or "POSTCOMPILE" in compiled.string
        or compiled.positiontup is None
    ):
        return None
    columns = list(getattr(stmt, "exported_columns", ()))  # (selected or RETURNING columns)
    row_processors = tuple(result_processor(c.type, dialect) for c in columns)
    if any(row_processors) and not typed:
        return None
    sources: list[tuple[str | None, Any, Callable[[Any], Any] | None]] = []
    for name in compiled.positiontup:
        bind = compiled.binds[name]
        processor = bind_processor(bind.type, dialect)
        if name in keys:
            sources.append((name, None, processor))
        elif bind.callable is None and not bind.required:
            value = bind.effective_value
            sources.append((None, processor(value) if processor else value, None))
        else:
            return None
    return _Plan(stmt, compiled.string, tuple(sources), bool(columns), row_processors)


class FastResult:
    """The rows of a `fast_execute` call, with the few `Result` accessors the hot paths use."""

    __slots__ = ("rows",)

    def __init__(self, rows: Sequence[Any]) -> None:
        self.rows = rows

    def first(self) -> Any:
        return self.rows[0] if self.rows else None

    def scalar_one_or_none(self) -> Any:
        if len(self.rows) > 1:
            raise MultipleResultsFound("more than one row")
        return self.rows[0][0] if self.rows else None

    def scalar_one(self) -> Any:
        if len(self.rows) != 1:
            raise NoResultFound("no row") if not self.rows else MultipleResultsFound("more than one row")
        return self.rows[0][0]


def fast_execute(conn: Connection, stmt: Any, params: dict[str, Any], *, typed: bool = False) -> Any:
    """`conn.execute(stmt, params)` for the hot sync writes. On the SQLite writer thread (pysqlite) the
    statement is compiled once and run on the driver's cursor with the same bind conversions (SQLAlchemy's
    per-execute bookkeeping cost more than SQLite's own insert); elsewhere it is `conn.execute`.
    `typed`: the caller reads rows as tuples, so rows whose columns need conversion (timestamps, JSON)
    take the fast path too, converted by the columns' result processors. Driver errors are raised as
    SQLAlchemy's `DBAPIError` subclasses, as `conn.execute` would."""
    if conn.dialect.driver != "pysqlite":
        return conn.execute(stmt, params)
    key = (id(stmt), tuple(params), typed)
    try:
        plan = _PLANS[key]
    except KeyError:
        if len(_PLANS) >= _MAX_PLANS:  # meant for statements built once; anything else runs as usual
            return conn.execute(stmt, params)
        plan = _PLANS[key] = _plan(conn, stmt, key[1], typed)
    if plan is None:
        return conn.execute(stmt, params)
    values = plan.values(params)
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    try:
        cursor = dbapi.cursor()
        try:
            cursor.execute(plan.sql, values)
            rows = cursor.fetchall() if plan.has_rows else []
        finally:
            cursor.close()
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _driver_error(conn, plan.sql, values, exc) from exc
    if plan.row_processors:
        rows = [plan.row(r) for r in rows]
    return FastResult(rows)


def _end_write(conn: Connection, driver: Any, *, commit: bool) -> None:
    """Ends the write connection's transaction, begun on the driver or joined by SQLAlchemy (`_write_sync`).
    A COMMIT that fails leaves nothing open behind it: the transaction is rolled back."""
    if not commit:
        if conn.in_transaction():
            conn.rollback()
        elif driver.in_transaction:
            _on_driver(conn, "ROLLBACK", driver.rollback)
        return
    try:
        if conn.in_transaction():
            conn.commit()
        else:
            _on_driver(conn, "COMMIT", driver.commit)
    except BaseException:
        with contextlib.suppress(Exception):
            _end_write(conn, driver, commit=False)
        raise


@dataclasses.dataclass(eq=False, slots=True)
class _QueuedWrite:
    """A write waiting for the writer thread (`Database._grouped`) and the future its caller awaits."""

    fn: Callable[[Connection], Any]
    future: asyncio.Future[Any]

    def settle(self, ok: bool, value: Any) -> None:
        if self.future.done():
            return
        if ok:
            self.future.set_result(value)
        else:
            self.future.set_exception(value)


def _settle_all(batch: list[_QueuedWrite], done: asyncio.Future[list[tuple[bool, Any]]] | None) -> None:
    """Each queued write's outcome from its group's (`done`); when the group never ran or its outcome
    is unknown, a retryable `StoreError`."""
    if done is not None and done.done() and not done.cancelled() and done.exception() is None:
        for queued, (ok, value) in zip(batch, done.result(), strict=True):
            queued.settle(ok, value)
        return
    for queued in batch:
        queued.settle(
            False,
            StoreError(
                "database write failed: the writer stopped", retryable=True, code=grpc.StatusCode.UNAVAILABLE
            ),
        )


class Database:
    """An async engine and its session factory."""

    def __init__(self, url: str | URL = DEFAULT_URL, *, pool_size: int = 10, echo: bool = False) -> None:
        self.url = _normalize(url)
        self.dialect = "sqlite" if self.url.drivername.startswith("sqlite") else "postgresql"
        kwargs: dict[str, Any] = {"echo": echo, "json_serializer": json_text}
        if self.dialect == "sqlite":
            kwargs["connect_args"] = {
                "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000,
                "async_creator_fn": sqlite_driver.connect,  # cancel-safe close (see sqlite_driver)
            }
        else:
            # No pre-ping (a round trip per checkout); stale connections are recycled instead.
            kwargs.update(pool_size=pool_size, max_overflow=pool_size * 2, pool_recycle=1800)
        self.engine: AsyncEngine = create_async_engine(self.url, **kwargs)
        if self.dialect == "sqlite":
            _install_sqlite_pragmas(self.engine.sync_engine)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        # Reads on PostgreSQL use their own pool of autocommit connections: no BEGIN/COMMIT round trips,
        # and no isolation-level switch and rollback at every checkout and return (together ~0.4 ms, more
        # than a history page's query), as an `execution_options` view of the write engine would cost.
        read_engine = (
            self.engine
            if self.dialect == "sqlite"
            else create_async_engine(
                self.url,
                echo=echo,
                json_serializer=json_text,
                isolation_level="AUTOCOMMIT",
                pool_reset_on_return=None,  # autocommit: there is never a transaction to roll back
                pool_size=pool_size,
                max_overflow=pool_size * 2,
                pool_recycle=1800,
            )
        )
        self._read_engine = read_engine
        self._driver_sql: dict[Any, str] = {}
        self._read_sessions = async_sessionmaker(read_engine, expire_on_commit=False)
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        self._sync_engine: Engine | None = None
        self._write_conn: Connection | None = None
        self._checkpoint_conn: sqlite3.Connection | None = None
        self._checkpoint_lock = threading.Lock()
        #: the write connection's own busy timeout was set to 0 (`_write_sync`)
        self._busy_off = False
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None
        #: writes waiting for the writer thread (`_grouped`): taken together, one transaction for all
        self._queued: list[_QueuedWrite] = []
        self._drainer: asyncio.Task[None] | None = None
        if self.dialect == "sqlite":
            # One connection, used only by the one writer thread (StaticPool: no checkout overhead).
            self._sync_engine = create_engine(
                _sync_url(self.url),
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
                poolclass=pool.StaticPool,
                echo=echo,
                json_serializer=json_text,
            )
            _install_sqlite_pragmas(self._sync_engine)
            self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer")

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """A read-only unit of work (each statement sees committed data; no multi-statement snapshot)."""
        try:
            async with self._read_sessions() as session:
                yield session
        except _DB_ERRORS as exc:
            raise store_error(exc, "read") from exc

    @contextlib.asynccontextmanager
    async def read_connection(self) -> AsyncIterator[AsyncConnection]:
        """Like `read()`, on a bare connection (Core statements only: no ORM session to set up)."""
        try:
            async with self._read_engine.connect() as conn:
                yield conn
        except _DB_ERRORS as exc:
            raise store_error(exc, "read") from exc

    async def driver_rows(self, stmt: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """PostgreSQL only: a hot read's rows as the driver returns them (no SQLAlchemy result layer,
        no type processing: the caller converts). The statement is compiled once; psycopg prepares it
        after a few runs. About 0.3 ms less than `read_connection().execute` for a 50-row page."""
        sql = self._driver_sql.get(stmt)
        if sql is None:
            sql = self._driver_sql[stmt] = str(stmt.compile(dialect=self._read_engine.dialect))
        try:
            async with self._read_engine.connect() as conn:
                driver = (await conn.get_raw_connection()).driver_connection
                assert driver is not None
                cursor = await driver.execute(sql, params)
                rows: list[tuple[Any, ...]] = await cursor.fetchall()
                return rows
        except (DBAPIError, psycopg.Error) as exc:
            raise store_error(exc, "read") from exc

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """One transaction: everything inside commits together or not at all."""
        lock = self._write_lock or contextlib.nullcontext()
        try:
            async with lock, self.engine.connect() as conn:
                if self.is_sqlite:
                    await conn.execution_options(sqlite_begin="IMMEDIATE")
                async with AsyncSession(bind=conn, expire_on_commit=False) as session, session.begin():
                    yield session
        except _DB_ERRORS as exc:
            raise store_error(exc, "write") from exc

    async def run_write(self, fn: Callable[[Connection], T], *, inline: bool = False) -> T:
        """Runs `fn(conn)` (sync, SQLAlchemy Core) all or nothing. On SQLite it runs on the writer thread,
        serialized with `write()`, committed together with the other writes queued meanwhile, each inside
        a savepoint of its own (`_grouped`); a caller cancelled once its write was taken still waits for
        the commit, so its outcome is never unknown to the code that cleans up.

        `inline=True` is for short transactions on a latency path (run start): when no other write is
        queued, `fn` runs right here on the event loop with a zero busy timeout, which saves the hand-off
        to the writer thread and back; if another process holds the database lock it falls back to the
        writer thread, so the loop never waits on a lock."""
        try:
            if self._writer is None:
                async with self.engine.begin() as conn:
                    return await conn.run_sync(fn)
            assert self._write_lock is not None
            if inline and not self._write_lock.locked() and not self._queued:
                async with self._write_lock:
                    try:
                        return self._write_sync(fn, busy_timeout_ms=0)
                    except (OperationalError, sqlite3.OperationalError) as exc:
                        if not _is_busy(exc):
                            raise
                        return await self._submit(fn)
            return await self._grouped(fn)
        except _DB_ERRORS as exc:
            raise store_error(exc, "write") from exc

    async def _grouped(self, fn: Callable[[Connection], T]) -> T:
        """`fn` on the writer thread, in one transaction with every other write queued meanwhile (group
        commit: concurrent run starts and ends share a commit, a hand-off to the thread and back, and
        the WAL pages they touch). Each write runs inside a savepoint: one that raises is rolled back
        alone and raises to its caller; the others still commit. A caller cancelled before its write
        was taken drops it (it never runs, as when it waited for the lock before); once taken, the
        caller waits for the transaction's outcome before the cancellation goes on."""
        loop = asyncio.get_running_loop()
        queued = _QueuedWrite(fn, loop.create_future())
        self._queued.append(queued)
        if self._drainer is None:
            self._drainer = loop.create_task(self._drain())
        try:
            return await asyncio.shield(queued.future)
        except asyncio.CancelledError:
            if queued in self._queued:
                self._queued.remove(queued)
                queued.future.cancel()
            else:
                with contextlib.suppress(BaseException):
                    await queued.future
            raise

    async def _drain(self) -> None:
        """Takes the queued writes, all of them at a time, to the writer thread until none is left."""
        assert self._write_lock is not None and self._writer is not None
        loop = asyncio.get_running_loop()
        try:
            async with self._write_lock:
                while self._queued:
                    batch, self._queued = self._queued, []
                    try:
                        done = loop.run_in_executor(
                            self._writer, self._write_group_sync, [q.fn for q in batch]
                        )
                    except RuntimeError:  # the writer was shut down (`dispose`)
                        _settle_all(batch, None)
                        continue
                    try:
                        await asyncio.shield(done)
                    except asyncio.CancelledError:  # (the loop is shutting down) the writes still end
                        with contextlib.suppress(BaseException):
                            await done
                        raise
                    finally:
                        _settle_all(batch, done)
        finally:
            self._drainer = None
            _settle_all(self._queued, None)  # (only when the drain itself was cancelled)
            self._queued = []

    def _write_group_sync(self, fns: list[Callable[[Connection], Any]]) -> list[tuple[bool, Any]]:
        """The writes of one group in one transaction, each inside a savepoint: `(True, result)` or
        `(False, exception)` per write, in order. When the transaction itself fails (its BEGIN or
        COMMIT, or an error that ended it), nothing of the group is committed and every write gets
        that error."""
        if len(fns) == 1:
            try:
                return [(True, self._write_sync(fns[0]))]
            except Exception as exc:
                return [(False, exc)]
        outcomes: list[tuple[bool, Any]] = []
        #: the write whose error ended the group's transaction (the others only shared its fate)
        culprit: int | None = None
        try:
            conn, driver = self._write_connection()
            _begin_immediate(conn, driver, SQLITE_BUSY_TIMEOUT_MS)
            try:
                for i, fn in enumerate(fns):
                    _on_driver(conn, "SAVEPOINT", driver.execute, "SAVEPOINT grouped_write")
                    try:
                        outcomes.append((True, fn(conn)))
                    except Exception as exc:
                        if not driver.in_transaction:  # SQLite ended the transaction: the group failed
                            culprit = i
                            raise
                        _on_driver(conn, "ROLLBACK TO", driver.execute, "ROLLBACK TO grouped_write")
                        outcomes.append((False, exc))
                    _on_driver(conn, "RELEASE", driver.execute, "RELEASE grouped_write")
            except BaseException:
                _end_write(conn, driver, commit=False)
                raise
            _end_write(conn, driver, commit=True)
        except Exception as exc:
            self._busy_off = False  # the connection may have been replaced: set it again next time
            if culprit is None:  # BEGIN or COMMIT failed: the same error for every write
                return [(False, exc)] * len(fns)
            # the others' writes are fine: sent again alone they would commit (retryable)
            shared = StoreError(
                "database write failed: rolled back with another write of its transaction",
                retryable=True,
                code=grpc.StatusCode.UNAVAILABLE,
            )
            return [(False, exc if i == culprit else shared) for i in range(len(fns))]
        return outcomes

    async def _submit(self, fn: Callable[[Connection], T]) -> T:
        assert self._writer is not None
        future = asyncio.get_running_loop().run_in_executor(self._writer, self._write_sync, fn)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                await future
            raise

    def _write_connection(self) -> tuple[Connection, Any]:
        """The one write connection (opened again if it was closed or invalidated) and its driver
        connection, with the driver's own busy timeout at 0 (`_write_sync`)."""
        conn = self._write_conn
        if conn is None or conn.closed or conn.invalidated:
            assert self._sync_engine is not None
            conn = self._write_conn = self._sync_engine.connect().execution_options(sqlite_begin="IMMEDIATE")
            self._busy_off = False
        driver = conn.connection.dbapi_connection
        assert driver is not None
        if not self._busy_off:
            _on_driver(conn, "PRAGMA busy_timeout=0", driver.execute, "PRAGMA busy_timeout=0")
            self._busy_off = True
        return conn, driver

    def _write_begun(
        self, conn: Connection, driver: Any, fn: Callable[[Connection], T], busy_timeout_ms: int
    ) -> T:
        """BEGIN IMMEDIATE and `fn(conn)`; on any error the transaction is rolled back and the error
        raised (and the connection's settings are checked again next time)."""
        try:
            _begin_immediate(conn, driver, busy_timeout_ms)
            try:
                return fn(conn)
            except BaseException:
                _end_write(conn, driver, commit=False)
                raise
        except BaseException:
            self._busy_off = False  # the connection may have been replaced: set it again next time
            raise

    def _write_sync(self, fn: Callable[[Connection], T], busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS) -> T:
        """One IMMEDIATE transaction on the one write connection, kept open between transactions (a
        checkout, options and close per transaction cost more than a short transaction's statements).
        Callers are serialized by `_write_lock`. The connection's own busy timeout is 0: the transaction
        waits up to `busy_timeout_ms` for another process's lock here, at its BEGIN (the only statement
        that takes it), so the inline path (0) and the writer thread (30 s) share one setting.

        The transaction is begun and ended on the driver (SQLAlchemy's transaction bookkeeping cost
        about as much as a short transaction's statements); a statement `fn` runs through SQLAlchemy
        still joins it (`_on_begin` finds it open) and is committed or rolled back with it. Driver errors
        are raised as SQLAlchemy's `DBAPIError` subclasses, as `conn.begin()` would."""
        try:
            conn, driver = self._write_connection()
            result = self._write_begun(conn, driver, fn, busy_timeout_ms)
            _end_write(conn, driver, commit=True)
        except BaseException:
            self._busy_off = False  # the connection may have been replaced: set it again next time
            raise
        return result

    def _checkpoint_sync(self, mode: str = "PASSIVE") -> tuple[int, int, int]:
        with self._checkpoint_lock:  # `dispose` closes the connection under the same lock
            if self._checkpoint_conn is None:
                path = _sync_url(self.url).database
                conn = sqlite3.connect(path or ":memory:", isolation_level=None, check_same_thread=False)
                conn.execute(f"PRAGMA busy_timeout={CHECKPOINT_WAIT_MS}")
                self._checkpoint_conn = conn
            # fetchall: a statement left unfinished would hold a read lock and keep the WAL from restarting
            busy, frames, done = self._checkpoint_conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()[0]
            return int(busy), int(frames), int(done)

    async def checkpoint(self) -> tuple[int, int, int]:
        """SQLite: a checkpoint on its own connection and thread, in two steps: the bulk of the WAL
        (PASSIVE) while writes go on, then, holding this process's write lock, the frames committed
        meanwhile (RESTART: it also waits, up to `CHECKPOINT_WAIT_MS`, for readers still on the WAL).
        After the second step the whole WAL is in the database file and no reader uses it, so the next
        write starts the WAL file from its beginning again. (Without it, under steady writes some commit
        always landed during the checkpoint and the WAL file grew without end: about 75 KiB per run.)
        Writers wait only for the second, short step. Returns `(busy, WAL frames, frames
        checkpointed)` of the second step; `(0, 0, 0)` elsewhere."""
        if self.dialect != "sqlite":
            return 0, 0, 0
        assert self._write_lock is not None
        await asyncio.to_thread(self._checkpoint_sync)
        async with self._write_lock:
            return await asyncio.to_thread(self._checkpoint_sync, "RESTART")

    async def run_checkpointer(self, interval: float = WAL_CHECKPOINT_SECONDS) -> None:
        """SQLite: `checkpoint` every `interval` seconds until cancelled, so the WAL stays short without
        any commit paying for it (connections do not checkpoint on commit); returns at once elsewhere.
        Once a checkpoint caught up, the next commit starts the WAL file from its beginning again."""
        if self.dialect == "sqlite":
            await repeat(self.checkpoint, interval, "WAL checkpoint")  # (the WAL only grows meanwhile)

    async def dispose(self) -> None:
        if self._writer is not None:
            self._writer.shutdown(wait=True)
        if self._write_conn is not None:
            self._write_conn.close()
            self._write_conn = None
        with self._checkpoint_lock:
            if self._checkpoint_conn is not None:
                self._checkpoint_conn.close()
                self._checkpoint_conn = None
        if self._sync_engine is not None:
            self._sync_engine.dispose()
        if self._read_engine is not self.engine:
            await self._read_engine.dispose()
        await self.engine.dispose()


async def repeat(step: Callable[[], Awaitable[object]], interval: float, what: str) -> None:
    """The stores' background loops: `step` every `interval` seconds until cancelled; a failed round is
    logged and retried at the next one."""
    while True:
        try:
            await step()
        except Exception:
            _log.exception("%s failed; retrying in %.0fs", what, interval)
        await asyncio.sleep(interval)


def _is_busy(exc: Exception) -> bool:
    """SQLite refused the lock at once (another process writes): `database is locked` / `busy`."""
    message = str(getattr(exc, "orig", exc))
    return "locked" in message or "busy" in message


def _alembic_config(url: str | URL) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute, not an ini option: a URL's '%' would break ini interpolation.
    cfg.attributes["url"] = _sync_url(url)
    return cfg


def head_revisions() -> set[str]:
    # (the script directory alone: a config with a URL would create that SQLite file's directory)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return set(ScriptDirectory.from_config(cfg).get_heads())


def current_revisions(url: str | URL) -> set[str]:
    engine = create_engine(_sync_url(url))
    try:
        with engine.connect() as conn:
            return set(MigrationContext.configure(conn).get_current_heads())
    finally:
        engine.dispose()


def upgrade(url: str | URL, revision: str = "head", *, progress: Callable[[str], None] | None = None) -> None:
    """Upgrades the schema (sync; from async code use `await asyncio.to_thread(upgrade, url)`)."""
    cfg = _alembic_config(url)
    if progress is not None:
        cfg.attributes["progress"] = progress
    command.upgrade(cfg, revision)
    if _normalize(url).drivername.startswith("sqlite"):
        # WAL is a property of the file: switch it here, while nothing else has the database open
        # (switching needs it alone, and connections only switch a database that is not WAL yet).
        engine = create_engine(_sync_url(url))
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        finally:
            engine.dispose()


def downgrade(url: str | URL, revision: str) -> None:
    command.downgrade(_alembic_config(url), revision)


def ensure_current(url: str | URL, *, command_hint: str = UPGRADE_COMMAND) -> None:
    """Raises `DatabaseNotMigratedError` unless the schema is at head (call before serving)."""
    heads = head_revisions()
    try:
        current = current_revisions(url)
    except DBAPIError as exc:
        raise DatabaseNotMigratedError(
            f"cannot open database {safe_url(url)}: {type(exc.orig).__name__}: {exc.orig}"
        ) from exc
    if current != heads:
        at = ", ".join(sorted(current)) or "an empty schema"
        raise DatabaseNotMigratedError(
            f"database {safe_url(url)} is at {at}, but this host needs revision "
            f"{', '.join(sorted(heads))}. Run `{command_hint} --database-url '{safe_url(url)}'` "
            "to migrate it, then start the host again."
        )


def migrate_cli(url: str | URL, *, echo: Callable[[str], None] = print) -> None:
    """The body of the CLI's upgrade command: migrates and prints each step."""
    before = current_revisions(url)
    echo(f"database: {safe_url(url)}")
    echo(f"current revision: {', '.join(sorted(before)) or '(empty)'}")
    upgrade(url, progress=lambda step: echo(f"  applied {step}"))
    after = current_revisions(url)
    if after == before:
        echo("already at head; nothing to do")
    else:
        echo(f"upgraded to {', '.join(sorted(after))}")
