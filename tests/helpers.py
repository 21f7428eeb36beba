"""Helpers shared by several suites."""

from __future__ import annotations

from sqlalchemy import select

from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import EventLogRow


async def audit_outcomes(db: Database, run_id: str, method: str) -> list[str]:
    """Outcomes of the proxy calls of `run_id` to `method`, from the host's event log (audit records)."""
    async with db.read() as s:
        rows = (
            await s.scalars(
                select(EventLogRow)
                .where(
                    EventLogRow.kind == "audit",
                    EventLogRow.run_id == run_id,
                    EventLogRow.event_type == method,
                )
                .order_by(EventLogRow.seq)
            )
        ).all()
    return [str(r.data.get("outcome", "")) for r in rows]
