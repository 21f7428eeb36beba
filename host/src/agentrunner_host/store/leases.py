"""Instance leases: at most one live host per `instance_id` on a database.

A host's `instance_id` decides which open runs it interrupts at start-up (the runs it owned before a
crash). Two live hosts with one id would interrupt each other's runs, so a host takes the id's lease
before it recovers anything, renews it with a heartbeat, and releases it on stop. A lease held by a
live host makes the next host refuse to start; an expired lease (its host died without releasing it)
or one left by a process of this machine that no longer exists is taken over at once, so a host
restarted after a crash does not wait for the expiry.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable

import structlog
from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from agentrunner_host.ports import utcnow
from agentrunner_host.store.common import rowcount
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import HostLeaseRow, table_of

log = structlog.get_logger("agentrunner_host.leases")

#: a lease not renewed for this long is free (`fleet.lease_seconds`: its replica is lost)
LEASE_SECONDS = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class Lease:
    """One replica's lease as another replica sees it."""

    instance_id: str
    holder: str
    expires_at: dt.datetime


async def leases(db: Database) -> list[Lease]:
    """Every lease on the database: the fleet's replicas, live or lost."""
    async with db.read() as session:
        rows = (await session.execute(select(HostLeaseRow.instance_id, HostLeaseRow.holder,
                                              HostLeaseRow.expires_at))).all()  # fmt: skip
    return [Lease(str(i), str(h), e) for i, h, e in rows]


def expire_sync(conn: Connection, lease: Lease, now: dt.datetime) -> bool:
    """Ends `lease` if it is still the one seen and has expired (a takeover's first statement: of
    replicas racing for one lost lease, exactly one deletes the row; the others find it gone)."""
    table = table_of(HostLeaseRow)
    deleted = conn.execute(
        delete(table)
        .where(
            table.c.instance_id == lease.instance_id,
            table.c.holder == lease.holder,
            table.c.expires_at < now,
        )
        .returning(table.c.instance_id)
    ).first()
    return deleted is not None


class InstanceLeaseError(RuntimeError):
    """Another live host holds this `instance_id`; the message says which and what to do."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Holder:
    holder: str
    hostname: str
    pid: int


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class InstanceLease:
    """The lease of one host process on `instance_id` (`acquire`, `run_heartbeat`, `release`)."""

    def __init__(self, db: Database, instance_id: str, *, seconds: float = LEASE_SECONDS) -> None:
        self.db = db
        self.instance_id = instance_id
        self.seconds = seconds
        self.me = _Holder(secrets.token_hex(8), socket.gethostname(), os.getpid())
        self.held = False
        #: monotonic time since which every renewal succeeded (None: the last one failed); a replica
        #: takes over others' lost leases only after renewing its own for a whole lease period, so
        #: after a database outage every live replica has renewed before anyone judges the others
        self.healthy_since: float | None = None

    def _stale(self, row: HostLeaseRow, now: dt.datetime) -> bool:
        if row.holder == self.me.holder or row.expires_at <= now:
            return True
        # a process of this machine that is gone (killed, crashed) cannot renew it: no need to wait
        return row.hostname == self.me.hostname and (row.pid == self.me.pid or not _pid_alive(row.pid))

    async def acquire(self) -> None:
        """Takes the lease or raises `InstanceLeaseError` naming the live holder."""
        now = utcnow()
        expires = now + dt.timedelta(seconds=self.seconds)
        async with self.db.write() as session:
            stmt = select(HostLeaseRow).where(HostLeaseRow.instance_id == self.instance_id)
            if not self.db.is_sqlite:
                stmt = stmt.with_for_update()
            row = await session.scalar(stmt)
            if row is not None and not self._stale(row, now):
                ago = (now - row.heartbeat_at).total_seconds()
                raise InstanceLeaseError(
                    f"instance_id {self.instance_id!r} is held by a live host (pid {row.pid} on "
                    f"{row.hostname}, last heartbeat {ago:.0f} s ago): give this host its own instance_id "
                    "(`instance_id` in the config or AGENTRUNNER_INSTANCE_ID), or stop the other host"
                )
            if row is None:
                session.add(HostLeaseRow(instance_id=self.instance_id, holder=self.me.holder,
                                         hostname=self.me.hostname, pid=self.me.pid, started_at=now,
                                         heartbeat_at=now, expires_at=expires))  # fmt: skip
            else:
                if row.expires_at > now and row.holder != self.me.holder:
                    log.warning("host.lease_taken_over", instance_id=self.instance_id, pid=row.pid,
                                reason="its process no longer exists")  # fmt: skip
                row.holder, row.hostname, row.pid = self.me.holder, self.me.hostname, self.me.pid
                row.started_at, row.heartbeat_at, row.expires_at = now, now, expires
        self.held = True
        self.healthy_since = time.monotonic()

    def healthy_for(self) -> float:
        """Seconds since which every renewal of this lease succeeded (0 when the last one failed)."""
        return 0.0 if self.healthy_since is None else time.monotonic() - self.healthy_since

    async def renew(self) -> bool:
        """Extends the lease; False when it was lost (expired and taken by another host)."""
        now = utcnow()
        async with self.db.write() as session:
            result = await session.execute(
                update(HostLeaseRow)
                .where(HostLeaseRow.instance_id == self.instance_id, HostLeaseRow.holder == self.me.holder)
                .values(heartbeat_at=now, expires_at=now + dt.timedelta(seconds=self.seconds))
            )
        return rowcount(result) > 0

    async def run_heartbeat(self, on_lost: Callable[[], Awaitable[None]] | None = None) -> None:
        """Renews the lease every third of its period. A lease found lost (it expired and another
        replica took it over, interrupting this replica's runs) calls `on_lost`, then is taken again."""
        interval = self.seconds / 3
        while self.held:
            await asyncio.sleep(interval)
            try:
                if await self.renew():
                    if self.healthy_since is None:
                        self.healthy_since = time.monotonic()
                    continue
                self.healthy_since = None
                log.error("host.lease_lost", instance_id=self.instance_id,
                          reason="the lease expired and another replica took over this replica's runs")  # fmt: skip
                if on_lost is not None:
                    await on_lost()
                await self.acquire()
            except Exception as exc:  # the database is away for a moment: try again next beat
                self.healthy_since = None
                log.warning("host.lease_renew_failed", instance_id=self.instance_id, error=repr(exc))

    async def release(self) -> None:
        if not self.held:
            return
        self.held = False
        async with self.db.write() as session:
            await session.execute(
                delete(HostLeaseRow).where(
                    HostLeaseRow.instance_id == self.instance_id, HostLeaseRow.holder == self.me.holder
                )
            )
