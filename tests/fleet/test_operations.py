"""Item 1 of issue 36: every operation on a run behaves the same whichever replica the client or the
runner reaches. Replica `a` runs the runs; clients call `c`; the runner's proxy calls and control
stream reach `b` (replica `a` advertises `b`'s address)."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentrunner.v1 import common_pb2, host_service_pb2
from tests.fleet.support import Fleet, read_rest, run_request, runner_run

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_cancel_from_another_replica_reaches_the_runner_through_a_third(fleet: Fleet) -> None:
    async with fleet["a"].channel() as ca, fleet["c"].channel() as cc:
        call = fleet["a"].stub(ca).Run(run_request("hold 60", "cancel-1"), timeout=60)
        accepted = await call.read()
        run_id = accepted.accepted.run_id
        entry = await runner_run(fleet.tmp, run_id)
        assert entry["endpoint"].endswith(str(fleet.ports["b"]))
        await call.read()  # the first delta: the runner's control stream is open (on `b`)
        await asyncio.sleep(0.3)
        started = time.monotonic()
        answer = (
            await fleet["c"]
            .stub(cc)
            .CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id, reason="from c"), timeout=10)
        )
        assert answer.run.HasField("cancel_request_time")
        rest = await read_rest(call)
        took = time.monotonic() - started
    terminal = [u.result for u in rest if u.HasField("result")][-1]
    # the runner's own cooperative stop: the cancel signal went a -> b's control stream -> runner
    assert terminal.run_failed.code == "cancelled"
    assert terminal.run_failed.message == "runner stopped: from c", terminal
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED
    assert took < 2.0, took
