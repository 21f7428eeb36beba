"""Item 3 of issue 36: runtimes on any replica. One runtime (`python -m agentrunner connect`, the fleet
suite's runner) is connected to replica `a`; clients open runs through `b`: each run lives on `a` (the
replica holding the runtime's stream) and `b` relays it. Every operation of item 1 then reaches the run
from any replica; the runtime's loss and `a`'s loss end the runs opened elsewhere with typed failures, and `b`'s loss
while it relays a run leaves the run going on `a` for a client to re-attach through `c`."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from agentrunner.v1 import common_pb2, host_service_pb2
from agentrunner_host.store.migrate import upgrade
from tests.fleet.support import (
    LEASE,
    RUNTIME_KEY,
    RUNTIME_TARGET,
    SWEEP,
    Replica,
    db_check,
    free_port,
    next_item,
    read_rest,
    run_request,
    runner_run,
    runtime_replica_config,
    sequences,
)
from tests.hardening.conftest import OwnPostgres
from tests.runtimes.processes import LineProc, start_runtime

#: (the module fixture starts PostgreSQL, three replicas and a runtime: minutes on a loaded 2-core machine)
pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]


class RuntimeFleet:
    """Three replicas on one database and a runtime connected to `a`."""

    def __init__(self, tmp: pathlib.Path, url: str) -> None:
        self.tmp, self.url = tmp, url
        self.ports = {name: free_port() for name in "abc"}
        self.replicas = {
            name: Replica(tmp, name, runtime_replica_config(name, self.ports[name], url)) for name in "abc"
        }
        self.runtime = self.connect("rt-1")

    def connect(self, runtime_id: str) -> LineProc:
        """A runtime of the fleet runner connected to replica `a` (its runs logged under `tmp`)."""
        return start_runtime(
            self.replicas["a"].address, runtime_id, key=RUNTIME_KEY, target=RUNTIME_TARGET, extra=["--slots", "4"],
            env={"FLEET_RUNNER_LOG": str(self.tmp / "runner.jsonl")},
        )  # fmt: skip

    def __getitem__(self, name: str) -> Replica:
        return self.replicas[name]

    def live(self) -> list[str]:
        return [name for name, r in self.replicas.items() if r.alive()]

    def owner(self, run_id: str) -> str:
        from sqlalchemy import create_engine, text

        from agentrunner_host.store.db import sync_url

        engine = create_engine(sync_url(self.url))
        try:
            with engine.connect() as conn:
                return str(
                    conn.execute(text("select owner from runs where run_id = :r"), {"r": run_id}).scalar()
                )
        finally:
            engine.dispose()

    def close(self) -> None:
        self.runtime.stop()
        for replica in self.replicas.values():
            replica.kill(15)


@pytest.fixture(scope="module")
def rfleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeFleet]:
    root = pathlib.Path(tempfile.mkdtemp(prefix="agentrunner-fleetrt-pg-"))
    pg = OwnPostgres(root)
    url = pg.create_database()
    upgrade(url)
    running = RuntimeFleet(tmp_path_factory.mktemp("fleetrt"), url)
    try:
        yield running
    finally:
        running.close()
        pg.close()
        shutil.rmtree(root, ignore_errors=True)


async def _wait_listed(fleet: RuntimeFleet, replica: str, runtime_id: str, limit: float = 15.0) -> None:
    """Until replica `replica` sees the runtime (its heartbeats reach the database in batches)."""
    until = time.monotonic() + limit
    async with fleet[replica].channel() as ch:
        stub = fleet[replica].stub(ch)
        while time.monotonic() < until:
            listed = await stub.ListRuntimes(host_service_pb2.ListRuntimesRequest(), timeout=10)
            if any(r.runtime_id == runtime_id for r in listed.runtimes):
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"replica {replica} never listed runtime {runtime_id}")


def _terminal(updates: list[host_service_pb2.HostServiceRunResponse]) -> Any:
    return [u.result for u in updates if u.HasField("result")][-1]


async def _open(
    fleet: RuntimeFleet, channel: grpc.aio.Channel, name: str, text: str, conv: str
) -> tuple[Any, str]:
    call = fleet[name].stub(channel).Run(run_request(text, conv), timeout=120)
    accepted = await next_item(call)
    assert accepted.HasField("accepted"), accepted
    return call, accepted.accepted.run_id


async def test_a_run_opened_on_b_runs_on_the_runtime_connected_to_a(rfleet: RuntimeFleet) -> None:
    await _wait_listed(rfleet, "b", "rt-1")
    async with rfleet["b"].channel() as cb, rfleet["c"].channel() as cc:
        call, run_id = await _open(rfleet, cb, "b", "stream 30 10", "rt-stream")
        rest = await read_rest(call)
        got = await rfleet["c"].stub(cc).GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=10)
        listed = await rfleet["c"].stub(cc).ListRuns(host_service_pb2.ListRunsRequest(), timeout=10)
    assert (await runner_run(rfleet.tmp, run_id))["mode"] == "stream"  # the runtime ran it
    assert rfleet.owner(run_id) == "a"  # the run lives where its runtime is
    assert sequences(rest) == list(range(1, 32))  # 30 deltas and the terminal, gap-free, once each
    assert _terminal(rest).HasField("run_completed")
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    assert got.run.status == common_pb2.RUN_STATUS_COMPLETED
    assert run_id in [r.run_id for r in listed.runs]


def _runtimes_list(*args: str) -> subprocess.CompletedProcess[str]:
    """`agentrunner-host runtimes list ARGS` as an operator runs it (a wide terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "agentrunner_host", "runtimes", "list", *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


async def test_runtimes_list_on_any_replica_shows_the_runtime_and_its_replica(rfleet: RuntimeFleet) -> None:
    done = await asyncio.to_thread(_runtimes_list, "--host", rfleet["c"].address, "--json")
    assert done.returncode == 0, done.stderr
    listed = {r["runtime_id"]: r for r in json.loads(done.stdout)["runtimes"]}
    assert listed["rt-1"]["status"] == "online"
    assert listed["rt-1"]["host_instance_id"] == "a"
    table = await asyncio.to_thread(_runtimes_list, "--host", rfleet["b"].address)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if "rt-1" in line)
    assert " a " in row and "online" in row, table.stdout


