"""Run sessions on the database (`ports.SessionRegistry`), so any replica can authorize any run."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, select, update

from agentrunner_host.ports import AuthorizationSnapshot, RunSession, hash_token, utcnow
from agentrunner_host.store.common import dialect_insert
from agentrunner_host.store.db import Database
from agentrunner_host.store.models import RunSessionRow


class SqlSessionRegistry:
    """Only the token's sha256 is stored; the frozen snapshot travels as JSON."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def register(self, session: RunSession) -> None:
        values = {
            "run_id": session.run_id,
            "token_hash": session.token_hash,
            "runner_id": session.runner_id,
            "expires_at": session.expires_at,
            "snapshot": session.snapshot.to_json(),
            "revoked": session.revoked,
            "created_at": utcnow(),
        }
        async with self.db.write() as db_session:
            insert = dialect_insert(db_session)
            stmt = insert(RunSessionRow).values(**values)
            stmt = stmt.on_conflict_do_update(
                index_elements=["run_id"],
                set_={k: stmt.excluded[k] for k in values if k not in {"run_id", "created_at"}},
            )
            await db_session.execute(stmt)

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
        async with self.db.write() as db_session:
            await db_session.execute(
                update(RunSessionRow).where(RunSessionRow.run_id == run_id).values(revoked=True)
            )

    async def purge(self, older_than: dt.timedelta = dt.timedelta(days=1)) -> int:
        """Deletes sessions expired (or revoked) for longer than `older_than`."""
        cutoff = utcnow() - older_than
        async with self.db.write() as db_session:
            result = await db_session.execute(delete(RunSessionRow).where(RunSessionRow.expires_at < cutoff))
        return int(result.rowcount or 0)  # type: ignore[attr-defined]
