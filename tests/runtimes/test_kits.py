"""The Go and TypeScript kits' connect mode against our host: each example runner, started as a runtime
(`-connect` / `--connect`), registers with its SDK language and serves a run end to end (its history
call goes to the host it dialed). The Python kit is covered by the other suites; `make conformance` runs
the runner kit over the connect path for all three."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest

from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from tests.runtimes.processes import ROOT, host_cli, start_host, start_runtime, write_config

pytestmark = [pytest.mark.timeout(600)]

KITS = [
    pytest.param("go", "plugin:example/go-counter/default", id="go"),
    pytest.param("ts", "plugin:example/ts-counter/default", id="ts"),
]


def build(kit: str, tmp: Path) -> list[str]:
    if kit == "go":
        if shutil.which("go") is None:
            pytest.skip("needs go on PATH")
        binary = tmp / "go-counter"
        subprocess.run(
            ["go", "build", "-o", str(binary), "./examples/counter"], cwd=ROOT / "sdk_go", check=True
        )
        return [
            str(binary),
            "-connect",
            "{address}",
            "-runtime-id",
            "go-runtime",
            "-detect",
            "",
            "-label",
            "kit=go",
        ]
    if shutil.which("npm") is None or not (ROOT / "sdk_ts" / "node_modules").is_dir():
        pytest.skip("needs npm and sdk_ts/node_modules (make test-ts)")
    subprocess.run(["npm", "run", "--silent", "build"], cwd=ROOT / "sdk_ts", check=True)
    return [
        "node",
        str(ROOT / "sdk_ts" / "dist" / "examples" / "counter.js"),
        "--connect",
        "{address}",
        "--runtime-id",
        "ts-runtime",
        "--detect",
        "",
        "--label",
        "kit=ts",
    ]


@pytest.mark.parametrize(("kit", "runner_id"), KITS)
@pytest.mark.asyncio(loop_scope="function")
async def test_a_kit_serves_a_run_through_connect(tmp_path: Path, kit: str, runner_id: str) -> None:
    argv = build(kit, tmp_path)
    config = write_config(
        tmp_path / "host.yaml",
        {
            "instance_id": "kits",
            "listen": {"address": "127.0.0.1:0"},
            "database": {
                "url": f"sqlite+aiosqlite:///{tmp_path / 'host.db'}",
                "artifact_dir": str(tmp_path / "a"),
            },
            "agents": [{"id": "counter", "runner_id": runner_id}],
            "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "counter"}}],
        },
    )
    assert host_cli("db", "upgrade", "--config", str(config)).returncode == 0
    host, address = start_host(config)
    runtime = start_runtime(address, "", command=[a.replace("{address}", address) for a in argv])
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            req = host_service_pb2.HostServiceRunRequest()
            req.event.event_type = "message.received"
            req.event.conversation.conversation_id = "c1"
            req.event.input.text = f"hello {kit}"
            req.event.delivery.supports_streaming = True
            updates = [u async for u in stub.Run(req, timeout=60)]
            listed = await stub.ListRuntimes(host_service_pb2.ListRuntimesRequest(), timeout=10)
            got = await stub.GetRun(
                host_service_pb2.GetRunRequest(run_id=updates[0].accepted.run_id), timeout=10
            )
    finally:
        runtime.stop()
        host.stop()
    terminal = next(u.result for u in updates if u.HasField("result") and u.result.HasField("run_completed"))
    assert terminal.run_completed.message.content == f"echo: hello {kit}"
    assert terminal.metadata["history"] == "1 earlier items"  # (its ListHistory reached the host it dialed)
    (runtime_row,) = listed.runtimes
    language = {"go": "go", "ts": "typescript"}[kit]
    assert (runtime_row.runtime_id, runtime_row.sdk.language, dict(runtime_row.labels)) == (
        f"{kit}-runtime",
        language,
        {"kit": kit},
    )
    assert got.run.runtime_id == f"{kit}-runtime"


@pytest.mark.parametrize(("kit", "runner_id"), KITS)
def test_a_kit_keeps_its_runtime_key_off_a_plaintext_network(
    tmp_path: Path, kit: str, runner_id: str
) -> None:
    """As the Python kit: a key from the environment is not dialed in clear to a host off loopback (the
    refusal comes before any dial: 192.0.2.1 is TEST-NET-1), and both key variables set is an error."""
    argv = [a.replace("{address}", "192.0.2.1:50051") for a in build(kit, tmp_path)]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRUNNER_")}
    key = "arr_kit-key-0123456789"

    def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env={**clean, **env}, capture_output=True, text=True, timeout=60)

    done = run({"AGENTRUNNER_RUNTIME_KEY": key})
    assert done.returncode == 1, done.stderr
    assert "error: 192.0.2.1:50051 is not a loopback address and the connection has no TLS" in done.stderr
    assert key not in done.stderr + done.stdout
    (tmp_path / "k").write_text(key)
    both = run({"AGENTRUNNER_RUNTIME_KEY": key, "AGENTRUNNER_RUNTIME_KEY_FILE": str(tmp_path / "k")})
    assert both.returncode == 1 and "keep one" in both.stderr, both.stderr
