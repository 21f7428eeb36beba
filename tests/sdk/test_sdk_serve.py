"""`python -m agentrunner serve` as a real subprocess: ready line, health, SIGTERM mid-run, busy port, TLS."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrunner import start_server
from agentrunner.errors import RateLimitedError, RunnerUnavailableError
from agentrunner.server import RunnerServicer
from agentrunner.testing import HostDouble, make_context
from agentrunner.v1 import runner_service_pb2, runner_service_pb2_grpc
from agentrunner_runners.reference import ReferenceRunner

pytestmark = pytest.mark.asyncio

TARGET = "agentrunner_runners.reference:ReferenceRunner"


async def launch(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentrunner",
        "serve",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
    assert line.startswith("AGENTRUNNER_LISTENING "), line
    return proc, line.split()[1]


async def test_sigterm_during_a_run_ends_it_cancelled_and_busy_port_fails() -> None:
    proc, address = await launch(TARGET, "--port", "0", "--grace", "0.3")
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)  # type: ignore[attr-defined]  # the stubs declare no methods on HealthStub
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            listed = await runner_service_pb2_grpc.RunnerServiceStub(channel).ListRunners(
                runner_service_pb2.ListRunnersRequest(), timeout=5
            )
            assert [m.id for m in listed.runners] == ["plugin:langbot/reference/default"]

            # The same port again: loud failure, exit code 2, nothing on stdout.
            port = address.rsplit(":", 1)[1]
            busy = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "agentrunner", "serve", TARGET, "--port", port,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(busy.communicate(), 20)
            assert busy.returncode == 2
            assert out == b""
            assert b"already in use" in err

            async with HostDouble() as host:
                handle = await host.start_run(address, "stall", runner_id="plugin:langbot/reference/default")
                await host.wait_control(handle.run_id)
                proc.send_signal(signal.SIGTERM)
                outcome = await handle.wait(10)
        assert outcome.types == ["run.failed"]
        assert outcome.failure is not None and outcome.failure.code == "cancelled"
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_programmatic_server_returns_its_port_and_refuses_runs_while_draining() -> None:
    server = await start_server([ReferenceRunner])
    assert isinstance(server, int) and server > 0 and server.port == int(server)
    async with HostDouble() as host:
        out = await host.run(f"127.0.0.1:{server}", "hi", runner_id="plugin:langbot/reference/default")
        assert out.text == "echo: hi"
        stall = await host.start_run(server.address, "stall", runner_id="plugin:langbot/reference/default")
        await host.wait_control(stall.run_id)
        stopping = asyncio.create_task(server.stop(0.5))
        await asyncio.sleep(0.05)
        late = await host.start_run(server.address, "hi", runner_id="plugin:langbot/reference/default")
        outcome = await late.wait(check=False)
        assert outcome.code == grpc.StatusCode.UNAVAILABLE
        assert isinstance(outcome.error, RunnerUnavailableError)
        stalled = await stall.wait()
        assert stalled.failure is not None and stalled.failure.code == "cancelled"
        await stopping


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl binary")
async def test_tls(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    openssl = await asyncio.create_subprocess_exec(
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert await asyncio.wait_for(openssl.wait(), 30) == 0
    server = await start_server([ReferenceRunner], tls_cert=cert, tls_key=key)
    try:
        creds = grpc.ssl_channel_credentials(cert.read_bytes())
        async with grpc.aio.secure_channel(server.address, creds) as channel:
            stub = runner_service_pb2_grpc.RunnerServiceStub(channel)
            request = runner_service_pb2.RunRequest(
                runner_id="plugin:langbot/reference/default",
                context=make_context("over tls", streaming=False),
            )
            got = [r.result async for r in stub.Run(request, timeout=10)]
        assert got[-1].run_completed.message.content == "echo: over tls"
    finally:
        await server.stop(0.1)


async def test_json_logs_carry_the_run_id_and_trace_id() -> None:
    """`AGENTRUNNER_LOG_FORMAT=json`: one JSON object per line on stderr, and what a run logs names the
    run and its trace (the runner's crash here), so a log pipeline joins it with the host's lines."""
    proc, address = await launch(TARGET, "--port", "0", env={"AGENTRUNNER_LOG_FORMAT": "json"})
    try:
        async with HostDouble() as host:
            handle = await host.start_run(address, "fail", runner_id="plugin:langbot/reference/default")
            outcome = await handle.wait(20)
        assert outcome.failure is not None and outcome.failure.code == "runner.exception"
        proc.send_signal(signal.SIGTERM)
        assert proc.stderr is not None
        err = (await asyncio.wait_for(proc.stderr.read(), 20)).decode()
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line is JSON
    (crash,) = [line for line in lines if line["event"] == "runner raised"]
    assert crash["run_id"] == handle.run_id and crash["level"] == "error"
    assert len(crash["trace_id"]) == 32 and crash["trace_id"] == handle.context.runtime.trace_id
    assert "reference runner failure requested" in crash["error"]


async def test_the_cli_leaves_grpc_verbosity_out_of_the_environment_its_agents_inherit() -> None:
    """The C core's log level is set only while grpc loads (`agentrunner._grpc_env`): after the CLI's
    module loads, GRPC_VERBOSITY is unset again, so a CLI agent a runner starts sees its own logs."""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    code = "import os, agentrunner.cli; print(os.environ.get('GRPC_VERBOSITY'))"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert out.decode().strip() == "None"


async def test_a_run_beyond_the_servers_open_run_cap_is_refused_with_retry_info() -> None:
    """Issue 37: a runner server holds at most `max_open_runs` runs at once; one more is refused
    RESOURCE_EXHAUSTED (`RATE_LIMITED`, retryable) with a `RetryInfo` delay before the runner sees it,
    and is admitted again once a run has ended."""
    server = await start_server([ReferenceRunner], max_open_runs=2)
    ref = "plugin:langbot/reference/default"
    try:
        async with HostDouble() as host:
            held = [await host.start_run(server.address, "stall", runner_id=ref) for _ in range(2)]
            for handle in held:
                await host.wait_control(handle.run_id)
            refused = await (await host.start_run(server.address, "hi", runner_id=ref)).wait(check=False)
            assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert isinstance(refused.error, RateLimitedError)
            assert refused.error.retryable and refused.error.retry_delay == 1.0
            assert refused.error.metadata["maxOpenRuns"] == "2"
            held[0].cancel()
            await held[0].wait(check=False)
            await asyncio.sleep(0.1)  # the handler leaves `active` after its last result
            again = await host.run(server.address, "hi", runner_id=ref)
            assert again.text == "echo: hi"
    finally:
        await server.stop(0.2)


async def test_the_open_run_cap_defaults_to_ten_thousand_and_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default cap matches the host's (10,000); `AGENTRUNNER_MAX_OPEN_RUNS` overrides it, and a
    value that is not a positive integer stops the server with a one-line error (exit 1)."""
    monkeypatch.delenv("AGENTRUNNER_MAX_OPEN_RUNS", raising=False)
    assert RunnerServicer([ReferenceRunner()]).max_open_runs == 10_000
    monkeypatch.setenv("AGENTRUNNER_MAX_OPEN_RUNS", "25")
    assert RunnerServicer([ReferenceRunner()]).max_open_runs == 25
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentrunner", "serve", TARGET, "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "AGENTRUNNER_MAX_OPEN_RUNS": "lots"},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1 and out == b""
    assert b"AGENTRUNNER_MAX_OPEN_RUNS must be a positive integer" in err
