"""The WAL checkpointer: committed WAL pages are moved into the database file in the background, so no
commit pays for it (connections never checkpoint on commit, see `connection.py`) and the WAL file stays
short."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

#: how often the host moves committed WAL pages into the database file (`Database.run_checkpointer`)
WAL_CHECKPOINT_SECONDS = 1.0
#: how long a checkpoint's second step waits for readers still on the WAL (writers wait meanwhile)
CHECKPOINT_WAIT_MS = 50


class Checkpointer:
    """Checkpoints of the database at `path` on a connection and thread of their own; `write_lock` is
    the lock this process's writers hold (`SqliteWriter.lock`)."""

    def __init__(self, path: str, write_lock: asyncio.Lock) -> None:
        self.path = path
        self.write_lock = write_lock
        self._conn: sqlite3.Connection | None = None
        self._conn_lock = threading.Lock()  # `close` closes the connection under the same lock

    def _checkpoint_sync(self, mode: str = "PASSIVE") -> tuple[int, int, int]:
        with self._conn_lock:
            if self._conn is None:
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                conn.execute(f"PRAGMA busy_timeout={CHECKPOINT_WAIT_MS}")
                self._conn = conn
            # fetchall: a statement left unfinished would hold a read lock and keep the WAL from restarting
            busy, frames, done = self._conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()[0]
            return int(busy), int(frames), int(done)

    async def checkpoint(self) -> tuple[int, int, int]:
        """A checkpoint in two steps: the bulk of the WAL (PASSIVE) while writes go on, then, holding
        this process's write lock, the frames committed meanwhile (RESTART: it also waits, up to
        `CHECKPOINT_WAIT_MS`, for readers still on the WAL). After the second step the whole WAL is in
        the database file and no reader uses it, so the next write starts the WAL file from its
        beginning again. (Without it, under steady writes some commit always landed during the
        checkpoint and the WAL file grew without end.) Writers wait only for the second, short step.
        Returns `(busy, WAL frames, frames checkpointed)` of the second step."""
        await asyncio.to_thread(self._checkpoint_sync)
        async with self.write_lock:
            return await asyncio.to_thread(self._checkpoint_sync, "RESTART")

    def close(self) -> None:
        with self._conn_lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
