"""`Fleet`: how an operation on a run reaches the replica that runs it (the run's `owner` in the
ledger), and how a replica tells every other one something (`broadcast`).

The layers above use it the same way: a run open here is served here; a run open on another live
replica is served there through `call` (the same handler, the same typed errors); a run whose replica
was lost is UNAVAILABLE (retryable) until the takeover ends it, which `call` hurries along.
"""

from __future__ import annotations

import grpc

from agentrunner.errors import RuntimeFailureError
from agentrunner_host.fleet.bus import FleetBus
from agentrunner_host.fleet.replicas import Replicas
from agentrunner_host.ports import RunRecord


def lost_replica(record: RunRecord, lease_seconds: float) -> RuntimeFailureError:
    return RuntimeFailureError(
        f"run {record.run_id!r} is open on host replica {record.owner!r}, which stopped: another replica "
        f"ends it (interrupted) within {lease_seconds:g} s of its last heartbeat; try again then",
        retryable=True,
        code=grpc.StatusCode.UNAVAILABLE,
        metadata={"runId": record.run_id, "replica": record.owner},
    )


class Fleet:
    """The bus and the live replicas, as the run path, delivery and the proxy use them."""

    def __init__(self, bus: FleetBus, replicas: Replicas) -> None:
        self.bus = bus
        self.replicas = replicas
        self.instance_id = bus.instance_id

    def elsewhere(self, record: RunRecord) -> bool:
        """Whether the run is held by another replica (it may still be open there)."""
        return bool(record.owner) and record.owner != self.instance_id

    def has_peers(self) -> bool:
        return len(self.replicas.live) > 1

    async def call(self, record: RunRecord, kind: str, body: bytes = b"") -> bytes:
        """Has the replica running `record` handle `kind` for it; its answer, or its typed error."""
        owner = record.owner
        if not self.replicas.alive(owner):
            await self.replicas.refresh()
            if not self.replicas.alive(owner):
                self.replicas.kick()
                raise lost_replica(record, self.replicas.lease.seconds)
        return await self.bus.call(owner, kind, record.run_id, body)

    async def broadcast(self, kind: str, key: str, body: bytes = b"") -> None:
        """Hands every other live replica the operation (each does it once; nobody waits)."""
        for peer in self.replicas.others():
            await self.bus.send(peer, kind, key, body)
