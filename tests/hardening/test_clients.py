"""Misbehaving clients: early cancels, replayed events, bursts of the largest inputs. The host must end
every run it accepted exactly once, start one run per event id, and give back the memory a burst used."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import psutil
import pytest
import pytest_asyncio

from agentrunner.errors import from_rpc_error
from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from tests.hardening.conftest import (
    HostProcess,
    Matrix,
    Proc,
    checked,
    record,
    run_request,
    run_to_end,
    soak_or,
)
from tests.helpers import next_message, rest_of

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def host(matrix_sqlite: Matrix) -> tuple[HostProcess, Proc]:
    return matrix_sqlite.host, matrix_sqlite.rogue


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def channel(host: tuple[HostProcess, Proc]) -> AsyncIterator[grpc.aio.Channel]:
    async with host[0].channel(options=[("grpc.max_send_message_length", 32 << 20)]) as ch:
        yield ch


async def test_clients_that_go_away_early_leave_every_run_ended(
    host: tuple[HostProcess, Proc], channel: grpc.aio.Channel
) -> None:
    stub = host_service_pb2_grpc.HostServiceStub(channel)

    async def leave(i: int) -> None:
        call = stub.Run(run_request("endless", conversation_id=f"early-{i}"), timeout=30)
        if i % 3:  # some after the first result, some at once
            await call.read()
        call.cancel()

    leaving = soak_or(24, 300)
    await asyncio.gather(*(leave(i) for i in range(leaving)))
    record("client misbehaviours", leaving)
    await asyncio.sleep(1.5)  # the host notices each cancel and ends its run
    report = checked(host[0].config["database"]["url"])
    assert report.ok, "\n".join(map(str, report.problems[:10]))


async def test_a_follower_that_stops_reading_is_dropped_not_buffered(
    host: tuple[HostProcess, Proc], channel: grpc.aio.Channel
) -> None:
    """Item 13: an `AttachRun` client that stopped reading made the host buffer the whole run."""
    stub = host_service_pb2_grpc.HostServiceStub(channel)
    run = stub.Run(run_request("flood 5000", conversation_id="slow-follower"), timeout=60)
    run_id = (await next_message(run)).accepted.run_id
    # a small receive window that stays small: the host's writes to this follower block at once
    options = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]
    async with host[0].channel(options=options) as slow:
        follow = host_service_pb2_grpc.HostServiceStub(slow).AttachRun(
            host_service_pb2.AttachRunRequest(run_id=run_id), timeout=60
        )
        await follow.read()
        rest = await rest_of(run)  # the run goes on for its own caller
        last = rest[-1] if rest else None
        assert last is not None and last.finished.status == common_pb2.RUN_STATUS_COMPLETED
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            while await follow.read() is not grpc.aio.EOF:
                pass
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    error = from_rpc_error(caught.value)
    assert error.reason == "RATE_LIMITED" and "afterSequence" in error.metadata
    record("client misbehaviours", 1)
    # attaching again from where it stopped reaches the end
    again = host_service_pb2_grpc.HostServiceStub(channel).AttachRun(
        host_service_pb2.AttachRunRequest(run_id=run_id, after_sequence=int(error.metadata["afterSequence"])),
        timeout=60,
    )
    updates = [u async for u in again]
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


async def test_a_replayed_event_starts_one_run_and_every_replay_sees_it(channel: grpc.aio.Channel) -> None:
    replays = await asyncio.gather(
        *(
            run_to_end(channel, "same input", event_id="evt-replayed", conversation_id="replay")
            for _ in range(6)
        )
    )
    runs = {r[0].accepted.run_id for r in replays}
    assert len(runs) == 1
    assert sum(not r[0].accepted.attached for r in replays) == 1
    for updates in replays:
        assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    later = await run_to_end(channel, "same input", event_id="evt-replayed", conversation_id="replay")
    assert later[0].accepted.attached and later[0].accepted.run_id in runs


async def test_a_burst_of_the_largest_inputs_gives_its_memory_back(
    host: tuple[HostProcess, Proc], channel: grpc.aio.Channel
) -> None:
    """Item 15: after a burst of 16 MiB inputs the host stayed at 282 MB RSS (from 122 MB) for good."""
    process = psutil.Process(host[0].popen.pid)
    await run_to_end(channel, "warm", conversation_id="big-warm")
    base = process.memory_info().rss
    stub = host_service_pb2_grpc.HostServiceStub(channel)

    async def big(i: int) -> None:
        request = run_request("x" * (15 << 20), conversation_id=f"big-{i % 2}")
        [u async for u in stub.Run(request, timeout=120)]

    for burst in range(soak_or(1, 3)):
        await asyncio.gather(*(big(burst * 8 + i) for i in range(8)))
    peak = process.memory_info().rss
    for _ in range(40):  # the trimmer runs once the burst is over
        await asyncio.sleep(0.5)
        if process.memory_info().rss - base < 100 << 20:
            break
    after = process.memory_info().rss
    print(f"\nRSS base {base >> 20} MB, after the burst {peak >> 20} MB, settled {after >> 20} MB")
    assert after - base < 100 << 20, (base >> 20, peak >> 20, after >> 20)


async def test_after_the_clients_the_ledger_is_whole(host: tuple[HostProcess, Proc]) -> None:
    assert host[0].alive() and "Traceback" not in host[0].log_text()
    await asyncio.sleep(0.5)
    report = checked(host[0].config["database"]["url"])
    assert report.ok, "\n".join(map(str, report.problems))
