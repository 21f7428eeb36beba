"""Operations a deployer relies on: the Prometheus endpoint counts what happened, and the host serves
clients and dials runners over TLS."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2

from agentrunner.v1 import host_service_pb2_grpc
from tests.helpers import next_message
from tests.integration.conftest import (
    CLI,
    REFERENCE,
    REFERENCE_ID,
    Proc,
    cli,
    completed,
    run,
    run_request,
    write_config,
)

pytestmark = pytest.mark.asyncio


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metric(text: str, name: str, labels: str) -> float:
    prefix = f"{name}{{{labels}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(scope="module")
def metrics_host(
    tmp_path_factory: pytest.TempPathFactory, reference_runner: Proc
) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("metrics")
    metrics_address = f"127.0.0.1:{_free_port()}"
    config = write_config(
        tmp / "host.yaml",
        {
            "instance_id": "metrics-host",
            "listen": {"address": "127.0.0.1:0"},
            "metrics": {"address": metrics_address},
            "database": {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "a")},
            "runners": [{"id": "ref", "address": reference_runner.value}],
            "agents": [{"id": "ref", "runner_id": REFERENCE_ID}],
            "bindings": [{"id": "ref", "event": "message.*", "target": {"agent": "ref"}}],
        },
    )
    assert cli("db", "upgrade", "--config", str(config)).returncode == 0
    host = Proc(
        [*CLI, "serve", "--config", str(config), "--log-level", "WARNING"], "AGENTRUNNER_HOST_LISTENING"
    )
    yield host.value, metrics_address
    host.kill()


async def test_metrics_endpoint_counts_runs_results_and_first_result_time(
    metrics_host: tuple[str, str],
) -> None:
    address, metrics_address = metrics_host

    def scrape() -> str:
        with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10) as resp:
            return resp.read().decode()

    before = scrape()
    assert completed(await run(address, "hello metrics")).message.content == "echo: hello metrics"
    updates = await run(address, "fail:controlled", conversation_id="conv-2")
    assert any(u.HasField("result") and u.result.HasField("run_failed") for u in updates)
    after = scrape()

    assert _metric(after, "agentrunner_runs_total", 'status="completed"') == (
        _metric(before, "agentrunner_runs_total", 'status="completed"') + 1
    )
    assert _metric(after, "agentrunner_runs_total", 'status="failed"') == (
        _metric(before, "agentrunner_runs_total", 'status="failed"') + 1
    )
    assert _metric(after, "agentrunner_results_total", 'type="message.delta"') > _metric(
        before, "agentrunner_results_total", 'type="message.delta"'
    )
    assert _metric(after, "agentrunner_time_to_first_result_seconds_count", "") >= 2
    # The reference runner pulls history through the proxy: proxy calls are counted by method and status.
    assert "agentrunner_proxy_calls_total{" in after and 'method="ListHistory"' in after


def _make_cert(tmp: Path) -> tuple[Path, Path]:
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return key, cert


async def test_tls_between_client_host_and_runner(tmp_path: Path) -> None:
    key, cert = _make_cert(tmp_path)
    runner = Proc(
        [*CLI[:2], "agentrunner", "serve", REFERENCE, "--host", "127.0.0.1", "--port", "0",
         "--tls-cert", str(cert), "--tls-key", str(key)],
        "AGENTRUNNER_LISTENING",
        env={"AGENTRUNNER_HOST_CA_FILE": str(cert)},
    )  # fmt: skip
    config = write_config(
        tmp_path / "host.yaml",
        {
            "instance_id": "tls-host",
            "listen": {"address": "127.0.0.1:0", "tls": {"cert_file": str(cert), "key_file": str(key)}},
            "database": {
                "url": f"sqlite+aiosqlite:///{tmp_path / 'host.db'}",
                "artifact_dir": str(tmp_path / "a"),
            },
            "runners": [{"id": "ref", "address": runner.value, "tls": {"ca_file": str(cert)}}],
            "agents": [{"id": "ref", "runner_id": REFERENCE_ID}],
            "bindings": [{"id": "ref", "event": "message.*", "target": {"agent": "ref"}}],
        },
    )
    assert cli("db", "upgrade", "--config", str(config)).returncode == 0
    host = Proc(
        [*CLI, "serve", "--config", str(config), "--log-level", "WARNING"], "AGENTRUNNER_HOST_LISTENING"
    )
    try:
        port = host.value.rsplit(":", 1)[1]
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        async with grpc.aio.secure_channel(f"localhost:{port}", creds) as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            first = [u async for u in stub.Run(run_request("over tls"), timeout=30)]
            second = [u async for u in stub.Run(run_request("again"), timeout=30)]
        assert completed(first).message.content == "echo: over tls"
        # The runner called back into the host over TLS: its history pull saw the first turn.
        meta = completed(second).message.metadata
        assert meta["history_items"] >= 2, meta
        # A plaintext client is refused by the TLS listener.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async with grpc.aio.insecure_channel(host.value) as channel:
                await host_service_pb2_grpc.HostServiceStub(channel).GetRun(
                    __import__("agentrunner.v1.host_service_pb2", fromlist=["x"]).GetRunRequest(run_id="x"),
                    timeout=5,
                )
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        # The host CLI's client commands speak TLS too (same CA variable as the SDK), and say clearly
        # when they cannot: a plaintext attempt, a CA file that does not exist.
        target = f"localhost:{port}"
        streamed = cli(
            "run", "from the cli", "--host", target, "--ca-file", str(cert), "--conversation", "tls"
        )
        assert streamed.returncode == 0, streamed.stderr
        assert "echo: from the cli" in streamed.stdout
        listed = cli("runners", "--host", target, "--ca-file", str(cert))
        assert listed.returncode == 0 and "plugin:langbot/" in listed.stdout and "yes" in listed.stdout
        plain = cli("runners", "--host", target)
        assert plain.returncode == 1 and "may expect TLS" in plain.stderr and "Traceback" not in plain.stderr
        missing = cli("runners", "--host", target, "--ca-file", str(tmp_path / "nope.pem"))
        assert (
            missing.returncode == 2 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
        )
    finally:
        host.kill()
        runner.kill()


async def test_health_and_reflection_on_the_host(metrics_host: tuple[str, str]) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    address, _ = metrics_host
    async with grpc.aio.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "agentrunner.v1.HostService", "agentrunner.v1.ProxyService"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)  # type: ignore[attr-defined]  # the stubs declare no methods on HealthStub
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, service
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5)  # type: ignore[attr-defined]
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)  # type: ignore[arg-type]  # stubs: sync channels only
        call = reflection.ServerReflectionInfo(timeout=5)  # type: ignore[operator]  # stubs: an untyped attribute
        await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        response = await next_message(call)
        await call.done_writing()
        names = {s.name for s in response.list_services_response.service}
        assert {"agentrunner.v1.HostService", "agentrunner.v1.ProxyService", "grpc.health.v1.Health"} <= names
        assert {"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} <= names

        # v1 (what grpcurl asks first) answers too, and the contract's files carry their comments
        v1 = channel.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        call = v1(timeout=5)
        await call.write(
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="agentrunner.v1.HostService")
        )
        response = await next_message(call)
        await call.done_writing()
        files = [
            descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in response.file_descriptor_response.file_descriptor_proto
        ]
        assert files[0].name == "agentrunner/v1/host_service.proto"
        assert "google/protobuf/timestamp.proto" in {f.name for f in files}  # its imports come along
        comments = [loc.leading_comments for loc in files[0].source_code_info.location]
        assert any("HostService is implemented by the agent host" in c for c in comments)
