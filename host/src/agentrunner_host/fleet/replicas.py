"""The fleet as one replica sees it: which replicas are live, and the takeover of lost ones.

Every replica holds a lease on its `instance_id` (`store/leases.py`), renewed every third of
`fleet.lease_seconds`. `Replicas.run` reads the leases every `sweep_seconds`: one that is still there
is a live replica; one that expired belongs to a replica that stopped without releasing it (SIGKILL, a
crash, a lost machine). Its open runs are then ended by `FactStores.take_over` in one transaction that
starts by deleting the expired lease: of several replicas seeing it at once, exactly one gets past
that statement. The runs end `interrupted` with a `host.restarted` failure naming the lost replica,
their tokens revoked, the lost replica's mailbox rows forgotten; a broadcast wake-up then ends their
followers on every replica (which would see the terminal at their next poll anyway).

A replica judges others only after renewing its own lease for a whole lease period: after a database
outage longer than the lease, every live replica renews before any of them could take another over.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from agentrunner.v1 import common_pb2, result_pb2
from agentrunner_host.fleet.bus import FleetBus
from agentrunner_host.ports import utcnow
from agentrunner_host.store.fact_stores import FactStores
from agentrunner_host.store.leases import InstanceLease, Lease, leases

log = structlog.get_logger("agentrunner_host.fleet")

#: lost replica's instance id -> the terminal result its open runs get (`run/outcomes.py` builds it)
EndingFor = Callable[[str], result_pb2.RunResult]


class Replicas:
    """Live replicas and takeovers (see the module docstring)."""

    def __init__(
        self,
        stores: FactStores,
        lease: InstanceLease,
        bus: FleetBus,
        ending_for: EndingFor,
        *,
        sweep_seconds: float = 1.0,
    ) -> None:
        self.stores = stores
        self.lease = lease
        self.bus = bus
        self.ending_for = ending_for
        self.sweep_seconds = sweep_seconds
        self.instance_id = lease.instance_id
        #: instance ids of the replicas whose leases had not expired at the last sweep (this one too)
        self.live: set[str] = {self.instance_id}
        #: how many runs this replica ended taking over lost replicas, and how many replicas it took over
        self.taken_over_runs = 0
        self.takeovers = 0
        self._kick = asyncio.Event()
        self._refreshed = 0.0

    def others(self) -> list[str]:
        """The other live replicas (as of the last sweep)."""
        return sorted(self.live - {self.instance_id})

    def alive(self, instance_id: str) -> bool:
        return instance_id in self.live

    def kick(self) -> None:
        """Sweeps now (an operation met a run whose replica looks lost)."""
        self._kick.set()

    async def refresh(self) -> list[Lease]:
        """Reads the leases; `live` becomes the replicas whose leases have not expired."""
        found = await leases(self.stores.db)
        now = utcnow()
        self.live = {lease.instance_id for lease in found if lease.expires_at >= now} | {self.instance_id}
        self._refreshed = time.monotonic()
        return [lease for lease in found if lease.expires_at < now and lease.instance_id != self.instance_id]

    async def sweep(self) -> int:
        """One round: reads the leases and takes over every expired one this replica wins; how many
        runs it ended."""
        expired = await self.refresh()
        if not expired or self.lease.healthy_for() < self.lease.seconds:
            return 0
        ended = 0
        for lease in expired:
            ending = self.ending_for(lease.instance_id)
            status = common_pb2.RUN_STATUS_INTERRUPTED
            run_ids = await self.stores.take_over(lease, ending, status)
            if run_ids is None:
                continue  # another replica took it over first
            self.takeovers += 1
            self.taken_over_runs += len(run_ids)
            ended += len(run_ids)
            log.warning("fleet.takeover", lost=lease.instance_id, runs=len(run_ids),
                        expired_seconds=round((utcnow() - lease.expires_at).total_seconds(), 2))  # fmt: skip
            for run_id in run_ids:
                with contextlib.suppress(Exception):
                    await self.bus.wake_all(run_id)
        return ended

    async def run(self) -> None:
        """`sweep` every `sweep_seconds` (sooner when kicked) until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.sweep_seconds):
                    await self._kick.wait()
            self._kick.clear()
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is away: the next round tries again
                log.warning("fleet.sweep_failed", error=repr(exc)[:200])