async def test_cancel_from_b_and_from_c(rfleet: RuntimeFleet) -> None:
    async with rfleet["b"].channel() as cb, rfleet["c"].channel() as cc:
        calls = [await _open(rfleet, cb, "b", "hold 60", f"rt-cancel-{i}") for i in range(2)]
        for call, _ in calls:
            await next_item(call)  # the first delta: the run is on the runtime, its control stream open
        await asyncio.sleep(0.3)
        for (call, run_id), (name, channel) in zip(calls, (("b", cb), ("c", cc)), strict=True):
            started = time.monotonic()
            request = host_service_pb2.CancelRunRequest(run_id=run_id, reason=f"from {name}")
            answer = await rfleet[name].stub(channel).CancelRun(request, timeout=10)
            assert answer.run.HasField("cancel_request_time")
            rest = await read_rest(call)
            took = time.monotonic() - started
            terminal = _terminal(rest)
            # the runtime's runner stopped on the signal (the grace is 3 s): it reached `a`'s runtime
            assert terminal.run_failed.code == "cancelled", terminal
            assert terminal.run_failed.message == f"runner stopped: from {name}", terminal
            assert rest[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED
            assert took < 2.5, took


async def test_a_run_every_replica_refuses_fails_naming_them(rfleet: RuntimeFleet) -> None:
    async with rfleet["b"].channel() as cb:
        holds: list[tuple[Any, str]] = []
        refused = None
        for i in range(6):  # (the runtime has 4 slots; the one past them is handed to `a` and refused)
            call, run_id = await _open(rfleet, cb, "b", "hold 60", f"rt-full-{i}")
            item = await next_item(call)
            if item.HasField("result") and item.result.HasField("run_failed"):
                refused = item.result.run_failed
                break
            holds.append((call, run_id))
        for call, run_id in holds:
            await rfleet["b"].stub(cb).CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id), timeout=10)
            await read_rest(call)
    assert refused is not None and len(holds) == 4, holds
    assert refused.code == "runner.unavailable", refused
    # what happened, not "no runtime is connected": the runtime is connected to `a`, and full
    assert "the runtimes on host replicas a refused the run (a: " in refused.message, refused.message
    assert "all 4 slots" in refused.message, refused.message


