"""The runner kit fails each rule a broken runner breaks (`make conformance` shows it passing the
Python reference runner and the Go and TypeScript examples).

The broken runners are raw RunnerService servicers (the SDK would not let them misbehave), served on
real gRPC; the kit plays the host against them exactly as it does against a runner in another language.
"""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from agentrunner import build_manifest
from agentrunner.conformance.report import Report, Status
from agentrunner.conformance.runner_kit import check_runner
from agentrunner.results import completed
from agentrunner.v1 import (
    proxy_service_pb2,
    proxy_service_pb2_grpc,
    result_pb2,
    runner_service_pb2,
    runner_service_pb2_grpc,
)

MANIFEST = build_manifest(
    {
        "id": "plugin:test/broken/default",
        "label": "broken",
        "capabilities": ["interrupt"],
        "permissions": {"history": ["page"]},
        "config": [{"name": "prefix", "type": "string", "default": "> "}],
    }
)


def statuses(report: Report) -> dict[str, Status]:
    return {r.check_id: r.status for r in report.results}


class BrokenRunner(runner_service_pb2_grpc.RunnerServiceServicer):
    """Breaks the contract: plain errors without ErrorInfo, a gRPC error for bad config, bare proxy
    calls (no token, traceparent or deadline) retried at once, sequence from 0, deltas without the
    streaming capability, two terminal results, no Control stream despite `interrupt`."""

    async def ListRunners(self, request: Any, context: Any) -> runner_service_pb2.ListRunnersResponse:
        return runner_service_pb2.ListRunnersResponse(runners=[MANIFEST])

    async def DescribeRunner(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if request.runner_id != MANIFEST.id:
            await context.abort(grpc.StatusCode.NOT_FOUND, "nope")
        return runner_service_pb2.DescribeRunnerResponse(runner=MANIFEST)

    async def Run(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        if request.runner_id != MANIFEST.id:
            await context.abort(grpc.StatusCode.NOT_FOUND, "nope")
        if "prefix" in request.context.config.fields:
            await context.abort(grpc.StatusCode.INTERNAL, "bad config")
        run_id = request.context.run_id
        if request.context.conversation.conversation_id.endswith("-cancel"):
            await asyncio.sleep(1.5)  # runs on without ever opening the Control stream
        async with grpc.aio.insecure_channel(request.host_api_endpoint) as channel:
            stub = proxy_service_pb2_grpc.ProxyServiceStub(channel)
            for _ in range(3):
                try:
                    await stub.ListHistory(proxy_service_pb2.ListHistoryRequest())
                    break
                except grpc.RpcError:
                    continue
        for seq, result in enumerate(
            [
                result_pb2.RunResult(message_delta=result_pb2.MessageDelta(text="hi")),
                completed("a"),
                completed("b"),
            ]
        ):
            result.run_id, result.sequence = run_id, seq
            yield runner_service_pb2.RunResponse(result=result)


class LateCaller(BrokenRunner):
    """Correct grammar, but it calls the host again after its terminal result."""

    async def Run(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        result = completed("done")
        result.run_id, result.sequence = request.context.run_id, 1
        result.timestamp.GetCurrentTime()
        yield runner_service_pb2.RunResponse(result=result)
        token = [("x-agentrunner-run-token", request.run_token)]

        async def late() -> None:
            await asyncio.sleep(0.3)
            async with grpc.aio.insecure_channel(request.host_api_endpoint) as channel:
                stub = proxy_service_pb2_grpc.ProxyServiceStub(channel)
                await stub.ListHistory(proxy_service_pb2.ListHistoryRequest(), metadata=token, timeout=2)

        asyncio.get_running_loop().create_task(late())


class LingeringControl(BrokenRunner):
    """Correct grammar and a Control stream, which it closes `linger` s after its terminal result."""

    def __init__(self, linger: float) -> None:
        self.linger = linger

    async def Run(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        run_id = request.context.run_id
        channel = grpc.aio.insecure_channel(request.host_api_endpoint)
        call = proxy_service_pb2_grpc.ProxyServiceStub(channel).Control(
            metadata=[("x-agentrunner-run-token", request.run_token)]
        )
        hello = proxy_service_pb2.ControlHello(run_id=run_id, run_token=request.run_token)
        await call.write(proxy_service_pb2.ControlRequest(hello=hello))
        await call.read()  # the welcome
        result = completed("done")
        result.run_id, result.sequence = run_id, 1
        result.timestamp.GetCurrentTime()
        yield runner_service_pb2.RunResponse(result=result)

        async def close_later() -> None:
            await asyncio.sleep(self.linger)
            await call.done_writing()
            await channel.close()

        asyncio.get_running_loop().create_task(close_later())


async def _serve(servicer: runner_service_pb2_grpc.RunnerServiceServicer) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    runner_service_pb2_grpc.add_RunnerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.mark.asyncio
async def test_a_broken_runner_fails_every_rule_it_breaks(tmp_path: pathlib.Path) -> None:
    server, address = await _serve(BrokenRunner())
    try:
        report = await check_runner(address, timeout=8)
    finally:
        await server.stop(0)
    got = statuses(report)
    for check_id in (
        "discovery.health",
        "discovery.describe_unknown",
        "discovery.run_unknown",
        "stream.grammar",
        "stream.capabilities",
        "stream.config_invalid",
        "inject.unauthenticated",
        "inject.permission_denied",
        "inject.resource_exhausted",
        "control.hello",
        "proxy.token",
    ):
        assert got.get(check_id) is Status.FAIL, (check_id, got.get(check_id))
    for check_id in ("stream.deadline", "proxy.traceparent", "proxy.deadline"):  # SHOULD rules: warnings
        assert got.get(check_id) is Status.WARN, (check_id, got.get(check_id))
    assert not report.ok and report.verdict() == "NOT conformant"
    detail = {r.check_id: r.detail for r in report.results}
    assert "no google.rpc.ErrorInfo" in detail["discovery.describe_unknown"]
    assert "retried 2 time(s) after a non-retryable error" in detail["inject.unauthenticated"]
    assert "ended with gRPC INTERNAL instead of a terminal result" in detail["stream.config_invalid"]
    report.write_junit(tmp_path / "kit.xml")
    suite = ET.parse(tmp_path / "kit.xml").getroot()
    failures = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert failures == {r.check_id for r in report.failed}
    assert suite.get("failures") == str(len(failures)) and int(suite.get("tests", 0)) == len(report.results)


@pytest.mark.asyncio
async def test_a_call_after_the_terminal_result_is_caught() -> None:
    server, address = await _serve(LateCaller())
    try:
        report = await check_runner(address, timeout=8)
    finally:
        await server.stop(0)
    got = statuses(report)
    assert got["stream.grammar"] is Status.PASS
    assert got["proxy.after_end"] is Status.FAIL, report.results


@pytest.mark.asyncio
@pytest.mark.parametrize(("linger", "status"), [(1.2, Status.PASS), (3.5, Status.WARN)])
async def test_a_control_stream_left_open_after_the_run_is_caught(linger: float, status: Status) -> None:
    server, address = await _serve(LingeringControl(linger))
    try:
        report = await check_runner(address, timeout=8)
    finally:
        await server.stop(0)
    assert statuses(report)["control.closed"] is status, report.results


def test_the_cli_exits_2_when_nothing_listens(tmp_path: Any) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentrunner.conformance",
            "runner",
            "--target",
            f"127.0.0.1:{port}",
            "--wait",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "ListRunners failed: UNAVAILABLE" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
