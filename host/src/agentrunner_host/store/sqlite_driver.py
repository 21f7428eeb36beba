"""aiosqlite connections that finalize their statements before they close.

When a task is cancelled while one of its statements is in flight, SQLAlchemy invalidates the connection
and closes it. pysqlite's `close()` uses `sqlite3_close_v2`: while a cursor object still holds a stepped
statement (an `INSERT … RETURNING` whose rows were never fetched, a half-read `SELECT`), the connection
only becomes a "zombie" that keeps its transaction and its locks until that cursor is garbage-collected.
A cancelled task's exception keeps its frames, and with them the cursor, alive for as long as anything
holds the exception, so the next writer would wait out the whole busy timeout on a lock nobody owns.
Closing every cursor of the connection on its worker thread, right before the connection itself closes,
ends the statements, rolls the transaction back and releases the locks at once.
"""

from __future__ import annotations

import contextlib
import sqlite3
import weakref
from collections.abc import Callable
from typing import Any

import aiosqlite


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
