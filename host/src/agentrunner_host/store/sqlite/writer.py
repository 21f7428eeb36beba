"""The SQLite writer: one write connection on one thread, and group commit.

Hot-path writes (run start, result batches, run finish) are sync functions over a SQLAlchemy
`Connection`, each run as ONE transaction on the writer thread with its own pysqlite connection
(aiosqlite would cost a thread hop per cursor call: ~30 per transaction). Writes that wait for the
thread meanwhile are committed together in one transaction, each inside a savepoint of its own (group
commit: concurrent run starts and ends share a commit, a hand-off to the thread and back, and the WAL
pages they touch). `lock` serializes the writer with this process's other writers of the database
(`Database.write()`, the checkpointer's second step).

The run start may instead run on the event loop and come back still open (`run_held`, `HeldWrite`): its
statements ran, its COMMIT is the caller's to issue, and the write lock stays held until then.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError, StatementError

from agentrunner_host.store.errors import StoreError, store_error
from agentrunner_host.store.sqlite.connection import (
    BUSY_TIMEOUT_MS,
    begin_immediate,
    driver_of,
    is_busy,
    on_driver,
)

T = TypeVar("T")


def _end_write(conn: Connection, driver: sqlite3.Connection, *, commit: bool) -> None:
    """Ends the write connection's transaction, begun on the driver or joined by SQLAlchemy (`_write_sync`).
    A COMMIT that fails leaves nothing open behind it: the transaction is rolled back."""
    if not commit:
        if conn.in_transaction():
            conn.rollback()
        elif driver.in_transaction:
            on_driver(conn, "ROLLBACK", driver.rollback)
        return
    try:
        if conn.in_transaction():
            conn.commit()
        else:
            on_driver(conn, "COMMIT", driver.commit)
    except BaseException:
        with contextlib.suppress(Exception):
            _end_write(conn, driver, commit=False)
        raise


def with_then(
    fn: Callable[[Connection], T], then: Callable[[Connection], Any] | None
) -> Callable[[Connection], T]:
    """`fn`, then `then` in the same transaction; `fn`'s result."""
    if then is None:
        return fn

    def both(conn: Connection) -> T:
        result = fn(conn)
        then(conn)
        return result

    return both


