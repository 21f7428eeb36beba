"""The runtime registry in one process: a host (`HostApp`) and SDK runtimes on one event loop, over real
gRPC on loopback. Placement (labels, most free slots, busy, drained), liveness (silent runtimes go
offline and their runs fail), cancel and deadlines on a runtime's run, supersede and refusals."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from agentrunner.v1 import common_pb2, host_service_pb2, runtime_pb2
from tests.runtimes.support import (
    KEY_B,
    Host,
    LocalRuntime,
    connected,
    failure,
    finished,
    host_config,
    rest_of,
    until,
)

pytestmark = pytest.mark.asyncio(loop_scope="function")


@pytest_asyncio.fixture
async def host(tmp_path: pathlib.Path, template: pathlib.Path) -> AsyncIterator[Host]:
    h = await Host.start(tmp_path, template)
    yield h
    await h.stop()


@pytest_asyncio.fixture
async def runtimes() -> AsyncIterator[list[LocalRuntime]]:
    started: list[LocalRuntime] = []
    yield started
    for rt in started:
        await rt.stop()


def text_of(updates: list[Any]) -> str:
    return next(
        u.result.run_completed.message.content
        for u in updates
        if u.HasField("result") and u.result.HasField("run_completed")
    )


async def test_a_run_reaches_a_connected_runtime_which_calls_back_through_the_dialed_address(
    host: Host, runtimes: list[LocalRuntime]
) -> None:
    runtimes.append(LocalRuntime(host.address, "laptop", labels={"workspace": "team-a"}))
    await connected(host, "laptop")
    updates = await host.run("hello")
    assert finished(updates).status == common_pb2.RUN_STATUS_COMPLETED
    terminal = next(u.result for u in updates if u.HasField("result") and u.result.HasField("run_completed"))
    assert terminal.run_completed.message.content == "echo: hello"
    # the reference runner pages the history through ProxyService: it reached the host it dialed
    assert "history_items" in terminal.metadata and "history_error" not in terminal.metadata
    run_id = updates[0].accepted.run_id
    got = await host.stub.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=5)
    assert got.run.runtime_id == "laptop"
    listed = await host.stub.ListRuntimes(host_service_pb2.ListRuntimesRequest(), timeout=5)
    (runtime,) = listed.runtimes
    assert (runtime.runtime_id, runtime.status, runtime.client_id) == (
        "laptop",
        runtime_pb2.RUNTIME_STATUS_ONLINE,
        "team-a",
    )
    assert dict(runtime.labels) == {"workspace": "team-a"} and runtime.sdk.language == "python"
    await host.runtimes.store.flush()
    detail = await host.stub.GetRuntime(host_service_pb2.GetRuntimeRequest(runtime_id="laptop"), timeout=5)
    assert [r.run_id for r in detail.runs] == [run_id]
    kinds = [e.kind for e in detail.events]
    assert kinds[:3] == ["run_ended", "run_claimed", "connected"], kinds
    assert detail.events[0].reason == "run_completed"


async def test_without_a_runtime_the_run_fails_unavailable_at_once_with_the_reason(host: Host) -> None:
    started = time.monotonic()
    updates = await host.run("hello")
    elapsed = time.monotonic() - started
    failed = failure(updates)
    assert (failed.code, failed.retryable) == ("runner.unavailable", True)
    assert "no runtime serving plugin:langbot/reference/default is connected" in failed.message
    assert elapsed < 1.0, elapsed


async def test_a_selector_picks_the_runtime_with_those_labels_or_says_why_none(
    host: Host, runtimes: list[LocalRuntime]
) -> None:
    runtimes.append(LocalRuntime(host.address, "a", labels={"workspace": "team-a"}))
    await connected(host, "a")
    failed = failure(await host.run("hi", agent_id="team-b-only"))
    assert failed.code == "runner.unavailable"
    assert "has the labels workspace=team-b (connected: a)" in failed.message
    runtimes.append(LocalRuntime(host.address, "b", key=KEY_B, labels={"workspace": "team-b"}))
    await connected(host, "b")
    for _ in range(3):
        updates = await host.run("hi", agent_id="team-b-only")
        assert host.runtimes.store is not None
        got = await host.stub.GetRun(
            host_service_pb2.GetRunRequest(run_id=updates[0].accepted.run_id), timeout=5
        )
        assert got.run.runtime_id == "b"


async def test_runs_go_to_the_runtime_with_most_free_slots_then_busy_is_unavailable(
    host: Host, runtimes: list[LocalRuntime]
) -> None:
    runtimes.append(LocalRuntime(host.address, "small", slots=1))
    runtimes.append(LocalRuntime(host.address, "big", slots=3))
    await connected(host, "small", 1)
    await connected(host, "big", 3)
    calls = []
    placed = []
    for i in range(4):
        call = host.run_call("slow:30", conversation_id=f"c{i}")
        accepted = await call.read()
        calls.append(call)
        placed.append(host.runtimes.runtime_of(accepted.accepted.run_id))
    # big 3 > small 1, big 2 > 1, then 1:1 (small: placed on least recently), then big's last slot
    assert placed == ["big", "big", "small", "big"]
    failed = failure(await host.run("hi", conversation_id="c-busy"))
    assert (
        failed.code == "runner.unavailable" and "all 4 slots" in failed.message and "busy" in failed.message
    )
    for call in calls:
        call.cancel()


async def test_drain_moves_new_runs_to_the_other_runtime_and_lets_open_ones_finish(
    host: Host, runtimes: list[LocalRuntime]
) -> None:
    runtimes.append(LocalRuntime(host.address, "a", slots=2))
    runtimes.append(LocalRuntime(host.address, "b", slots=1))
    await connected(host, "a", 2)
    await connected(host, "b", 1)
    open_call = host.run_call("slow:8", conversation_id="open")
    run_id = (await open_call.read()).accepted.run_id
    assert host.runtimes.runtime_of(run_id) == "a"
    drained = await host.stub.DrainRuntime(host_service_pb2.DrainRuntimeRequest(runtime_id="a"), timeout=5)
    assert drained.runtime.status == runtime_pb2.RUNTIME_STATUS_DRAINING and drained.runtime.drained
    for i in range(2):
        updates = await host.run("hi", conversation_id=f"n{i}")
        assert host.runtimes.store is not None
        got = await host.stub.GetRun(
            host_service_pb2.GetRunRequest(run_id=updates[0].accepted.run_id), timeout=5
        )
        assert got.run.runtime_id == "b"
    rest = await rest_of(open_call)
    assert (
        finished(rest).status == common_pb2.RUN_STATUS_COMPLETED
    )  # the open run finished on the drained one
    await host.stub.DrainRuntime(host_service_pb2.DrainRuntimeRequest(runtime_id="a", resume=True), timeout=5)
    await connected(host, "a", 2)
    await host.runtimes.store.flush()
    detail = await host.stub.GetRuntime(host_service_pb2.GetRuntimeRequest(runtime_id="a"), timeout=5)
    assert {"drained", "resumed"} <= {e.kind for e in detail.events}


async def test_cancel_and_deadline_of_a_run_on_a_runtime(host: Host, runtimes: list[LocalRuntime]) -> None:
    runtimes.append(LocalRuntime(host.address, "a", slots=2))
    await connected(host, "a", 2)
    call = host.run_call("slow:100", conversation_id="cancel-me")
    run_id = (await call.read()).accepted.run_id
    await asyncio.sleep(0.3)
    await host.stub.CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id, reason="enough"), timeout=5)
    rest = await rest_of(call)
    assert finished(rest).status == common_pb2.RUN_STATUS_CANCELLED
    await until(lambda: not runtimes[0].runtime.slots.active, what="the runtime's run stopped")
    # a runner that never ends, under a 1 s agent deadline
    host.app.config.agent("ref").timeout_seconds = 1
    started = time.monotonic()
    updates = await host.run("stall", conversation_id="stall")
    assert finished(updates).status == common_pb2.RUN_STATUS_TIMEOUT
    assert time.monotonic() - started < 3
    await until(lambda: not runtimes[0].runtime.slots.active, what="the stalled run stopped on the runtime")


async def test_a_runtime_that_goes_away_fails_its_open_runs_retryable_within_a_second(
    host: Host, runtimes: list[LocalRuntime]
) -> None:
    rt = LocalRuntime(host.address, "a", slots=2)
    runtimes.append(rt)
    await connected(host, "a", 2)
    call = host.run_call("slow:100")
    assert (await call.read()).HasField("accepted")
    await asyncio.sleep(0.3)
    gone = time.monotonic()
    await rt.stop()  # its channel closes: the host sees the connection end
    rest = await rest_of(call)
    failed = failure(rest)
    assert (failed.code, failed.retryable) == ("runner.stream_broken", True)
    assert time.monotonic() - gone < 1.0
    await until(lambda: "a" not in host.runtimes.by_runtime, what="the runtime forgotten")


async def test_a_silent_runtime_goes_offline_and_its_runs_fail(
    host: Host, runtimes: list[LocalRuntime], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrunner.runtime import session

    async def no_heartbeats(self: Any, call: Any, interval: float) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(session.Runtime, "_heartbeats", no_heartbeats)
    runtimes.append(LocalRuntime(host.address, "silent"))
    await connected(host, "silent")
    call = host.run_call("slow:100")
    assert (await call.read()).HasField("accepted")
    rest = await rest_of(call)  # offline_after is 1 s in these tests
    assert (failure(rest).code, failure(rest).retryable) == ("runner.stream_broken", True)
    await host.runtimes.store.flush()
    detail = await host.stub.GetRuntime(host_service_pb2.GetRuntimeRequest(runtime_id="silent"), timeout=5)
    offline = [e for e in detail.events if e.kind == "offline"]
    assert offline and offline[0].reason.startswith("no heartbeat for")


async def test_a_second_process_with_the_same_runtime_id_is_refused_until_the_first_is_gone(
    host: Host, runtimes: list[LocalRuntime]
) -> None:
    first = LocalRuntime(host.address, "dup")
    runtimes.append(first)
    await connected(host, "dup")
    first_conn = host.runtimes.by_runtime["dup"].id
    second = LocalRuntime(host.address, "dup", backoff_initial=0.05, backoff_max=0.2)
    runtimes.append(second)
    await host.runtimes.store.flush()
    await until(lambda: second.runtime.connections == 0 and not second.task.done(), what="second refused")
    await asyncio.sleep(0.5)
    assert host.runtimes.by_runtime["dup"].id == first_conn and second.runtime.connections == 0
    await first.stop()
    await until(lambda: second.runtime.connections == 1, what="the second one connected after the first left")
    detail = await host.stub.GetRuntime(host_service_pb2.GetRuntimeRequest(runtime_id="dup"), timeout=5)
    refused = [e for e in detail.events if e.kind == "refused"]
    assert refused and refused[0].reason.startswith("ALREADY_EXISTS")


async def test_two_host_replicas_share_the_registry_drain_and_the_runtime_id(
    tmp_path: pathlib.Path, template: pathlib.Path, runtimes: list[LocalRuntime]
) -> None:
    """Replica B drains a runtime connected to replica A (A applies it from the database) and refuses the
    same runtime id from another process while A holds it."""
    # a generous offline threshold: under load, the other replica's batched heartbeats must still count
    timing = host_config(tmp_path)["runtimes"] | {"offline_after_seconds": 3.0}
    (tmp_path / "a").mkdir()
    a = await Host.start(tmp_path / "a", template, instance_id="replica-a", runtimes=timing)
    shared = {
        "url": f"sqlite+aiosqlite:///{tmp_path / 'a' / 'host.db'}",
        "artifact_dir": str(tmp_path / "art"),
    }
    (tmp_path / "b").mkdir()
    b = await Host.start(tmp_path / "b", None, instance_id="replica-b", database=shared, runtimes=timing)
    try:
        runtimes.append(LocalRuntime(a.address, "shared"))
        await connected(a, "shared")
        await b.stub.DrainRuntime(host_service_pb2.DrainRuntimeRequest(runtime_id="shared"), timeout=5)
        await until(
            lambda: a.runtimes.by_runtime["shared"].drained, limit=5, what="replica A applies B's drain"
        )
        failed = failure(await a.run("hi"))
        assert failed.code == "runner.unavailable" and "draining" in failed.message
        twin = LocalRuntime(b.address, "shared", backoff_initial=0.05, backoff_max=0.2)
        runtimes.append(twin)
        await asyncio.sleep(1.0)
        assert twin.runtime.connections == 0 and "shared" not in b.runtimes.by_runtime
        refused = [e for e in await b.runtimes.store.events("shared") if e.kind == "refused"]
        assert refused and "connected to host 'replica-a'" in refused[0].reason
    finally:
        await b.stop()
        await a.stop()
