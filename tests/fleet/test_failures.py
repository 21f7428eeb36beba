"""Items 1 and 2 of issue 36 under faults: a cancel whose NOTIFY is lost (the target's listener
connection dropped) still arrives within the polling bound; PostgreSQL restarted under load leaves no
run `running` and every replica serving without a restart; a replica SIGKILLed mid-run has its runs
ended `interrupted` by exactly one other replica within the lease bound, and a client re-attaching
through another replica reads every stored result and the terminal."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import grpc
import pytest

from agentrunner.errors import from_rpc_error
from agentrunner.protocol import RUN_ID_HEADER, RUN_TOKEN_HEADER
from agentrunner.v1 import common_pb2, host_service_pb2, proxy_service_pb2, proxy_service_pb2_grpc
from agentrunner_host.run.journal import DELTA_BATCH_SECONDS
from tests.fleet.support import (
    LEASE,
    POLL,
    SWEEP,
    Fleet,
    db_check,
    next_item,
    read_rest,
    run_request,
    runner_run,
    sequences,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
OPEN = (common_pb2.RUN_STATUS_CREATED, common_pb2.RUN_STATUS_RUNNING)


def _terminal(updates: list[Any]) -> Any:
    return [u.result for u in updates if u.HasField("result")][-1]


async def _drop_listener(fleet: Fleet, name: str) -> int:
    """Terminates replica `name`'s LISTEN connection (its notifications are lost until it reconnects)."""
    rows = fleet.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :n",
        n=f"agentrunner-fleet {name}",
    )
    return len(rows)


async def test_a_cancel_whose_notification_is_lost_arrives_within_the_poll_bound(fleet: Fleet) -> None:
    async with fleet["a"].channel() as ca, fleet["c"].channel() as cc:
        call = fleet["a"].stub(ca).Run(run_request("hold 60", "lost-notify"), timeout=60)
        run_id = (await next_item(call)).accepted.run_id
        await runner_run(fleet.tmp, run_id)
        await call.read()  # its delta: the control stream is open
        await asyncio.sleep(0.3)
        # a's listener goes (again and again while the cancel is sent): the NOTIFY meant for it is lost
        assert await _drop_listener(fleet, "a") == 1
        started = time.monotonic()
        request = host_service_pb2.CancelRunRequest(run_id=run_id, reason="lost")
        cancel = asyncio.ensure_future(fleet["c"].stub(cc).CancelRun(request, timeout=10))
        while not cancel.done():
            await _drop_listener(fleet, "a")
            await asyncio.sleep(0.02)
        assert (await cancel).run.HasField("cancel_request_time")
        rest = await read_rest(call)
        took = time.monotonic() - started
    assert _terminal(rest).run_failed.message == "runner stopped: lost"
    assert took <= POLL + 1.0, took


async def test_postgresql_restarted_under_load_the_fleet_recovers(fleet: Fleet) -> None:
    """Runs streaming on every replica while PostgreSQL stops and starts: each ends (its client gets a
    terminal), none stays `running`, and each replica then runs a new run without a restart."""
    async with fleet["a"].channel() as ca, fleet["b"].channel() as cb, fleet["c"].channel() as cc:
        channels = {"a": ca, "b": cb, "c": cc}
        calls = [
            fleet[name].stub(channels[name]).Run(run_request("stream 400 10", f"pg-{name}-{i}"), timeout=90)
            for name in "abc"
            for i in range(2)
        ]
        for call in calls:
            await call.read()
        await asyncio.sleep(0.8)
        fleet.pg.stop()
        await asyncio.sleep(1.0)
        fleet.pg.start()
        ended = await asyncio.gather(*(read_rest(call) for call in calls))
        assert all(updates and updates[-1].HasField("finished") for updates in ended)
        open_runs: list[Any] = []
        for _ in range(80):  # the endings the outage held back are written once it is over
            open_runs = fleet.sql(
                "SELECT run_id, status FROM runs WHERE status IN (:c, :r)", c=OPEN[0], r=OPEN[1]
            )
            if not open_runs:
                break
            await asyncio.sleep(0.25)
        assert open_runs == []
        for name in "abc":  # every replica serves again (its pools, listener and lease came back)
            updates = await read_rest(
                fleet[name].stub(channels[name]).Run(run_request("hello", f"after-{name}"), timeout=60)
            )
            assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED, (name, updates[-1])
    assert sorted(fleet.live()) == ["a", "b", "c"]  # nobody restarted
    await asyncio.sleep(0.5)
    done = db_check(fleet.url, fleet.live())
    assert done.returncode == 0, done.stdout + done.stderr


async def test_a_replica_killed_mid_run_is_taken_over_once_and_its_ledger_read_elsewhere(
    fleet: Fleet,
) -> None:
    async with fleet["a"].channel() as ca, fleet["c"].channel() as cc, fleet["b"].channel() as cb:
        streaming = fleet["a"].stub(ca).Run(run_request("stream 100000 5", "kill-1"), timeout=60)
        holding = fleet["a"].stub(ca).Run(run_request("hold 60", "kill-2"), timeout=60)
        stream_id = (await next_item(streaming)).accepted.run_id
        hold_id = (await next_item(holding)).accepted.run_id
        token = (await runner_run(fleet.tmp, hold_id))["token"]
        seen: list[tuple[float, int]] = []  # (when the client read it, its sequence)
        until = time.monotonic() + 1.5
        while time.monotonic() < until:  # 1.5 s of deltas
            item = await next_item(streaming)
            seen.append((time.monotonic(), item.result.sequence))  # (read, not asked for: the later time)
        killed = time.monotonic()  # (before the signal: `kill` returns once the process is reaped)
        fleet["a"].kill(signal.SIGKILL)
        for call in (streaming, holding):
            call.cancel()
        stub_c = fleet["c"].stub(cc)
        followed = await asyncio.gather(
            *(
                read_rest(stub_c.AttachRun(host_service_pb2.AttachRunRequest(run_id=r), timeout=60))
                for r in (stream_id, hold_id)
            )
        )
        took = time.monotonic() - killed
        assert took <= LEASE + SWEEP + 2.0, took
        for updates in followed:
            terminal = _terminal(updates)
            assert terminal.run_failed.code == "host.restarted" and "'a'" in terminal.run_failed.message
            assert updates[-1].finished.status == common_pb2.RUN_STATUS_INTERRUPTED
            numbers = sequences(updates)
            assert numbers == list(range(1, len(numbers) + 1))  # gap-free, up to the terminal
        # what a SIGKILL may lose is what arrived within the bound before it (README "Durability"):
        # every delta the client had DELTA_BATCH_SECONDS before the kill is in the ledger (the client
        # reads a delta after the host had it, so its time is the later one)
        stored = len(sequences(followed[0])) - 1
        kept = max(seq for at, seq in seen if at <= killed - DELTA_BATCH_SECONDS)
        assert stored >= kept, (stored, kept, seen[-1])
        proxy = proxy_service_pb2_grpc.ProxyServiceStub(cb)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            md = [(RUN_TOKEN_HEADER, token), (RUN_ID_HEADER, hold_id)]
            await proxy.GetRunRecord(proxy_service_pb2.GetRunRecordRequest(), metadata=md, timeout=10)
        assert from_rpc_error(refused.value).reason == "RUN_TOKEN_INVALID"
    takeovers = sum(fleet[name].log_text().count("fleet.takeover") for name in "bc")
    assert takeovers == 1  # exactly one replica took `a` over
    done = db_check(fleet.url, fleet.live())
    assert done.returncode == 0, done.stdout + done.stderr
