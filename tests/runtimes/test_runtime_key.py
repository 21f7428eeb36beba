"""The runtime key, as `python -m agentrunner connect` handles it: read from a file named by
`AGENTRUNNER_RUNTIME_KEY_FILE` (or from `AGENTRUNNER_RUNTIME_KEY`), never inherited by what the runners
start (a runner's child process sees neither variable nor the key), never sent over plaintext to a host
that is not on loopback, and both variables set is a one-line error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from agentrunner.v1 import host_service_pb2_grpc
from tests.runtimes.env_runner import ENV_ID
from tests.runtimes.processes import ROOT, host_cli, start_host, start_runtime, write_config
from tests.runtimes.support import digest
from tests.runtimes.test_processes import request, terminal

KEY = "arr_runtime-key-of-the-env-test-0123456789"
ENV_RUNNER = "tests.runtimes.env_runner:EnvRunner"


def config(tmp: Path) -> Path:
    data = {
        "instance_id": "host-1",
        "listen": {"address": "127.0.0.1:0"},
        "database": {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "artifacts")},
        "runtimes": {"clients": [{"id": "env", "api_key_sha256": [digest(KEY)], "runner_ids": [ENV_ID]}]},
        "agents": [{"id": "env", "runner_id": ENV_ID, "timeout_seconds": 30}],
        "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "env"}}],
    }
    path = write_config(tmp / "host.yaml", data)
    assert host_cli("db", "upgrade", "--config", str(path)).returncode == 0
    return path


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize("source", ["AGENTRUNNER_RUNTIME_KEY", "AGENTRUNNER_RUNTIME_KEY_FILE"])
async def test_the_key_reaches_the_host_and_no_child_of_a_runner_inherits_it(
    tmp_path: Path, source: str
) -> None:
    key_file = tmp_path / "runtime.key"
    key_file.write_text(KEY + "\n")
    env = {source: str(key_file) if source.endswith("_FILE") else KEY}
    host, address = start_host(config(tmp_path))
    runtime = start_runtime(address, "env-rt", target=ENV_RUNNER, env=env)
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            updates = [u async for u in stub.Run(request(KEY, "c1"), timeout=30)]
        # (connected at all: the key from the file was accepted)
        assert terminal(updates).run_completed.message.content == "names=- leaked=False"
    finally:
        runtime.stop()
        host.stop()
    assert not any(KEY in line for line in runtime.stderr + host.stderr)


def connect(env: dict[str, str], address: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRUNNER_")}
    return subprocess.run(
        [sys.executable, "-m", "agentrunner", "connect", address, ENV_RUNNER, "--detect", ""],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_key_is_not_sent_over_plaintext_to_a_host_off_loopback() -> None:
    # (192.0.2.1 is TEST-NET-1: the refusal comes before any dial)
    done = connect({"AGENTRUNNER_RUNTIME_KEY": KEY}, "192.0.2.1:50051")
    assert done.returncode == 1
    assert done.stderr.startswith(
        "error: 192.0.2.1:50051 is not a loopback address and the connection has no TLS"
    )
    assert KEY not in done.stderr + done.stdout


def test_both_key_variables_set_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "k").write_text(KEY)
    done = connect(
        {"AGENTRUNNER_RUNTIME_KEY": KEY, "AGENTRUNNER_RUNTIME_KEY_FILE": str(tmp_path / "k")}, "127.0.0.1:9"
    )
    assert (done.returncode, done.stderr.strip()) == (
        1,
        "error: both AGENTRUNNER_RUNTIME_KEY and AGENTRUNNER_RUNTIME_KEY_FILE are set: keep one",
    )
