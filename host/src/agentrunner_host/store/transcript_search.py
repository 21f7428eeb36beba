"""Transcript search: SQLite FTS5 (bm25) or PostgreSQL full-text (`to_tsvector('simple', …)`, ts_rank).

On SQLite the full-text index is written in batches rather than by a trigger per row (a new index
segment per committed insert was a third of a run start's transaction): `index_pending` runs before
every search, so searches see every committed row, and the host's indexer loop (`run_indexer`) keeps
the backlog short.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, func, literal_column, select, text
from sqlalchemy.engine import Connection

from agentrunner_host.store.db import Database, repeat, when_written
from agentrunner_host.store.schema import TranscriptRow

_WORD = re.compile(r"\w+", re.UNICODE)

#: SQLite: indexes the transcript rows the full-text index does not hold yet, up to the high-water mark
#: in `transcript_fts_state` (migration 0005; kept identical there)
INDEX_PENDING_SQLITE = (
    "INSERT INTO transcript_fts(rowid, content) SELECT id, content FROM transcript_items "
    "WHERE id > (SELECT indexed_through FROM transcript_fts_state WHERE id = 1) ORDER BY id",
    "UPDATE transcript_fts_state SET indexed_through = "
    "(SELECT COALESCE(MAX(id), indexed_through) FROM transcript_items) WHERE id = 1",
)
_FTS_PENDING = text(
    "SELECT (SELECT MAX(id) FROM transcript_items) > "
    "(SELECT indexed_through FROM transcript_fts_state WHERE id = 1)"
)
#: how often the host's indexer (`Transcript.run_indexer`) looks for rows to index (seconds)
FTS_INDEX_INTERVAL = 1.0


def index_pending_sync(conn: Connection) -> None:
    """`INDEX_PENDING_SQLITE` in a caller's sync write transaction."""
    driver = conn.connection.dbapi_connection
    assert driver is not None
    for statement in INDEX_PENDING_SQLITE:
        driver.execute(statement)


class TranscriptSearch:
    """Full-text search over the transcript, and the SQLite index that serves it."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def index_pending(self) -> bool:
        """SQLite: brings the full-text index up to date with the committed rows (one write transaction,
        only when rows are pending). True when it indexed something; always False on PostgreSQL."""
        if not self.db.is_sqlite:
            return False
        async with self.db.read_connection() as conn:
            if not await conn.scalar(_FTS_PENDING):
                return False
        await self.db.run_write(index_pending_sync)
        return True

    async def run_indexer(self, interval: float = FTS_INDEX_INTERVAL) -> None:
        """`index_pending` every `interval` seconds until cancelled (SQLite; returns at once otherwise),
        skipping rounds with nothing committed since the last (`db.when_written`)."""
        if self.db.is_sqlite:

            async def index() -> bool:
                await self.index_pending()
                return True  # the index holds every row committed before the round began

            await repeat(when_written(self.db, index), interval, "transcript indexing")

    async def search(
        self,
        *,
        conversation_id: str,
        query: str,
        thread_id: str | None = None,
        roles: Sequence[str] = (),
        top_k: int = 10,
    ) -> list[TranscriptRow]:
        """Full-text search: SQLite FTS5 (bm25) or PostgreSQL `to_tsvector('simple', …)` (ts_rank)."""
        words = _WORD.findall(query)
        if not words:
            return []
        await self.index_pending()
        async with self.db.read() as s:
            if self.db.is_sqlite:
                match = " ".join('"' + w.replace('"', '""') + '"' for w in words)
                sql = (
                    "SELECT t.id FROM transcript_fts f JOIN transcript_items t ON t.id = f.rowid "
                    "WHERE transcript_fts MATCH :match AND t.conversation_id = :conversation"
                )
                params: dict[str, Any] = {"match": match, "conversation": conversation_id}
                if thread_id is not None:
                    sql += " AND t.thread_id = :thread"
                    params["thread"] = thread_id
                fts = text(sql + (" AND t.role IN :roles" if roles else "") + " ORDER BY f.rank LIMIT :k")
                if roles:
                    fts = fts.bindparams(bindparam("roles", expanding=True))
                    params["roles"] = list(roles)
                params["k"] = top_k
                ids = [r[0] for r in (await s.execute(fts, params)).all()]
                if not ids:
                    return []
                found = {
                    r.id: r for r in (await s.scalars(select(TranscriptRow).where(TranscriptRow.id.in_(ids))))
                }
                return [found[i] for i in ids if i in found]
            vector = func.to_tsvector(literal_column("'simple'"), TranscriptRow.content)
            tsquery = func.plainto_tsquery(literal_column("'simple'"), " ".join(words))
            stmt = select(TranscriptRow).where(
                TranscriptRow.conversation_id == conversation_id, vector.op("@@")(tsquery)
            )
            if thread_id is not None:
                stmt = stmt.where(TranscriptRow.thread_id == thread_id)
            if roles:
                stmt = stmt.where(TranscriptRow.role.in_(list(roles)))
            stmt = stmt.order_by(func.ts_rank(vector, tsquery).desc(), TranscriptRow.seq.desc()).limit(top_k)
            return list((await s.scalars(stmt)).all())
