"""Every SQLite connection of the host: how it is set up (pragmas, how its transactions begin), the
async engine's aiosqlite connections that finalize their statements before they close, and the driver
helpers of the writer thread (driver errors raised as SQLAlchemy's, BEGIN IMMEDIATE with a busy wait).

Why the aiosqlite connections finalize their statements: when a task is cancelled while one of its
statements is in flight, SQLAlchemy invalidates the connection and closes it. pysqlite's `close()` uses
`sqlite3_close_v2`: while a cursor object still holds a stepped statement (an `INSERT … RETURNING` whose
rows were never fetched, a half-read `SELECT`), the connection only becomes a "zombie" that keeps its
transaction and its locks until that cursor is garbage-collected. A cancelled task's exception keeps its
frames, and with them the cursor, alive for as long as anything holds the exception, so the next writer
would wait out the whole busy timeout on a lock nobody owns. Closing every cursor of the connection on
its worker thread, right before the connection itself closes, ends the statements, rolls the
transaction back and releases the locks at once.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import aiosqlite
from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DBAPIError

#: how long a connection waits for another process's write lock before it fails ("database is locked")
BUSY_TIMEOUT_MS = 30_000

T = TypeVar("T")


class FinalizingConnection(aiosqlite.Connection):
    """An `aiosqlite.Connection` that tracks the pysqlite cursors it hands out and closes them first."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], iter_chunk_size: int = 64) -> None:
        super().__init__(connector, iter_chunk_size)
        self._cursors: weakref.WeakSet[sqlite3.Cursor] = weakref.WeakSet()

    def _tracked(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs on the worker thread: every cursor a call returns is remembered (weakly)."""
        result = fn(*args, **kwargs)
        if isinstance(result, sqlite3.Cursor):
            self._cursors.add(result)
        return result

    def _close_cursors(self) -> None:
        """Runs on the worker thread, in queue order: after every statement already submitted."""
        for cursor in list(self._cursors):
            with contextlib.suppress(sqlite3.Error):
                cursor.close()
        self._cursors.clear()

    # (aiosqlite's `_execute` carries no annotations: the two calls below are to untyped code)
    async def _execute(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await super()._execute(self._tracked, fn, *args, **kwargs)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        """Finalizes the statements (queued after every one already submitted), then closes."""
        if self._connection is not None:
            await super()._execute(self._close_cursors)  # type: ignore[no-untyped-call]
        await super().close()

    def stop(self) -> Any:
        """The forced close (SQLAlchemy's terminate fallback) also finalizes the statements first."""
        if self._connection is not None:
            self._tx.put_nowait((None, self._close_cursors))
        return super().stop()


def connect(database: str, *, iter_chunk_size: int = 64, **kwargs: Any) -> FinalizingConnection:
    """`aiosqlite.connect` returning a `FinalizingConnection` (SQLAlchemy's `async_creator_fn`)."""

    def connector() -> sqlite3.Connection:
        connection: sqlite3.Connection = sqlite3.connect(str(database), **kwargs)
        return connection

    connection = FinalizingConnection(connector, iter_chunk_size)
    connection._thread.daemon = True  # as SQLAlchemy does for aiosqlite: never blocks interpreter exit
    return connection


def install_pragmas(engine: Engine) -> None:
    """The host's settings on every connection `engine` opens, and how its transactions begin."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event decide how a transaction starts (pysqlite would BEGIN lazily).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        # Only a database that is not WAL yet is switched (that needs an exclusive lock); `upgrade`
        # already switched every database it migrated.
        cursor.execute("PRAGMA journal_mode")
        if str(cursor.fetchone()[0]).lower() != "wal":
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        # No checkpoint inside a commit: the committing write would copy the WAL into the database
        # file and fsync it, a stall of milliseconds every few hundred commits. The checkpointer
        # (`checkpoint.py`) does it in the background instead.
        cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        if conn.dialect.driver == "pysqlite":  # the writer thread: straight to the driver
            driver = driver_of(conn)
            if not driver.in_transaction:  # (the writer begins on the driver itself)
                driver.execute(f"BEGIN {mode}")
        else:
            conn.exec_driver_sql(f"BEGIN {mode}")


def driver_of(conn: Connection) -> sqlite3.Connection:
    """The pysqlite connection under a writer-thread `Connection`."""
    driver: object = conn.connection.dbapi_connection  # (typed as SQLAlchemy's DBAPI protocol)
    assert isinstance(driver, sqlite3.Connection)
    return driver


def driver_error(conn: Connection, statement: str, params: Any, exc: Exception) -> DBAPIError:
    """A pysqlite error as the `DBAPIError` subclass `conn.execute` would have raised."""
    error = DBAPIError.instance(statement, params, exc, sqlite3.Error, dialect=conn.dialect)
    assert isinstance(error, DBAPIError)  # (a driver error always makes one)
    return error


def on_driver(conn: Connection, what: str, call: Callable[..., T], *args: object) -> T:
    """`call(*args)` on the pysqlite driver (`what` names it in errors), its errors raised as
    SQLAlchemy's `DBAPIError` subclasses."""
    try:
        return call(*args)
    except sqlite3.Error as exc:
        raise driver_error(conn, what, None, exc) from exc


def is_busy(exc: BaseException) -> bool:
    """SQLite refused the lock at once (another process writes): `database is locked` / `busy`."""
    message = str(getattr(exc, "orig", exc))
    return "locked" in message or "busy" in message


def begin_immediate(conn: Connection, driver: sqlite3.Connection, wait_ms: int) -> None:
    """BEGIN IMMEDIATE on a connection whose busy timeout is 0, retried for up to `wait_ms` while
    another process holds the write lock (backing off from 1 ms to 50 ms, as SQLite's own handler)."""
    deadline: float | None = None
    delay = 0.001
    while True:
        try:
            driver.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.Error as exc:
            now = time.monotonic()
            if deadline is None:
                deadline = now + wait_ms / 1000
            if not is_busy(exc) or now >= deadline:
                raise driver_error(conn, "BEGIN IMMEDIATE", None, exc) from exc
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, 0.05)
