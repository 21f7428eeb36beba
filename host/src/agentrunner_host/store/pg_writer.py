"""PostgreSQL hot-path writes on threads of their own (`Database.run_write` on PostgreSQL).

A hot-path write (run start, delta batch, run end, a fleet mailbox row) is a sync function over a
SQLAlchemy `Connection`. Run through the async engine (`AsyncConnection.run_sync`), each of its
statements is a network round trip whose answer resumes the greenlet on the event loop: BEGIN, every
statement and COMMIT each wait for a turn of the loop. On a loaded machine (the loop shares two cores
with everything else) a turn can take tens of milliseconds, so a five-statement transaction took
hundreds, and what waited on it waited too: a delta batch's commit (the README's durability bound) and
a cancel's terminal (the fleet's cancel latency). Here the whole transaction runs on a worker thread
over psycopg's sync connection (the driver releases the GIL while it waits for the server) and the
loop is woken once, when it has committed or failed.

A caller cancelled while its write runs still waits for the outcome before the cancellation goes on
(as on SQLite's writer thread): the write is never half known to the code that cleans up.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import URL

T = TypeVar("T")


class PgWriter:
    """`threads` workers, each transaction on a connection of a sync engine sized to them."""

    def __init__(self, url: URL, threads: int, json_serializer: Callable[[Any], str]) -> None:
        self.engine: Engine = create_engine(
            url,
            pool_size=threads,
            max_overflow=0,
            pool_recycle=1800,
            json_serializer=json_serializer,
        )
        self._threads = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="pg-writer")

    def _write_sync(self, fn: Callable[[Connection], T]) -> T:
        with self.engine.begin() as conn:
            return fn(conn)

    async def run(self, fn: Callable[[Connection], T]) -> T:
        """`fn(conn)` as one transaction on a worker thread; its result or its error."""
        future = asyncio.get_running_loop().run_in_executor(self._threads, self._write_sync, fn)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not future.done():  # the write goes on: wait for its outcome, then be cancelled
                await asyncio.wait([future])
            if not future.cancelled():
                future.exception()  # (its outcome is known; a failure is not reported twice)
            raise

    def close(self) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)
        self.engine.dispose()
