"""README "Durability" on one host on SQLite: a SIGKILL under streaming load loses at most the deltas
of the last 250 ms (`DELTA_BATCH_SECONDS`, counted to the batch's COMMIT). The PostgreSQL fleet's twin
is `tests/fleet/test_failures.py` (a replica killed mid-run)."""

from __future__ import annotations

import asyncio
import pathlib
import time
from typing import Any

import grpc
import pytest

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from agentrunner_host.run.journal import DELTA_BATCH_SECONDS
from tests.hardening.conftest import HostProcess, host_config, run_request, sqlite_database, start_rogue

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180)]
STREAMS = 4  # (the README's measurement: four streaming runs)


async def _accepted(call: Any) -> host_service_pb2.HostServiceRunResponse:
    item = await call.read()
    assert isinstance(item, host_service_pb2.HostServiceRunResponse) and item.HasField("accepted"), item
    return item


async def _read(call: Any, seen: list[tuple[float, int]]) -> None:
    """Reads a run's stream until it breaks, noting when each delta was read (after the host had it:
    the later time, so a delta counts as older than it was at the host, never younger)."""
    try:
        while (item := await call.read()) is not grpc.aio.EOF:
            if item.HasField("result") and item.result.HasField("message_delta"):
                seen.append((time.monotonic(), item.result.sequence))
    except grpc.aio.AioRpcError:
        pass  # the host was killed


async def test_a_sigkill_under_streaming_load_loses_only_the_last_250_ms_of_deltas(
    hardening_template: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    rogue = start_rogue(tmp_path)
    host = HostProcess(tmp_path, host_config(rogue.address, sqlite_database(hardening_template, tmp_path)))
    try:
        async with host.channel() as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            calls = [
                stub.Run(run_request("endless", conversation_id=f"bound-{i}"), timeout=60)
                for i in range(STREAMS)
            ]
            run_ids = [(await _accepted(call)).accepted.run_id for call in calls]
            seen: list[list[tuple[float, int]]] = [[] for _ in calls]
            readers = [asyncio.create_task(_read(call, s)) for call, s in zip(calls, seen, strict=True)]
            await asyncio.sleep(1.5)  # deltas stream, batches commit
            killed = time.monotonic()  # (before the signal: `kill` returns once the process is reaped)
            host.kill()  # SIGKILL: no shutdown path runs
            await asyncio.wait_for(asyncio.gather(*readers), 30)  # (each stream breaks: UNAVAILABLE)
        host = host.restart()
        async with host.channel() as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            replays = [
                [u async for u in stub.AttachRun(host_service_pb2.AttachRunRequest(run_id=r), timeout=30)]
                for r in run_ids
            ]
    finally:
        host.kill(15)
        rogue.kill()
    for run_seen, replay in zip(seen, replays, strict=True):
        assert replay[-1].finished.status == common_pb2.RUN_STATUS_INTERRUPTED
        stored = [
            u.result.sequence for u in replay if u.HasField("result") and u.result.HasField("message_delta")
        ]
        assert stored == list(range(stored[0], stored[0] + len(stored)))  # gap-free
        old = [seq for at, seq in run_seen if at <= killed - DELTA_BATCH_SECONDS]
        assert old, run_seen[:3]  # (the client saw deltas older than the bound: the test means something)
        # every delta the client had seen more than 250 ms before the kill is in the ledger
        assert max(stored) >= max(old), (max(stored), max(old), run_seen[-1], killed)
