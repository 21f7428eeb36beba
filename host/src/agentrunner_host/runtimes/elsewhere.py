"""Runtimes connected to other host replicas, as this replica's placement sees them (issue 36 item 3).

Each replica records the runtimes connected to it in the shared database (`store/runtimes.py`: status,
labels, runner ids, the free slots of the last heartbeat, the replica holding the connection). A run that
no runtime or endpoint of this replica can take now goes to a replica whose runtime can
(`run/forwarding.py`); `replicas_serving` names those replicas, the most free slots first. A row counts
only while its replica holds a live lease (a lost replica's runtimes are never chosen); rows whose
heartbeats are not recent come last rather than not at all (heartbeats reach the database in batches, and
a loaded replica writes them late): the replica itself refuses a run its runtime cannot take, and the
next one is tried.
"""

from __future__ import annotations

from collections.abc import Collection

from agentrunner_host.ports import utcnow
from agentrunner_host.store.runtimes import ONLINE, RuntimeStore


def matches(labels: dict[str, str], selector: dict[str, str]) -> bool:
    """Whether a runtime's labels carry every label of an agent's `runtime_selector`."""
    return all(labels.get(k) == v for k, v in selector.items())


async def replicas_serving(
    store: RuntimeStore,
    instance_id: str,
    runner_id: str,
    selector: dict[str, str],
    live: Collection[str],
    offline_after: float,
) -> list[str]:
    """The other live replicas holding an accepting runtime that serves `runner_id` with the selector's
    labels: those with fresh heartbeats first, each group the most free slots first."""
    now = utcnow()
    free: dict[str, tuple[bool, int]] = {}
    for row in await store.list_runtimes():
        replica = row.host_instance_id
        if replica == instance_id or replica not in live or row.status != ONLINE or row.drained:
            continue
        if runner_id not in (row.runner_ids or []) or not matches(dict(row.labels or {}), selector):
            continue
        # (heartbeats are written in batches: a row is fresh until twice the offline threshold)
        fresh = row.heartbeat_at is not None and (now - row.heartbeat_at).total_seconds() <= 2 * offline_after
        free[replica] = max(free.get(replica, (False, -1)), (fresh, row.free_slots))
    return sorted(free, key=lambda replica: (not free[replica][0], -free[replica][1], replica))
