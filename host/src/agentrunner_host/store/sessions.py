"""Run sessions on the database (`ports.SessionRegistry`), so any replica can authorize any run.

A session is registered in its run's start transaction (`register_sync`) and revoked in its finish
transaction (`revoke_sync`); `SqlSessionRegistry` runs the same statements in transactions of their own.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.engine import Connection

from agentrunner_host.ports import AuthorizationSnapshot, RunSession, hash_token, utcnow
from agentrunner_host.store.common import insert_for, rowcount
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import RunSessionRow, table_of
from agentrunner_host.store.sqlite.compiled import fast_execute

_SESSIONS = table_of(RunSessionRow)
_UPSERT_KEYS = ("token_hash", "runner_id", "expires_at", "snapshot", "revoked")


@functools.cache
def _statements(dialect: str) -> dict[str, Any]:
    insert = insert_for(dialect)
    upsert = insert(_SESSIONS)
    return {
        "register": upsert.on_conflict_do_update(
            index_elements=["run_id"], set_={k: upsert.excluded[k] for k in _UPSERT_KEYS}
        ),
        "revoke": update(_SESSIONS).where(_SESSIONS.c.run_id == bindparam("b_run")).values(revoked=True),
    }


def session_params(session: RunSession) -> dict[str, Any]:
    return {
        "run_id": session.run_id,
        "token_hash": session.token_hash,
        "runner_id": session.runner_id,
        "expires_at": session.expires_at,
        "snapshot": session.snapshot.to_json(),
        "revoked": session.revoked,
        "created_at": utcnow(),
    }


def register_stmt(dialect: str) -> Any:
    """The upsert that registers (or re-registers) a run session; execute with `session_params`."""
    return _statements(dialect)["register"]


def register_sync(conn: Connection, session: RunSession) -> None:
    fast_execute(conn, register_stmt(conn.dialect.name), session_params(session))


def revoke_sync(conn: Connection, run_id: str) -> None:
    """`unregister` in a caller's sync transaction: the token is dead from its commit on."""
    fast_execute(conn, _statements(conn.dialect.name)["revoke"], {"b_run": run_id})


class SqlSessionRegistry:
    """Only the token's sha256 is stored; the frozen snapshot travels as JSON."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def register(self, session: RunSession) -> None:
        await self.db.run_write(lambda conn: register_sync(conn, session))

    async def lookup(self, token: str) -> RunSession | None:
        if not token:
            return None
        async with self.db.read() as db_session:
            row = await db_session.scalar(
                select(RunSessionRow).where(RunSessionRow.token_hash == hash_token(token))
            )
        if row is None or row.revoked or row.expires_at <= utcnow():
            return None
        return RunSession(
            run_id=row.run_id,
            token_hash=row.token_hash,
            runner_id=row.runner_id,
            expires_at=row.expires_at,
            snapshot=AuthorizationSnapshot.from_json(row.snapshot),
            revoked=row.revoked,
        )

    async def unregister(self, run_id: str) -> None:
        await self.db.run_write(lambda conn: revoke_sync(conn, run_id))

    async def purge(self, older_than: dt.timedelta = dt.timedelta(days=1)) -> int:
        """Deletes sessions expired (or revoked) for longer than `older_than`."""
        cutoff = utcnow() - older_than
        async with self.db.write() as db_session:
            result = await db_session.execute(delete(RunSessionRow).where(RunSessionRow.expires_at < cutoff))
        return rowcount(result)
