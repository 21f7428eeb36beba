"""The runtime registry in the database: runtimes, their connections, claimed runs and the audit trail
(`runtimes`, `runtime_connections`, `runtime_claims`, `runtime_events`). This module is the only
writer of those tables.

Connects, disconnects and drains are written at once (they are rare and a caller waits on them).
Heartbeats, claims and claim ends are on the run path or frequent: they are queued and written in one
transaction every `FLUSH_SECONDS` (and on `close`), so a run never waits for the registry's writes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession

from agentrunner_host.ports import utcnow
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import table_of
from agentrunner_host.store.schema.facts import (
    RuntimeClaimRow,
    RuntimeConnectionRow,
    RuntimeEventRow,
    RuntimeRow,
)

log = structlog.get_logger("agentrunner_host.store.runtimes")

#: how often queued heartbeats, claims and claim ends are written
FLUSH_SECONDS = 0.2

ONLINE, DRAINING, OFFLINE = "online", "draining", "offline"

Write = Callable[[AsyncSession], Awaitable[None]]


def host_lost_sync(conn: Connection, host_instance_id: str, now: dt.datetime) -> int:
    """In the fleet's takeover of a lost replica (`FactStores.take_over`): the runtimes it held are
    offline at once, with their last heartbeat as it was (`runtimes list` never shows a lost replica's
    runtime as live, and the runtime may connect to another replica right away)."""
    reason = f"host replica {host_instance_id!r} was lost"
    runtimes, connections = table_of(RuntimeRow), table_of(RuntimeConnectionRow)
    rows = conn.execute(
        update(runtimes)
        .where(runtimes.c.host_instance_id == host_instance_id, runtimes.c.status != OFFLINE)
        .values(status=OFFLINE, status_reason=reason, disconnected_at=now, free_slots=0, updated_at=now)
        .returning(runtimes.c.runtime_id, runtimes.c.connection_id)
    ).all()
    for runtime_id, connection_id in rows:
        conn.execute(
            update(connections)
            .where(connections.c.connection_id == connection_id, connections.c.ended_at.is_(None))
            .values(ended_at=now, end_reason=reason)
        )
        conn.execute(
            insert(table_of(RuntimeEventRow)).values(
                runtime_id=runtime_id, kind="offline", run_id="", client_id="", reason=reason, peer="",
                created_at=now,
            )
        )  # fmt: skip
    return len(rows)


@dataclasses.dataclass(slots=True)
class ConnectedRuntime:
    """What a runtime announced in `hello`, and the connection the host accepted."""

    runtime_id: str
    client_id: str
    connection_id: str
    instance_id: str
    host_instance_id: str
    peer: str
    machine: dict[str, Any]
    sdk: dict[str, Any]
    labels: dict[str, str]
    slots: int
    runner_ids: list[str]
    capabilities: list[dict[str, Any]]
    heartbeat_interval_ms: int
    connected_at: dt.datetime


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


class RuntimeStore:
    """Writes and reads of the runtime tables (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._queue: list[Write] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- writes at once --------------------------------------------------------------------------------
    async def connected(self, info: ConnectedRuntime, *, superseded: str = "") -> bool:
        """Stores the runtime and its new connection, audits `connected` (and `superseded` for the
        connection it replaces); returns whether an operator has drained the runtime."""
        now = utcnow()
        async with self.db.write() as session:
            if superseded:
                await self._end_connection(session, superseded, "superseded by a new connection", now)
            row = await session.get(RuntimeRow, info.runtime_id)
            if row is None:
                row = RuntimeRow(runtime_id=info.runtime_id, drained=False, drain_reason="")
                session.add(row)
            row.client_id, row.connection_id, row.instance_id = (
                info.client_id,
                info.connection_id,
                info.instance_id,
            )
            row.host_instance_id, row.peer = info.host_instance_id, info.peer
            row.machine, row.sdk, row.labels = info.machine, info.sdk, dict(info.labels)
            row.slots = row.free_slots = info.slots
            row.runner_ids, row.capabilities = list(info.runner_ids), list(info.capabilities)
            row.heartbeat_interval_ms = info.heartbeat_interval_ms
            row.status = DRAINING if row.drained else ONLINE
            row.status_reason = ""
            row.connected_at = row.heartbeat_at = info.connected_at
            row.disconnected_at = None
            row.updated_at = now
            session.add(
                RuntimeConnectionRow(
                    connection_id=info.connection_id,
                    runtime_id=info.runtime_id,
                    instance_id=info.instance_id,
                    client_id=info.client_id,
                    host_instance_id=info.host_instance_id,
                    peer=info.peer,
                    connected_at=info.connected_at,
                    heartbeat_at=info.connected_at,
                    heartbeats=0,
                    end_reason="",
                )
            )
            if superseded:
                session.add(
                    self._event(info.runtime_id, "superseded", now, reason=f"connection {superseded}")
                )
            session.add(
                self._event(info.runtime_id, "connected", now, client_id=info.client_id, peer=info.peer)
            )
            return bool(row.drained)

    async def disconnected(
        self, runtime_id: str, connection_id: str, kind: str, reason: str, duration: float
    ) -> None:
        """The connection ended (`kind`: disconnected or offline): the runtime is offline unless another
        connection of it took over meanwhile."""
        now = utcnow()
        async with self.db.write() as session:
            await self._end_connection(session, connection_id, reason, now)
            await session.execute(
                update(RuntimeRow)
                .where(RuntimeRow.runtime_id == runtime_id, RuntimeRow.connection_id == connection_id)
                .values(
                    status=OFFLINE, status_reason=reason, disconnected_at=now, free_slots=0, updated_at=now
                )
            )
            session.add(self._event(runtime_id, kind, now, reason=reason, duration_ms=_ms(duration)))

    async def _end_connection(
        self, session: AsyncSession, connection_id: str, reason: str, now: dt.datetime
    ) -> None:
        await session.execute(
            update(RuntimeConnectionRow)
            .where(
                RuntimeConnectionRow.connection_id == connection_id, RuntimeConnectionRow.ended_at.is_(None)
            )
            .values(ended_at=now, end_reason=reason)
        )

    async def set_drained(self, runtime_id: str, drained: bool, reason: str) -> RuntimeRow | None:
        """An operator drains (or resumes) a runtime; None for an unknown id."""
        now = utcnow()
        async with self.db.write() as session:
            row = await session.get(RuntimeRow, runtime_id)
            if row is None:
                return None
            row.drained, row.drain_reason, row.updated_at = drained, reason if drained else "", now
            if row.status != OFFLINE:
                row.status = DRAINING if drained else ONLINE
            session.add(self._event(runtime_id, "drained" if drained else "resumed", now, reason=reason))
            await session.flush()
            return row

    async def refused(self, runtime_id: str, client_id: str, peer: str, reason: str) -> None:
        """Audits a refused `Connect` (never raises: a refusal stays a refusal)."""
        try:
            async with self.db.write() as session:
                session.add(
                    self._event(
                        runtime_id, "refused", utcnow(), client_id=client_id, peer=peer, reason=reason
                    )
                )
        except Exception as exc:
            log.error("runtime.audit_failed", kind="refused", error=type(exc).__name__)

    async def mark_host_gone(self, host_instance_id: str) -> int:
        """At start-up: runtimes this host instance held before it stopped are offline."""
        now = utcnow()
        async with self.db.write() as session:
            rows = (
                await session.scalars(
                    select(RuntimeRow).where(
                        RuntimeRow.host_instance_id == host_instance_id, RuntimeRow.status != OFFLINE
                    )
                )
            ).all()
            for row in rows:
                row.status, row.status_reason, row.disconnected_at, row.updated_at = (
                    OFFLINE,
                    "the host restarted",
                    now,
                    now,
                )
                await self._end_connection(session, row.connection_id, "the host restarted", now)
                session.add(self._event(row.runtime_id, "disconnected", now, reason="the host restarted"))
            return len(rows)

    @staticmethod
    def _event(runtime_id: str, kind: str, now: dt.datetime, **fields: Any) -> RuntimeEventRow:
        return RuntimeEventRow(
            runtime_id=runtime_id,
            kind=kind,
            run_id=fields.get("run_id", ""),
            client_id=fields.get("client_id", ""),
            reason=fields.get("reason", ""),
            duration_ms=fields.get("duration_ms"),
            peer=fields.get("peer", ""),
            created_at=now,
        )

    # -- queued writes ---------------------------------------------------------------------------------
    def heartbeat(self, runtime_id: str, connection_id: str, free_slots: int) -> None:
        now = utcnow()

        async def write(session: AsyncSession) -> None:
            await session.execute(
                update(RuntimeRow)
                .where(RuntimeRow.runtime_id == runtime_id, RuntimeRow.connection_id == connection_id)
                .values(heartbeat_at=now, free_slots=free_slots, updated_at=now)
            )
            await session.execute(
                update(RuntimeConnectionRow)
                .where(RuntimeConnectionRow.connection_id == connection_id)
                .values(heartbeat_at=now, heartbeats=RuntimeConnectionRow.heartbeats + 1)
            )

        self._enqueue(write)

    def claimed(self, run_id: str, runtime_id: str, connection_id: str, runner_id: str) -> None:
        now = utcnow()

        async def write(session: AsyncSession) -> None:
            session.add(
                RuntimeClaimRow(
                    run_id=run_id,
                    runtime_id=runtime_id,
                    connection_id=connection_id,
                    runner_id=runner_id,
                    claimed_at=now,
                    outcome="",
                )
            )
            session.add(self._event(runtime_id, "run_claimed", now, run_id=run_id))

        self._enqueue(write)

    def claim_ended(self, run_id: str, runtime_id: str, outcome: str, duration: float) -> None:
        now = utcnow()

        async def write(session: AsyncSession) -> None:
            await session.flush()  # (the claim may be in this very batch)
            await session.execute(
                update(RuntimeClaimRow)
                .where(RuntimeClaimRow.run_id == run_id)
                .values(ended_at=now, outcome=outcome)
            )
            session.add(
                self._event(
                    runtime_id, "run_ended", now, run_id=run_id, reason=outcome, duration_ms=_ms(duration)
                )
            )

        self._enqueue(write)

    def _enqueue(self, write: Write) -> None:
        self._queue.append(write)
        self._wake.set()

    async def flush(self) -> None:
        """Writes what is queued, in one transaction (a failed batch is logged and dropped: it is a
        record of what happened, never a decision)."""
        batch, self._queue = self._queue, []
        self._wake.clear()
        if not batch:
            return
        try:
            async with self.db.write() as session:
                for write in batch:
                    await write(session)
        except Exception as exc:
            log.error("runtime.store_failed", writes=len(batch), error=repr(exc))

    async def run_flusher(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run_flusher(), name="runtime-store-flusher")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.flush()

    # -- reads -----------------------------------------------------------------------------------------
    async def list_runtimes(self, *, include_offline: bool = False) -> list[RuntimeRow]:
        async with self.db.read() as session:
            stmt = select(RuntimeRow)
            if not include_offline:
                stmt = stmt.where(RuntimeRow.status != OFFLINE)
            return list((await session.scalars(stmt.order_by(RuntimeRow.runtime_id))).all())

    async def get(self, runtime_id: str) -> RuntimeRow | None:
        async with self.db.read() as session:
            return await session.get(RuntimeRow, runtime_id)

    async def events(self, runtime_id: str, limit: int = 50) -> list[RuntimeEventRow]:
        async with self.db.read() as session:
            stmt = (
                select(RuntimeEventRow)
                .where(RuntimeEventRow.runtime_id == runtime_id)
                .order_by(RuntimeEventRow.id.desc())
                .limit(limit)
            )
            return list((await session.scalars(stmt)).all())

    async def claims(self, runtime_id: str, limit: int = 20) -> list[RuntimeClaimRow]:
        async with self.db.read() as session:
            stmt = (
                select(RuntimeClaimRow)
                .where(RuntimeClaimRow.runtime_id == runtime_id)
                .order_by(RuntimeClaimRow.claimed_at.desc())
                .limit(limit)
            )
            return list((await session.scalars(stmt)).all())

    async def runtime_of(self, run_id: str) -> str:
        """The runtime that claimed the run ('' for a run of a dialed endpoint)."""
        async with self.db.read() as session:
            value = await session.scalar(
                select(RuntimeClaimRow.runtime_id).where(RuntimeClaimRow.run_id == run_id)
            )
            return value or ""

    async def drained(self, runtime_ids: list[str]) -> dict[str, bool]:
        """The operator's drain of these runtimes (another replica may have changed it)."""
        if not runtime_ids:
            return {}
        async with self.db.read() as session:
            rows = await session.execute(
                select(RuntimeRow.runtime_id, RuntimeRow.drained).where(
                    RuntimeRow.runtime_id.in_(runtime_ids)
                )
            )
            return {runtime_id: bool(drained) for runtime_id, drained in rows.all()}
