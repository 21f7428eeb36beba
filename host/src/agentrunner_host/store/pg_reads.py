"""PostgreSQL hot reads on psycopg's own connection pool (`Database.driver_rows`).

A history page is one indexed select; checking a connection out of SQLAlchemy's async pool and back
(`AsyncEngine.connect` + `get_raw_connection`, a greenlet hop each way) cost more than the query's
execution on the server. `psycopg_pool` hands out the same autocommit driver connections without that
layer. Only reads whose rows the caller converts itself go here; everything else keeps SQLAlchemy.

The pool is opened on first use, in the running event loop (its workers are tasks of that loop): a
`Database` used from another loop later (tests) gets a pool of its own there.
"""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.engine import URL, Dialect

#: how long a read waits for a connection when all are busy or the server is unreachable, before it
#: fails as a retryable store error (SQLAlchemy's pool would raise at once on a refused connect)
CHECKOUT_TIMEOUT_S = 5.0


class HotReads:
    """Autocommit driver connections for reads that bypass SQLAlchemy's result layer."""

    def __init__(self, url: URL, dialect: Dialect, max_size: int) -> None:
        _, kwargs = dialect.create_connect_args(url)
        self._kwargs: dict[str, Any] = {**kwargs, "autocommit": True}
        self._max_size = max_size
        self._pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _open(self) -> AsyncConnectionPool[AsyncConnection[Any]]:
        loop = asyncio.get_running_loop()
        pool = self._pool
        if pool is not None and self._loop is loop:
            return pool
        pool = AsyncConnectionPool(
            kwargs=self._kwargs,
            min_size=1,
            max_size=self._max_size,
            open=False,
            timeout=CHECKOUT_TIMEOUT_S,
            name="agentrunner-reads",
        )
        await pool.open(wait=False)
        if self._pool is not None and self._loop is loop:  # another task opened one meanwhile
            await pool.close()
            return self._pool
        self._pool, self._loop = pool, loop
        return pool

    async def rows(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The statement's rows as psycopg returns them (tuples, no type processing beyond psycopg's)."""
        pool = self._pool if self._loop is asyncio.get_running_loop() else None
        if pool is None:
            pool = await self._open()
        async with pool.connection() as conn:
            cursor = await conn.execute(sql, params)
            return await cursor.fetchall()

    async def close(self) -> None:
        pool, self._pool, self._loop = self._pool, None, None
        if pool is not None:
            try:
                await pool.close(timeout=1.0)
            except RuntimeError:  # opened in another (closed) loop: its connections go with it
                pass
