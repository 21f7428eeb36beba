"""The host kit fails a naive host on every rule the naive host ignores (`make conformance` shows it
passing our host).

The naive host relays the kit's runner to the client verbatim (no validation), passes every request
variable on, and serves a ProxyService that accepts any token, at any time: what a first attempt at a
host would do.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from agentrunner.conformance.host_kit import check_host
from agentrunner.conformance.report import Report, Status
from agentrunner.v1 import (
    common_pb2,
    context_pb2,
    host_service_pb2,
    host_service_pb2_grpc,
    proxy_service_pb2,
    proxy_service_pb2_grpc,
    runner_service_pb2,
    runner_service_pb2_grpc,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def statuses(report: Report) -> dict[str, Status]:
    return {r.check_id: r.status for r in report.results}


# both services declare DownloadArtifact (different messages); this double serves neither
class NaiveHost(host_service_pb2_grpc.HostServiceServicer, proxy_service_pb2_grpc.ProxyServiceServicer):  # type: ignore[misc]
    def __init__(self, runner: str) -> None:
        self.runner = runner_service_pb2_grpc.RunnerServiceStub(grpc.aio.insecure_channel(runner))
        self.endpoint = ""

    async def ListRunners(self, request: Any, context: Any) -> Any:
        listed = await self.runner.ListRunners(runner_service_pb2.ListRunnersRequest(), timeout=5)
        return host_service_pb2.HostServiceListRunnersResponse(
            runners=[host_service_pb2.RegisteredRunner(manifest=m, available=True) for m in listed.runners]
        )

    async def Run(self, request: Any, context: Any) -> AsyncIterator[Any]:
        event = request.event
        ctx = context_pb2.RunContext(run_id=f"run_{secrets.token_hex(6)}", variables=event.variables)
        ctx.event.event_id, ctx.event.event_type = event.event_id, event.event_type
        ctx.input.text = event.input.text
        ctx.runtime.protocol_version, ctx.runtime.trace_id = "1", secrets.token_hex(16)
        yield host_service_pb2.HostServiceRunResponse(
            accepted=host_service_pb2.RunAccepted(run_id=ctx.run_id)
        )
        run = runner_service_pb2.RunRequest(context=ctx, run_token="naive", host_api_endpoint=self.endpoint)
        with contextlib.suppress(grpc.RpcError):
            async for item in self.runner.Run(run, timeout=10):
                yield host_service_pb2.HostServiceRunResponse(result=item.result)
        finished = host_service_pb2.RunFinished(run_id=ctx.run_id, status=common_pb2.RUN_STATUS_COMPLETED)
        yield host_service_pb2.HostServiceRunResponse(finished=finished)

    async def ListHistory(self, request: Any, context: Any) -> Any:
        return proxy_service_pb2.ListHistoryResponse()


async def _naive(kit_port: int) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    host = NaiveHost(f"127.0.0.1:{kit_port}")  # type: ignore[abstract]  # a partial servicer: the rest is UNIMPLEMENTED
    host_service_pb2_grpc.add_HostServiceServicer_to_server(host, server)
    proxy_service_pb2_grpc.add_ProxyServiceServicer_to_server(host, server)
    port = server.add_insecure_port("127.0.0.1:0")
    host.endpoint = f"127.0.0.1:{port}"
    await server.start()
    return server, host.endpoint


@pytest.mark.asyncio
async def test_a_naive_host_fails_the_rules_it_ignores() -> None:
    kit_port = free_port()
    server, address = await _naive(kit_port)
    try:
        report = await check_host(address, runner_listen=f"127.0.0.1:{kit_port}", timeout=15)
    finally:
        await server.stop(0)
    got = statuses(report)
    assert got["host.discovery"] is Status.PASS
    for check_id in (
        "host.wrong_run_id",
        "host.two_terminals",
        "host.after_terminal",
        "host.variables",
        "host.proxy_auth",
        "host.token_replay",
        "host.client_grammar",
    ):
        assert got[check_id] is Status.FAIL, (check_id, got[check_id])
    assert got["host.deadline"] is Status.SKIP
    assert not report.ok
    detail = {r.check_id: r.detail for r in report.results}
    assert "sensitive variable 'api_key' reached the runner" in detail["host.variables"]
