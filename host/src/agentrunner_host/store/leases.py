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

import structlog
from sqlalchemy import delete, select, update

from agentrunner_host.ports import utcnow
from agentrunner_host.store.common import rowcount
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import HostLeaseRow

log = structlog.get_logger("agentrunner_host.leases")

#: a lease not renewed for this long is free
LEASE_SECONDS = 15.0


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

    async def run_heartbeat(self) -> None:
        interval = self.seconds / 3
        while self.held:
            await asyncio.sleep(interval)
            try:
                if not await self.renew():
                    log.error("host.lease_lost", instance_id=self.instance_id,
                              reason="another host took this instance_id after the lease expired")  # fmt: skip
            except Exception as exc:  # the database is away for a moment: try again next beat
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