class HeldWrite:
    """A write transaction from `SqliteWriter.run_held`: its statements ran, its COMMIT is still to come,
    and the write lock is held until `commit` or `rollback` (exactly one of them, on every path; a
    second call is a no-op). Both are synchronous: they run on the event loop, as the statements did.
    A failed commit raises `StoreError`, as `Database.run_write` does."""

    __slots__ = ("_conn", "_driver", "_then", "_writer")

    def __init__(
        self,
        writer: SqliteWriter,
        conn: Connection,
        driver: sqlite3.Connection,
        then: Callable[[Connection], Any] | None,
    ) -> None:
        self._writer: SqliteWriter | None = writer
        self._conn = conn
        self._driver = driver
        #: statements nothing before the commit needs, run just before it
        self._then = then

    @property
    def open(self) -> bool:
        return self._writer is not None

    def commit(self) -> None:
        """Runs the `then` statements and commits; on any error everything is rolled back and the error
        raised (the write never happened)."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            try:
                if self._then is not None:
                    self._then(self._conn)
            except BaseException:
                _end_write(self._conn, self._driver, commit=False)
                raise
            _end_write(self._conn, self._driver, commit=True)
        except StatementError as exc:
            writer._busy_off = False  # the connection may have been replaced: set it again next time
            raise store_error(exc, "write") from exc
        except BaseException:
            writer._busy_off = False
            raise
        finally:
            writer.lock.release()

    def rollback(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            _end_write(self._conn, self._driver, commit=False)
        except Exception:  # the connection is replaced at the next write if it is broken
            writer._busy_off = False
        finally:
            writer.lock.release()


@dataclasses.dataclass(eq=False, slots=True)
class _QueuedWrite:
    """A write waiting for the writer thread (`SqliteWriter._grouped`) and the future its caller awaits."""

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


class SqliteWriter:
    """The one write connection of a SQLite database (opened by `engine`, a pysqlite engine with a
    static pool), the thread it is used on, and the writes queued for it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        #: held by whoever writes the database in this process (the writer while it drains the queue)
        self.lock = asyncio.Lock()
        self._conn: Connection | None = None
        #: the write connection's own busy timeout was set to 0 (`_write_sync`)
        self._busy_off = False
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer")
        #: writes waiting for the writer thread (`_grouped`): taken together, one transaction for all
        self._queued: list[_QueuedWrite] = []
        self._drainer: asyncio.Task[None] | None = None

    async def run(self, fn: Callable[[Connection], T], *, inline: bool = False) -> T:
        """`fn(conn)` as one transaction (see `Database.run_write`)."""
        if inline and not self.lock.locked() and not self._queued:
            async with self.lock:
                try:
                    return self._write_sync(fn, busy_timeout_ms=0)
                except (OperationalError, sqlite3.OperationalError) as exc:
                    if not is_busy(exc):
                        raise
                    return await self._submit(fn)
        return await self._grouped(fn)

    async def run_held(
        self, fn: Callable[[Connection], T], then: Callable[[Connection], Any] | None = None
    ) -> tuple[T, HeldWrite | None]:
        """`run(with_then(fn, then), inline=True)` whose COMMIT the caller issues: when the inline path
        is free, `fn`'s statements run here and the transaction stays open, holding `lock`, until the
        returned `HeldWrite` is committed or rolled back (the caller must do one on every path, soon,
        and without awaiting anything slow in between: every other write waits). Otherwise (another
        write running or queued, another process holding the database lock) the write commits as `run`
        would and the handle is None. `then(conn)` runs in the same transaction right before its
        COMMIT, in both cases."""
        if self.lock.locked() or self._queued:
            return await self._grouped(with_then(fn, then)), None
        await self.lock.acquire()  # free (checked above): returns without waiting
        try:
            conn, driver = self._write_connection()
            result = self._write_begun(conn, driver, fn, busy_timeout_ms=0)
        except (OperationalError, sqlite3.OperationalError) as exc:
            self.lock.release()
            if not is_busy(exc):
                raise
            return await self._submit(with_then(fn, then)), None  # another process writes: wait for it
        except BaseException:
            self.lock.release()
            raise
        return result, HeldWrite(self, conn, driver, then)

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
            result: T = await asyncio.shield(queued.future)
            return result
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
        loop = asyncio.get_running_loop()
        try:
            async with self.lock:
                while self._queued:
                    batch, self._queued = self._queued, []
                    try:
                        done = loop.run_in_executor(
                            self._thread, self._write_group_sync, [q.fn for q in batch]
                        )
                    except RuntimeError:  # the writer was shut down (`close`)
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
            begin_immediate(conn, driver, BUSY_TIMEOUT_MS)
            try:
                for i, fn in enumerate(fns):
                    on_driver(conn, "SAVEPOINT", driver.execute, "SAVEPOINT grouped_write")
                    try:
                        outcomes.append((True, fn(conn)))
                    except Exception as exc:
                        if not driver.in_transaction:  # SQLite ended the transaction: the group failed
                            culprit = i
                            raise
                        on_driver(conn, "ROLLBACK TO", driver.execute, "ROLLBACK TO grouped_write")
                        outcomes.append((False, exc))
                    on_driver(conn, "RELEASE", driver.execute, "RELEASE grouped_write")
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
        future = asyncio.get_running_loop().run_in_executor(self._thread, self._write_sync, fn)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                await future
            raise

    def _write_connection(self) -> tuple[Connection, sqlite3.Connection]:
        """The one write connection (opened again if it was closed or invalidated) and its driver
        connection, with the driver's own busy timeout at 0 (`_write_sync`)."""
        conn = self._conn
        if conn is None or conn.closed or conn.invalidated:
            conn = self._conn = self.engine.connect().execution_options(sqlite_begin="IMMEDIATE")
            self._busy_off = False
        driver = driver_of(conn)
        if not self._busy_off:
            on_driver(conn, "PRAGMA busy_timeout=0", driver.execute, "PRAGMA busy_timeout=0")
            self._busy_off = True
        return conn, driver

    def _write_begun(
        self,
        conn: Connection,
        driver: sqlite3.Connection,
        fn: Callable[[Connection], T],
        busy_timeout_ms: int,
    ) -> T:
        """BEGIN IMMEDIATE and `fn(conn)`; on any error the transaction is rolled back and the error
        raised (and the connection's settings are checked again next time)."""
        try:
            begin_immediate(conn, driver, busy_timeout_ms)
            try:
                return fn(conn)
            except BaseException:
                _end_write(conn, driver, commit=False)
                raise
        except BaseException:
            self._busy_off = False  # the connection may have been replaced: set it again next time
            raise

    def _write_sync(self, fn: Callable[[Connection], T], busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> T:
        """One IMMEDIATE transaction on the one write connection, kept open between transactions (a
        checkout, options and close per transaction cost more than a short transaction's statements).
        Callers are serialized by `lock`. The connection's own busy timeout is 0: the transaction
        waits up to `busy_timeout_ms` for another process's lock here, at its BEGIN (the only statement
        that takes it), so the inline path (0) and the writer thread (30 s) share one setting.

        The transaction is begun and ended on the driver (SQLAlchemy's transaction bookkeeping cost
        about as much as a short transaction's statements); a statement `fn` runs through SQLAlchemy
        still joins it (the connection's "begin" hook finds it open) and is committed or rolled back
        with it. Driver errors are raised as SQLAlchemy's `DBAPIError` subclasses, as `conn.begin()`
        would."""
        try:
            conn, driver = self._write_connection()
            result = self._write_begun(conn, driver, fn, busy_timeout_ms)
            _end_write(conn, driver, commit=True)
        except BaseException:
            self._busy_off = False  # the connection may have been replaced: set it again next time
            raise
        return result

    def close(self) -> None:
        """Waits for the write in progress, then closes the connection."""
        self._thread.shutdown(wait=True)
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.engine.dispose()
