"""Which other replicas a run can go to (`runtimes/elsewhere.py`): the runtimes other replicas recorded,
filtered as placement must (issue 36 item 3). On SQLite: the rows are what matters, not the backend."""

from __future__ import annotations

import datetime as dt
import pathlib
import shutil

import pytest

from agentrunner_host.ports import utcnow
from agentrunner_host.runtimes.elsewhere import replicas_serving
from agentrunner_host.store.db import Database
from agentrunner_host.store.runtimes import ConnectedRuntime, RuntimeStore

pytestmark = pytest.mark.asyncio
RUNNER = "plugin:test/fleet/default"


def _info(
    runtime_id: str, replica: str, labels: dict[str, str] | None = None, runner: str = RUNNER
) -> ConnectedRuntime:
    return ConnectedRuntime(
        runtime_id=runtime_id, client_id="c", connection_id=f"conn-{runtime_id}", instance_id=f"proc-{runtime_id}",
        host_instance_id=replica, peer="ipv4:127.0.0.1:1", machine={}, sdk={}, labels=labels or {}, slots=4,
        runner_ids=[runner], capabilities=[], heartbeat_interval_ms=500, connected_at=utcnow(),
    )  # fmt: skip


async def test_only_live_accepting_fresh_matching_runtimes_of_other_replicas(
    template: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    shutil.copy(template, tmp_path / "host.db")
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'host.db'}")
    store = RuntimeStore(db)
    try:
        for info in (
            _info("busy", "b"),
            _info("roomy", "c", {"gpu": "a100"}),
            _info("mine", "a"),  # this replica's own: placed locally, never handed over
            _info("lost", "d"),  # its replica's lease expired
            _info("drained", "e"),
            _info("stale", "f"),  # heartbeats not recorded lately (its replica writes them late)
            _info("other-runner", "g", runner="plugin:x/y/default"),
            _info("gone", "h"),
        ):
            await store.connected(info)
        store.heartbeat("busy", "conn-busy", 0)
        store.heartbeat("roomy", "conn-roomy", 3)
        await store.flush()
        await store.set_drained("drained", True, "maintenance")
        await store.disconnected("gone", "conn-gone", "disconnected", "the connection was lost", 1.0)
        from sqlalchemy import update

        from agentrunner_host.store.schema.facts import RuntimeRow

        async with db.write() as session:
            await session.execute(
                update(RuntimeRow)
                .where(RuntimeRow.runtime_id == "stale")
                .values(heartbeat_at=utcnow() - dt.timedelta(seconds=30))
            )
        live = {"a", "b", "c", "e", "f", "g", "h"}
        found = await replicas_serving(store, "a", RUNNER, {}, live, offline_after=2.0)
        # most free slots first; a runtime without recent heartbeats last (its replica is live: it
        # refuses the run if its runtime is gone, and the next replica is tried)
        assert found == ["c", "b", "f"]
        assert await replicas_serving(store, "a", RUNNER, {"gpu": "a100"}, live, 2.0) == ["c"]
        assert await replicas_serving(store, "a", RUNNER, {"gpu": "h100"}, live, 2.0) == []
        # `d` live again: its runtime has all 4 slots free (none taken since it connected)
        assert await replicas_serving(store, "a", RUNNER, {}, live | {"d"}, 2.0) == ["d", "c", "b", "f"]
    finally:
        await store.close()
        await db.dispose()
