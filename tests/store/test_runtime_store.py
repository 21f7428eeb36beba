"""The runtime registry's tables on SQLite and PostgreSQL (`store/runtimes.py`): a runtime's connection,
heartbeats, claims and audit trail; a superseding connection; an operator's drain kept across
reconnects; the runtimes a restarted host instance held going offline."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from agentrunner_host.ports import utcnow
from agentrunner_host.store.db import Database
from agentrunner_host.store.runtimes import DRAINING, OFFLINE, ONLINE, ConnectedRuntime, RuntimeStore

pytestmark = pytest.mark.asyncio(loop_scope="function")


@pytest_asyncio.fixture
async def store(db_url: str) -> AsyncIterator[RuntimeStore]:
    db = Database(db_url)
    try:
        yield RuntimeStore(db)
    finally:
        await db.dispose()


def connected(connection_id: str, instance: str = "i1", host: str = "host-a") -> ConnectedRuntime:
    return ConnectedRuntime(
        runtime_id="laptop",
        client_id="team-a",
        connection_id=connection_id,
        instance_id=instance,
        host_instance_id=host,
        peer="ipv4:10.0.0.5:50000",
        machine={"hostname": "laptop", "os": "linux"},
        sdk={"language": "python", "version": "0.1.0"},
        labels={"workspace": "team-a"},
        slots=4,
        runner_ids=["plugin:a/b/c"],
        capabilities=[{"name": "claude", "present": True, "version": "2.1.328"}],
        heartbeat_interval_ms=2000,
        connected_at=utcnow(),
    )


async def test_a_runtime_its_heartbeats_claims_and_audit_trail(store: RuntimeStore) -> None:
    assert await store.connected(connected("c1")) is False
    store.heartbeat("laptop", "c1", 3)
    store.claimed("run_1", "laptop", "c1", "plugin:a/b/c")
    store.claim_ended("run_1", "laptop", "run_completed", 1.25)
    await store.flush()
    row = await store.get("laptop")
    assert row is not None
    assert (row.status, row.free_slots, row.labels, row.capabilities[0]["version"]) == (
        ONLINE,
        3,
        {"workspace": "team-a"},
        "2.1.328",
    )
    assert await store.runtime_of("run_1") == "laptop" and await store.runtime_of("run_2") == ""
    (claim,) = await store.claims("laptop")
    assert (claim.run_id, claim.outcome, claim.ended_at is not None) == ("run_1", "run_completed", True)
    events = await store.events("laptop")
    assert [e.kind for e in events] == ["run_ended", "run_claimed", "connected"]
    assert events[0].duration_ms == 1250
    await store.disconnected("laptop", "c1", "offline", "no heartbeat for 6.1 s", 42.0)
    row = await store.get("laptop")
    assert row is not None and (row.status, row.status_reason) == (OFFLINE, "no heartbeat for 6.1 s")
    assert [await store.list_runtimes()] == [[]] and len(await store.list_runtimes(include_offline=True)) == 1


async def test_a_late_disconnect_of_a_superseded_connection_leaves_the_new_one_online(
    store: RuntimeStore,
) -> None:
    await store.connected(connected("c1"))
    await store.connected(connected("c2"), superseded="c1")
    await store.disconnected("laptop", "c1", "disconnected", "the connection was lost", 1.0)
    row = await store.get("laptop")
    assert row is not None and (row.status, row.connection_id) == (ONLINE, "c2")
    assert "superseded" in [e.kind for e in await store.events("laptop")]


async def test_a_drain_is_kept_across_reconnects_until_resumed(store: RuntimeStore) -> None:
    await store.connected(connected("c1"))
    row = await store.set_drained("laptop", True, "maintenance")
    assert row is not None and (row.status, row.drained) == (DRAINING, True)
    assert await store.drained(["laptop", "other"]) == {"laptop": True}
    await store.disconnected("laptop", "c1", "disconnected", "gone", 5.0)
    assert await store.connected(connected("c2", instance="i2")) is True  # reconnects drained
    row = await store.get("laptop")
    assert row is not None and row.status == DRAINING
    await store.set_drained("laptop", False, "done")
    row = await store.get("laptop")
    assert row is not None and (row.status, row.drained) == (ONLINE, False)
    assert await store.set_drained("nope", True, "x") is None


async def test_the_runtimes_of_a_restarted_host_instance_go_offline(store: RuntimeStore) -> None:
    await store.connected(connected("c1", host="host-a"))
    assert await store.mark_host_gone("host-b") == 0
    assert await store.mark_host_gone("host-a") == 1
    row = await store.get("laptop")
    assert row is not None and (row.status, row.status_reason) == (OFFLINE, "the host restarted")
    assert row.disconnected_at is not None and row.disconnected_at <= utcnow() + dt.timedelta(seconds=1)


async def test_a_refusal_is_audited(store: RuntimeStore) -> None:
    await store.refused("laptop", "", "ipv4:10.0.0.9:1", "CREDENTIALS_INVALID: the runtime key is not valid")
    (event,) = await store.events("laptop")
    assert (event.kind, event.peer, event.reason) == (
        "refused",
        "ipv4:10.0.0.9:1",
        "CREDENTIALS_INVALID: the runtime key is not valid",
    )
