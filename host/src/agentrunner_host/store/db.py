"""The database: async engines and sessions for reads and unit-of-work writes, `run_write` for the
hot-path writes, and the SQLite writer thread and checkpointer behind them.

SQLite (`sqlite+aiosqlite:///path`) is the embedded default; PostgreSQL (`postgresql+psycopg://…`) is
the production backend. On SQLite every write transaction starts with `BEGIN IMMEDIATE` and holds the
one write lock of the process (`SqliteWriter.lock`), so concurrent writers queue instead of failing on
a lock upgrade; WAL keeps readers off the writers' path. The SQLite techniques live in `sqlite/`:
`connection.py` (connection settings, the aiosqlite connections of the async engine), `writer.py` (the
writer thread and group commit), `compiled.py` (statements run on the driver), `checkpoint.py` (the WAL
checkpointer). The schema's migrations are in `migrate.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy.exc
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import URL, Connection, Dialect, make_url
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.sql.elements import ClauseElement

from agentrunner_host.store import sqlite_vec
from agentrunner_host.store.errors import store_error
from agentrunner_host.store.sqlite import connection as sqlite_connection
from agentrunner_host.store.sqlite.checkpoint import WAL_CHECKPOINT_SECONDS, Checkpointer
from agentrunner_host.store.sqlite.writer import HeldWrite, SqliteWriter
from agentrunner_host.store.sqlite.writer import with_then as with_then  # (for the stores)

if TYPE_CHECKING:  # psycopg and its pool are imported when a PostgreSQL database is opened
    from agentrunner_host.store.pg_reads import HotReads
    from agentrunner_host.store.pg_writer import PgWriter

DEFAULT_URL = "sqlite+aiosqlite:///var/agentrunner-host.db"

T = TypeVar("T")
_log = logging.getLogger(__name__)

#: what a database call raises that becomes a `StoreError` (a statement's own error, a bind value the
#: driver refused, an exhausted pool)
_DB_ERRORS = (StatementError, sqlalchemy.exc.TimeoutError)


def normalize_url(url: str | URL) -> URL:
    """The URL with the host's async driver of its backend (and a SQLite file's directory created)."""
    parsed = make_url(url)
    if parsed.drivername in {"sqlite", "sqlite+pysqlite"}:
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    elif parsed.drivername in {"postgresql", "postgres", "postgresql+psycopg2"}:
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername not in {"sqlite+aiosqlite", "postgresql+psycopg"}:
        raise ValueError(f"unsupported database URL scheme {parsed.drivername!r}")
    if parsed.drivername == "postgresql+psycopg" and importlib.util.find_spec("psycopg_pool") is None:
        raise ValueError(
            "PostgreSQL needs the postgres extra: pip install 'langbot-agentrunner-host[postgres]'"
        )
    if parsed.drivername.startswith("sqlite"):
        if not parsed.database or parsed.database == ":memory:":
            raise ValueError("SQLite needs a file path (sqlite+aiosqlite:///path/to/host.db)")
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    return parsed


def sync_url(url: str | URL) -> URL:
    """The same database through a sync driver (Alembic, the SQLite writer thread)."""
    parsed = normalize_url(url)
    if parsed.drivername == "sqlite+aiosqlite":
        return parsed.set(drivername="sqlite+pysqlite")
    return parsed  # psycopg 3 is both sync and async


def safe_url(url: str | URL) -> str:
    return make_url(url).render_as_string(hide_password=True)


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
    text = _JSON.encode(value)
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise ValueError("a JSON value with a NUL character cannot be stored")
    return text


#: `json.dumps(value, allow_nan=False)` without an encoder built per call (dumps builds one for any
#: non-default option)
_JSON = json.JSONEncoder(allow_nan=False)

#: `\u0000` in JSON text that is an escape (not an escaped backslash followed by `u0000`)
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


#: distinct `driver_rows` statements kept compiled
_MAX_DRIVER_SQL = 512


def _driver_sql(
    stmt: ClauseElement, dialect: Dialect, params: dict[str, Any], literal: tuple[str, ...]
) -> str:
    """`stmt`'s SQL for the driver, the `literal` parameters' values (`literal_execute` binds) in it."""
    if not literal:
        return str(stmt.compile(dialect=dialect))
    # (every bind needs a value to compile; only the `literal_execute` ones are written in)
    return str(stmt.params(params).compile(dialect=dialect, compile_kwargs={"render_postcompile": True}))


class Database:
    """The host's database: reads, unit-of-work writes (`write`) and hot-path writes (`run_write`)."""

    def __init__(self, url: str | URL = DEFAULT_URL, *, pool_size: int = 10, echo: bool = False) -> None:
        self.url = normalize_url(url)
        self.dialect = "sqlite" if self.url.drivername.startswith("sqlite") else "postgresql"
        kwargs: dict[str, Any] = {"echo": echo, "json_serializer": json_text}
        if self.dialect == "sqlite":
            sqlite_vec.register()  # process-wide, before this database's first connection
            kwargs["connect_args"] = {
                "timeout": sqlite_connection.BUSY_TIMEOUT_MS / 1000,
                "async_creator_fn": sqlite_connection.connect,  # cancel-safe close (see connection.py)
            }
        else:
            # No pre-ping (a round trip per checkout); stale connections are recycled instead.
            kwargs.update(pool_size=pool_size, max_overflow=pool_size * 2, pool_recycle=1800)
        self.engine: AsyncEngine = create_async_engine(self.url, **kwargs)
        if self.dialect == "sqlite":
            sqlite_connection.install_pragmas(self.engine.sync_engine)
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
        #: `driver_rows`' SQL per statement (and per value of its literal parameters)
        self._driver_sql: dict[tuple[ClauseElement, tuple[Any, ...]], str] = {}
        self._hot_reads: HotReads | None = None
        self._pg_writer: PgWriter | None = None
        if self.dialect != "sqlite":
            from agentrunner_host.store.pg_reads import HotReads  # psycopg: the postgres extra
            from agentrunner_host.store.pg_writer import PgWriter

            self._hot_reads = HotReads(self.url, read_engine.dialect, pool_size * 3)
            self._pg_writer = PgWriter(sync_url(self.url), pool_size, json_text)
        self._read_sessions = async_sessionmaker(read_engine, expire_on_commit=False)
        self._writer: SqliteWriter | None = None
        self._checkpointer: Checkpointer | None = None
        if self.dialect == "sqlite":
            # One connection, used only by the one writer thread (StaticPool: no checkout overhead).
            write_engine = create_engine(
                sync_url(self.url),
                connect_args={
                    "timeout": sqlite_connection.BUSY_TIMEOUT_MS / 1000,
                    "check_same_thread": False,
                },
                poolclass=pool.StaticPool,
                echo=echo,
                json_serializer=json_text,
            )
            sqlite_connection.install_pragmas(write_engine)
            self._writer = SqliteWriter(write_engine)
            self._checkpointer = Checkpointer(str(sync_url(self.url).database), self._writer.lock)

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

    def driver_connect_args(self) -> dict[str, Any]:
        """PostgreSQL: the keyword arguments psycopg connects with (`store/notify.py`'s listener)."""
        _, kwargs = self._read_engine.dialect.create_connect_args(self.url)
        return dict(kwargs)

    async def driver_rows(
        self, stmt: ClauseElement, params: dict[str, Any], literal: tuple[str, ...] = ()
    ) -> list[tuple[Any, ...]]:
        """PostgreSQL only: a hot read's rows as the driver returns them (no SQLAlchemy result layer,
        no type processing: the caller converts), on psycopg's pool (`pg_reads.HotReads`). The statement
        is compiled once (once per value of the `literal` parameters, `literal_execute` binds written
        into the SQL); psycopg prepares it after a few runs.

        What `literal` is for: a prepared statement whose LIMIT is a parameter gets a custom plan, and
        so a planning pass, on every run (PostgreSQL's generic plan assumes the LIMIT keeps a tenth of
        the rows and loses the comparison); with the LIMIT written in, it gets the generic plan."""
        assert self._hot_reads is not None, "driver_rows is for PostgreSQL"
        import psycopg  # (loaded already: `HotReads` runs on it)

        key = (stmt, tuple(params[name] for name in literal))
        sql = self._driver_sql.get(key)
        if sql is None:
            if len(self._driver_sql) >= _MAX_DRIVER_SQL:  # (bounded: a few shapes times a few limits)
                self._driver_sql.clear()
            sql = self._driver_sql[key] = _driver_sql(stmt, self._read_engine.dialect, params, literal)
        try:
            return await self._hot_reads.rows(sql, params)
        except (DBAPIError, psycopg.Error) as exc:
            raise store_error(exc, "read") from exc

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """One transaction: everything inside commits together or not at all."""
        lock = self._writer.lock if self._writer is not None else contextlib.nullcontext()
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
        a savepoint of its own (`SqliteWriter`); a caller cancelled once its write was taken still waits
        for the commit, so its outcome is never unknown to the code that cleans up.

        `inline=True` is for short transactions on a latency path (run start): when no other write is
        queued, `fn` runs right here on the event loop with a zero busy timeout, which saves the hand-off
        to the writer thread and back; if another process holds the database lock it falls back to the
        writer thread, so the loop never waits on a lock."""
        try:
            if (
                self._pg_writer is not None
            ):  # (a worker thread: one wake-up of the loop, not one per statement)
                return await self._pg_writer.run(fn)
            if self._writer is None:
                async with self.engine.begin() as conn:
                    return await conn.run_sync(fn)
            return await self._writer.run(fn, inline=inline)
        except _DB_ERRORS as exc:
            raise store_error(exc, "write") from exc

    async def run_write_held(
        self, fn: Callable[[Connection], T], then: Callable[[Connection], Any] | None = None
    ) -> tuple[T, HeldWrite | None]:
        """`run_write(fn, inline=True)` whose COMMIT the caller issues (`SqliteWriter.run_held`): on
        SQLite's free inline path `fn`'s statements run here and the transaction comes back open (the
        `HeldWrite`, to commit or roll back on every path, soon); elsewhere (a write already running or
        queued, PostgreSQL) it commits before returning and the handle is None. `then(conn)` runs in the
        same transaction right before its COMMIT, in both cases.

        What it is for: the run start sends the runner call first and commits right after, so the
        commit and the statements nothing before it needs overlap the runner's start."""
        try:
            if self._pg_writer is not None:
                return await self._pg_writer.run(with_then(fn, then)), None
            if self._writer is None:
                async with self.engine.begin() as conn:
                    return await conn.run_sync(with_then(fn, then)), None
            return await self._writer.run_held(fn, then)
        except _DB_ERRORS as exc:
            raise store_error(exc, "write") from exc

    async def checkpoint(self) -> tuple[int, int, int]:
        """SQLite: a WAL checkpoint (`Checkpointer.checkpoint`); `(0, 0, 0)` elsewhere."""
        if self._checkpointer is None:
            return 0, 0, 0
        return await self._checkpointer.checkpoint()

    async def run_checkpointer(self, interval: float = WAL_CHECKPOINT_SECONDS) -> None:
        """SQLite: `checkpoint` every `interval` seconds until cancelled, so the WAL stays short without
        any commit paying for it (connections do not checkpoint on commit); returns at once elsewhere.
        Once a checkpoint caught up, the next commit starts the WAL file from its beginning again.
        A round after a complete checkpoint with nothing committed since is skipped (`when_written`)."""
        if self._checkpointer is not None:

            async def complete() -> bool:
                busy, frames, done = await self.checkpoint()
                return busy == 0 and done == frames

            # (the WAL only grows meanwhile)
            await repeat(when_written(self, complete), interval, "WAL checkpoint")

    def wal_mark(self) -> tuple[int, int] | None:
        """SQLite: the WAL file's size and modification time, which a commit of any connection or
        process moves (it writes frames to the file; a checkpoint does not); None elsewhere, or when
        there is no WAL file."""
        if self._checkpointer is None:
            return None
        try:
            stat = os.stat(self._checkpointer.path + "-wal")
        except OSError:
            return None
        return stat.st_size, stat.st_mtime_ns

    async def dispose(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._checkpointer is not None:
            self._checkpointer.close()
        if self._hot_reads is not None:
            await self._hot_reads.close()
        if self._pg_writer is not None:
            await asyncio.to_thread(self._pg_writer.close)
        if self._read_engine is not self.engine:
            await self._read_engine.dispose()
        await self.engine.dispose()


#: rounds `when_written` skips at most in a row (a commit within the file system's timestamp
#: granularity of the mark, with the file's size unchanged, is caught up at the latest then)
WHEN_WRITTEN_MAX_SKIPS = 30


def when_written(db: Database, step: Callable[[], Awaitable[bool]]) -> Callable[[], Awaitable[None]]:
    """`step` for `repeat`, skipped while nothing was committed to `db` since the last round whose
    `step` returned True (its WAL as it was: `Database.wal_mark`), at most `WHEN_WRITTEN_MAX_SKIPS`
    rounds in a row; on PostgreSQL every round runs. What it is for: an idle host's background loops
    (checkpointer, transcript indexer) woke a thread and the event loop several times a second for
    rounds with nothing to do (docs/performance.md, "Wake-ups per run")."""
    last: tuple[int, int] | None = None
    skipped = 0

    async def round_() -> None:
        nonlocal last, skipped
        mark = db.wal_mark()
        if mark is not None and mark == last and skipped < WHEN_WRITTEN_MAX_SKIPS:
            skipped += 1
            return
        last, skipped = None, 0  # (a round that raises is not skipped next time)
        if await step():
            last = mark

    return round_


async def repeat(step: Callable[[], Awaitable[object]], interval: float, what: str) -> None:
    """The stores' background loops: `step` every `interval` seconds until cancelled; a failed round is
    logged and retried at the next one."""
    while True:
        try:
            await step()
        except Exception:
            _log.exception("%s failed; retrying in %.0fs", what, interval)
        await asyncio.sleep(interval)