async def test_attach_from_c_is_gap_free_and_a_reply_reaches_b(rfleet: RuntimeFleet) -> None:
    async with rfleet["b"].channel() as cb, rfleet["c"].channel() as cc:
        call, run_id = await _open(rfleet, cb, "b", "stream 40 25", "rt-attach")
        first = [await next_item(call) for _ in range(5)]
        attached = (
            rfleet["c"].stub(cc).AttachRun(host_service_pb2.AttachRunRequest(run_id=run_id), timeout=60)
        )
        followed, rest = await asyncio.gather(read_rest(attached), read_rest(call))
        reply_call, _ = await _open(rfleet, cb, "b", "reply", "rt-reply")
        replied = await read_rest(reply_call)
    expected = list(range(1, 42))
    assert sequences(first + rest) == expected
    assert sequences(followed) == expected  # durable replay, then the live tail: no gap, no repeat
    assert followed[0].accepted.run_id == run_id
    assert followed[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    assert [u.reply.message.content for u in replied if u.HasField("reply")] == ["a reply through the fleet"]


async def test_steering_and_an_interaction_answer_through_other_replicas(rfleet: RuntimeFleet) -> None:
    async with rfleet["b"].channel() as cb, rfleet["c"].channel() as cc:
        own, run_id = await _open(rfleet, cb, "b", "steer 30", "rt-steer")
        await runner_run(rfleet.tmp, run_id)
        await asyncio.sleep(0.5)  # (its control stream is open on `a`)
        steered = rfleet["c"].stub(cc).Run(run_request("new input", "rt-steer"), timeout=60)
        followed, mine = await asyncio.gather(read_rest(steered), read_rest(own))
        assert followed[0].accepted.run_id == run_id and followed[0].accepted.attached
        assert _terminal(mine).run_completed.message.content == "steered: new input"
        assert _terminal(followed) == _terminal(mine)
        # an interaction asked by a run opened on `b` (living on `a`), answered through `c`
        asked = await read_rest(rfleet["b"].stub(cb).Run(run_request("ask", "rt-ask"), timeout=30))
        interactions = [u.interaction for u in asked if u.HasField("interaction")]
        assert len(interactions) == 1, asked
        interaction = interactions[0]
        answer = host_service_pb2.SubmitInteractionRequest(
            interaction_id=interaction.request.interaction_id, action_id="confirm"
        )
        answered = await read_rest(rfleet["c"].stub(cc).SubmitInteraction(answer, timeout=30))
    assert _terminal(answered).run_completed.message.content == "answered: confirm"


async def test_a_client_leaving_b_abandons_the_run_where_it_runs(rfleet: RuntimeFleet) -> None:
    async with rfleet["b"].channel() as cb, rfleet["c"].channel() as cc:
        call, run_id = await _open(rfleet, cb, "b", "hold 60", "rt-leave")
        await next_item(call)
        call.cancel()  # the client goes away
        stub = rfleet["c"].stub(cc)
        until = time.monotonic() + 10
        while time.monotonic() < until:
            run = (await stub.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=10)).run
            if run.status != common_pb2.RUN_STATUS_RUNNING:
                break
            await asyncio.sleep(0.1)
    # as on one host: the run ends at once, cancelled because its client left (not after its 60 s)
    assert run.status == common_pb2.RUN_STATUS_CANCELLED, run
    assert run.status_reason == "client.cancelled", run


