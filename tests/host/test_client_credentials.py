"""The CLI's channel carries the client's API key on every call shape, plaintext and TLS alike.

Issue 41: grpc.aio files a client interceptor under the first interceptor kind it is an instance of, so
an interceptor class subclassing both the unary-unary and the unary-stream kinds only ever touched
unary calls: every streaming call (`run`, `interact`, `runs show`, `artifacts get`) left without the key
and a host with `auth.clients` refused it. A server that records what each method received is the
judge here, for a unary and a unary-stream method, over plaintext (interceptors) and TLS (call
credentials).
"""

from __future__ import annotations

import pathlib
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from agentrunner_host.cli.common import host_channel

pytestmark = pytest.mark.asyncio
KEY = "arh_regression-key-0123456789"


class Recorder(host_service_pb2_grpc.HostServiceServicer):
    """Answers ListRuns and AttachRun, remembering the `authorization` metadata of each call."""

    def __init__(self) -> None:
        self.seen: dict[str, list[str]] = {}

    def _record(self, method: str, context: Any) -> None:
        values = [v for k, v in context.invocation_metadata() or () if k == "authorization"]
        self.seen.setdefault(method, []).extend(values)

    async def ListRuns(self, request: Any, context: Any) -> host_service_pb2.ListRunsResponse:
        self._record("ListRuns", context)
        return host_service_pb2.ListRunsResponse()

    async def AttachRun(
        self, request: Any, context: Any
    ) -> AsyncIterator[host_service_pb2.AttachRunResponse]:
        self._record("AttachRun", context)
        yield host_service_pb2.AttachRunResponse(finished=host_service_pb2.RunFinished(run_id=request.run_id))


async def _serve(
    recorder: Recorder, creds: grpc.ServerCredentials | None = None
) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    host_service_pb2_grpc.add_HostServiceServicer_to_server(recorder, server)
    address = "127.0.0.1:0" if creds is None else "localhost:0"
    port = server.add_secure_port(address, creds) if creds else server.add_insecure_port(address)
    await server.start()
    return server, port


async def _both_shapes(channel: grpc.aio.Channel) -> None:
    stub = host_service_pb2_grpc.HostServiceStub(channel)
    await stub.ListRuns(host_service_pb2.ListRunsRequest(), timeout=10)
    updates = [u async for u in stub.AttachRun(host_service_pb2.AttachRunRequest(run_id="run_x"), timeout=10)]
    assert updates[-1].finished.run_id == "run_x"


async def test_a_streaming_call_through_the_cli_channel_carries_the_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTRUNNER_HOST_API_KEY", KEY)
    recorder = Recorder()  # type: ignore[abstract]  # a partial servicer: what it leaves out is UNIMPLEMENTED
    server, port = await _serve(recorder)
    try:
        async with host_channel(f"127.0.0.1:{port}") as channel:
            await _both_shapes(channel)
    finally:
        await server.stop(None)
    assert recorder.seen == {"ListRuns": [f"Bearer {KEY}"], "AttachRun": [f"Bearer {KEY}"]}


def _certificates(tmp: pathlib.Path) -> tuple[bytes, bytes, bytes]:
    """A CA and a server certificate for localhost (openssl), as (ca, key, cert) PEM bytes."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp)

    run("req", "-x509", *ec, "-days", "2", "-subj", "/CN=test-ca", "-keyout", "ca.key", "-out", "ca.pem")
    run("req", *ec, "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
        "-keyout", "host.key", "-out", "host.csr")  # fmt: skip
    run("x509", "-req", "-in", "host.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-copy_extensions", "copy", "-out", "host.pem")  # fmt: skip
    return (tmp / "ca.pem").read_bytes(), (tmp / "host.key").read_bytes(), (tmp / "host.pem").read_bytes()


async def test_over_tls_the_key_rides_on_call_credentials_for_every_call(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    _, key, cert = _certificates(tmp_path)
    monkeypatch.setenv("AGENTRUNNER_HOST_API_KEY", KEY)
    recorder = Recorder()  # type: ignore[abstract]  # a partial servicer: what it leaves out is UNIMPLEMENTED
    server, port = await _serve(recorder, grpc.ssl_server_credentials([(key, cert)]))
    try:
        async with host_channel(f"localhost:{port}", ca_file=tmp_path / "ca.pem") as channel:
            await _both_shapes(channel)
    finally:
        await server.stop(None)
    assert recorder.seen == {"ListRuns": [f"Bearer {KEY}"], "AttachRun": [f"Bearer {KEY}"]}
