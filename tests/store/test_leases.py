"""Instance leases on the database: one live holder per instance id; an expired lease, or one whose
process on this machine is gone, is taken over; a lease released on stop is free at once."""

from __future__ import annotations

import datetime as dt
import pathlib

import pytest
from sqlalchemy import update

from agentrunner_host.store.db import Database
from agentrunner_host.store.leases import InstanceLease, InstanceLeaseError
from agentrunner_host.store.migrate import upgrade
from agentrunner_host.store.schema import HostLeaseRow

pytestmark = pytest.mark.asyncio


async def _set(db: Database, **values: object) -> None:
    async with db.write() as session:
        await session.execute(update(HostLeaseRow).values(**values))


async def test_one_live_holder_per_instance_id(tmp_path: pathlib.Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'h.db'}"
    upgrade(url)
    db = Database(url)
    try:
        first = InstanceLease(db, "host-a")
        await first.acquire()
        other = InstanceLease(db, "host-a")
        other.me = type(other.me)(other.me.holder, "another-machine", 4242)  # a host elsewhere
        await _set(db, hostname="first-machine", pid=1)  # as if the first ran on another machine
        with pytest.raises(InstanceLeaseError, match="instance_id 'host-a' is held by a live host"):
            await other.acquire()
        assert await InstanceLease(db, "host-b").acquire() is None  # type: ignore[func-returns-value]  # another id is free

        await _set(db, expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1))
        await other.acquire()  # expired: taken over
        assert not await first.renew()  # the first host learns it lost the lease
        assert await other.renew()

        await _set(db, hostname=other.me.hostname, pid=999_999_999)  # a process of this machine, gone
        local = InstanceLease(db, "host-a")
        local.me = type(local.me)(local.me.holder, "another-machine", 77)
        await local.acquire()
        await local.release()
        late = InstanceLease(db, "host-a")
        late.me = type(late.me)(late.me.holder, "third-machine", 5)
        await late.acquire()  # released: free at once
    finally:
        await db.dispose()