async def test_the_runtime_killed_mid_run_fails_the_run_opened_on_b(rfleet: RuntimeFleet) -> None:
    async with rfleet["b"].channel() as cb:
        call, _ = await _open(rfleet, cb, "b", "hold 60", "rt-kill-runtime")
        await next_item(call)
        rfleet.runtime.signal(signal.SIGKILL)
        rest = await asyncio.wait_for(read_rest(call), 20)
    terminal = _terminal(rest)
    assert terminal.run_failed.code == "runner.stream_broken", terminal
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_FAILED
    # `runtimes list` on another replica: offline, its last heartbeat shown as history
    listed = await asyncio.to_thread(_runtimes_list, "--all", "--host", rfleet["c"].address, "--json")
    runtime = next(r for r in json.loads(listed.stdout)["runtimes"] if r["runtime_id"] == "rt-1")
    assert runtime["status"] == "offline" and runtime["host_instance_id"] == "a", runtime
    table = await asyncio.to_thread(_runtimes_list, "--all", "--host", rfleet["c"].address)
    row = next(line for line in table.stdout.splitlines() if "rt-1" in line)
    assert "offline (last heartbeat" in row, table.stdout
    rfleet.runtime.stop()
    rfleet.runtime = rfleet.connect("rt-2")
    await _wait_listed(rfleet, "b", "rt-2")


async def test_replica_b_killed_while_relaying_the_run_goes_on_and_c_reattaches(rfleet: RuntimeFleet) -> None:
    async with rfleet["b"].channel() as cb, rfleet["c"].channel() as cc:
        call, run_id = await _open(rfleet, cb, "b", "stream 40 100", "rt-kill-b")
        seen = [await next_item(call) for _ in range(3)]
        rfleet["b"].kill(signal.SIGKILL)  # the relaying replica dies; the run lives on `a`
        request = host_service_pb2.AttachRunRequest(run_id=run_id)
        followed = await asyncio.wait_for(read_rest(rfleet["c"].stub(cc).AttachRun(request, timeout=60)), 60)
    # the client re-attaches through another replica: every result once, and the run's own terminal
    assert sequences(seen) == [1, 2, 3]
    assert sequences(followed) == list(range(1, 42))
    assert followed[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    assert rfleet.owner(run_id) == "a"


async def test_replica_a_killed_interrupts_its_runs_opened_on_c(rfleet: RuntimeFleet) -> None:
    await _wait_listed(rfleet, "c", "rt-2")
    async with rfleet["c"].channel() as cc:
        call, run_id = await _open(rfleet, cc, "c", "hold 60", "rt-kill-a")
        await next_item(call)
        rfleet["a"].kill(signal.SIGKILL)
        killed = time.monotonic()
        rest = await asyncio.wait_for(read_rest(call), LEASE + 20)
        took = time.monotonic() - killed
        got = await rfleet["c"].stub(cc).GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=10)
    terminal = _terminal(rest)
    assert terminal.run_failed.code == "host.restarted" and "'a'" in terminal.run_failed.message, terminal
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_INTERRUPTED
    assert got.run.status == common_pb2.RUN_STATUS_INTERRUPTED
    assert took <= LEASE + SWEEP + 3.0, took
    # the takeover marked `a`'s runtime offline (it was live a moment ago)
    listed = await asyncio.to_thread(_runtimes_list, "--all", "--host", rfleet["c"].address, "--json")
    runtime = next(r for r in json.loads(listed.stdout)["runtimes"] if r["runtime_id"] == "rt-2")
    assert runtime["status"] == "offline" and runtime["status_reason"] == "host replica 'a' was lost", runtime
    done = db_check(rfleet.url, rfleet.live())
    assert done.returncode == 0, done.stdout + done.stderr
