"""Runtimes as real processes (`python -m agentrunner connect`) against a host started by its CLI, on
real sockets: two runtimes share a runner's load; SIGKILL of one fails only its runs (typed, retryable,
within a second) and, restarted, it serves again; a runtime survives a host restart by reconnecting; a
refused runtime exits 2 with a one-line error; SIGTERM drains a runtime (its open run finishes)."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from tests.runtimes.processes import CONNECTED, host_cli, start_host, start_runtime, write_config
from tests.runtimes.support import REFERENCE_ID, digest

pytestmark = pytest.mark.asyncio(loop_scope="function")
KEY = "laptops-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(tmp: Path, address: str = "127.0.0.1:0", **extra: Any) -> Path:
    data = {
        "instance_id": "host-1",
        "listen": {"address": address},
        "database": {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "artifacts")},
        "runtimes": {
            "heartbeat_interval_seconds": 0.5,
            "offline_after_seconds": 2,
            "clients": [{"id": "laptops", "api_key_sha256": [digest(KEY)], "runner_ids": [REFERENCE_ID]}],
        },
        "agents": [{"id": "ref", "runner_id": REFERENCE_ID, "timeout_seconds": 60}],
        "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "ref"}}],
        **extra,
    }
    path = write_config(tmp / "host.yaml", data)
    assert host_cli("db", "upgrade", "--config", str(path)).returncode == 0
    return path


def request(text: str, conversation: str) -> host_service_pb2.HostServiceRunRequest:
    req = host_service_pb2.HostServiceRunRequest()
    req.event.event_type = "message.received"
    req.event.bot_id = "bot-1"
    req.event.conversation.conversation_id = conversation
    req.event.input.text = text
    req.event.delivery.supports_streaming = True
    return req


async def runtime_of(stub: Any, run_id: str) -> str:
    return (await stub.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=5)).run.runtime_id


async def runtime_runs(stub: Any, runtime_id: str) -> list[str]:
    detail = await stub.GetRuntime(host_service_pb2.GetRuntimeRequest(runtime_id=runtime_id), timeout=5)
    return [r.run_id for r in detail.runs]


async def drain(call: Any) -> list[host_service_pb2.HostServiceRunResponse]:
    out = []
    while (update := await call.read()) is not grpc.aio.EOF:
        out.append(update)
    return out


def terminal(updates: list[Any]) -> Any:
    return next(
        u.result
        for u in updates
        if u.HasField("result") and u.result.WhichOneof("payload") in ("run_completed", "run_failed")
    )


async def test_two_runtimes_share_load_and_a_killed_one_fails_only_its_runs_then_serves_again(
    tmp_path: Path,
) -> None:
    host, address = start_host(config(tmp_path))
    a = start_runtime(address, "rt-a", key=KEY, extra=["--slots", "1"])
    b = start_runtime(address, "rt-b", key=KEY, extra=["--slots", "1"])
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub: Any = host_service_pb2_grpc.HostServiceStub(channel)
            calls = [stub.Run(request("slow:30", f"c{i}"), timeout=60) for i in range(2)]
            run_ids = [(await c.read()).accepted.run_id for c in calls]
            placed = {await runtime_of(stub, r): c for r, c in zip(run_ids, calls, strict=True)}
            assert set(placed) == {"rt-a", "rt-b"}  # one free slot each: one run each
            await asyncio.sleep(0.5)
            killed = time.monotonic()
            a.signal(signal.SIGKILL)
            on_a = await drain(placed["rt-a"])
            failed_after = time.monotonic() - killed
            result = terminal(on_a)
            assert result.run_failed.code == "runner.stream_broken" and result.run_failed.retryable
            assert failed_after < 1.0, failed_after
            on_b = await drain(placed["rt-b"])
            assert terminal(on_b).HasField("run_completed")  # the other runtime's run was not touched
            # restarted (as a supervisor would), the runtime registers again and serves
            a = start_runtime(address, "rt-a", key=KEY, extra=["--slots", "1"])
            await stub.DrainRuntime(host_service_pb2.DrainRuntimeRequest(runtime_id="rt-b"), timeout=5)
            updates = [u async for u in stub.Run(request("hi again", "c9"), timeout=30)]
            assert terminal(updates).run_completed.message.content == "echo: hi again"
            assert await runtime_of(stub, updates[0].accepted.run_id) == "rt-a"
            # the killed run was never sent again: rt-a's record holds it once (failed) and the new run
            on_b_runs = await runtime_runs(stub, "rt-b")
            killed_run = next(r for r in run_ids if r not in on_b_runs)
            expected = sorted([killed_run, updates[0].accepted.run_id])
            for _ in range(50):  # (claims are written in batches every 0.2 s)
                detail = await stub.GetRuntime(
                    host_service_pb2.GetRuntimeRequest(runtime_id="rt-a"), timeout=5
                )
                claimed = sorted(e.run_id for e in detail.events if e.kind == "run_claimed")
                if len(claimed) >= len(expected):
                    break
                await asyncio.sleep(0.1)
            assert claimed == expected
            got = await stub.GetRun(host_service_pb2.GetRunRequest(run_id=killed_run), timeout=5)
            assert got.run.status == common_pb2.RUN_STATUS_FAILED
    finally:
        for proc in (a, b, host):
            proc.stop()


async def test_a_runtime_reconnects_with_backoff_after_the_host_restarts(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    path = config(tmp_path, address)
    host, _ = start_host(path)
    rt = start_runtime(address, "rt-a", key=KEY)
    try:
        host.signal(signal.SIGKILL)
        host.stop()
        host, _ = start_host(path)
        back = time.monotonic()
        rt.expect(CONNECTED, timeout=30)
        reconnect_s = time.monotonic() - back
        assert reconnect_s < 6.0, reconnect_s  # the backoff is capped at 5 s
        async with grpc.aio.insecure_channel(address) as channel:
            stub: Any = host_service_pb2_grpc.HostServiceStub(channel)
            updates = [u async for u in stub.Run(request("after restart", "c1"), timeout=30)]
            assert terminal(updates).run_completed.message.content == "echo: after restart"
    finally:
        rt.stop()
        host.stop()


async def test_a_refused_runtime_exits_2_with_a_one_line_error(tmp_path: Path) -> None:
    host, address = start_host(config(tmp_path))
    try:
        rt = start_runtime(address, "rt-x", key="not-the-key", wait=False)
        assert rt.popen.wait(timeout=60) == 2
        errors = [line for line in rt.stderr if line.startswith("error:")]
        assert errors == [
            "error: the host refused this runtime: UNAUTHENTICATED CREDENTIALS_INVALID: the runtime key is not valid"
        ]
    finally:
        host.stop()


async def test_sigterm_drains_a_runtime_its_open_run_finishes(tmp_path: Path) -> None:
    host, address = start_host(config(tmp_path))
    rt = start_runtime(address, "rt-a", key=KEY)
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub: Any = host_service_pb2_grpc.HostServiceStub(channel)
            call = stub.Run(request("slow:15", "c1"), timeout=60)
            run_id = (await call.read()).accepted.run_id
            await asyncio.sleep(0.3)
            rt.signal(signal.SIGTERM)
            updates = await drain(call)
            assert terminal(updates).HasField("run_completed")
            assert rt.popen.wait(timeout=15) == 0
            failed = terminal([u async for u in stub.Run(request("hi", "c2"), timeout=30)])
            assert failed.run_failed.code == "runner.unavailable"
            got = await stub.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=5)
            assert got.run.status == common_pb2.RUN_STATUS_COMPLETED
    finally:
        rt.stop()
        host.stop()
