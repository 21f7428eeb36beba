"""The operator's side, as processes: `agentrunner-host runtimes list / show / drain` (tables and
`--json`), `runs show` naming the runtime, `auth new-key --runtime` config lines that a runtime then
connects with, `config check` on runtime coverage, and the Prometheus metrics of runtimes."""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.runtimes.processes import host_cli, start_host, start_runtime, write_config
from tests.runtimes.support import REFERENCE_ID

#: a dozen CLI processes, each importing the host (seconds apiece on a loaded 2-core machine)
pytestmark = pytest.mark.timeout(420)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli_json(*args: str) -> dict[str, Any]:
    done = host_cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_new_key_list_show_drain_runs_show_and_metrics(tmp_path: Path) -> None:
    made = host_cli("auth", "new-key", "--runtime", "laptops")
    assert made.returncode == 0
    key = re.search(r"API key \(shown once, store it as a secret\): (\S+)", made.stderr).group(1)
    assert key.startswith("arr_") and key not in made.stdout  # stdout goes in the config: only the hash
    (client,) = yaml.safe_load(made.stdout)
    assert client["id"] == "laptops" and client["runner_ids"] == "*"
    assert "AGENTRUNNER_RUNTIME_KEY=" in made.stderr
    metrics_port = free_port()
    config = write_config(
        tmp_path / "host.yaml",
        {
            "instance_id": "host-1",
            "listen": {"address": "127.0.0.1:0"},
            "metrics": {"address": f"127.0.0.1:{metrics_port}"},
            "database": {
                "url": f"sqlite+aiosqlite:///{tmp_path / 'host.db'}",
                "artifact_dir": str(tmp_path / "a"),
            },
            "runtimes": {"clients": [client]},
            "agents": [{"id": "ref", "runner_id": REFERENCE_ID}],
            "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "ref"}}],
        },
    )
    assert host_cli("db", "upgrade", "--config", str(config)).returncode == 0
    host, address = start_host(config)
    runtime = start_runtime(
        address, "laptop-1", key=key, extra=["--label", "workspace=team-a", "--slots", "3"]
    )
    try:
        listed = cli_json("runtimes", "list", "--host", address)["runtimes"]
        assert [(r["runtime_id"], r["status"], r["client_id"], r["slots"], r["labels"]) for r in listed] == [
            ("laptop-1", "online", "laptops", 3, {"workspace": "team-a"})
        ]
        table = host_cli("runtimes", "list", "--host", address)
        assert "laptop-1" in table.stdout and "online" in table.stdout and "0/3" in table.stdout
        ran = host_cli("run", "hello", "--host", address)
        assert ran.returncode == 0 and "echo: hello" in ran.stdout
        run_id = re.search(r"run (run_[0-9a-f]+):", ran.stderr).group(1)
        shown = cli_json("runs", "show", run_id, "--host", address)
        assert shown["runtime_id"] == "laptop-1"
        assert "runtime_id" in host_cli("runs", "show", run_id, "--host", address).stdout
        detail = cli_json("runtimes", "show", "laptop-1", "--host", address)
        assert [r["run_id"] for r in detail["runs"]] == [run_id]
        assert [e["kind"] for e in detail["events"]][:3] == ["run_ended", "run_claimed", "connected"]
        drained = host_cli("runtimes", "drain", "laptop-1", "--reason", "maintenance", "--host", address)
        assert drained.returncode == 0 and "runtime laptop-1 drained (status draining" in drained.stdout
        refused = host_cli("run", "hello again", "--host", address)
        assert (
            "runner.unavailable" in refused.stdout + refused.stderr
            and "draining" in refused.stdout + refused.stderr
        )
        assert host_cli("runtimes", "drain", "laptop-1", "--resume", "--host", address).returncode == 0
        unknown = host_cli("runtimes", "show", "nope", "--host", address)
        assert unknown.returncode == 1 and unknown.stderr.strip() == "error: NOT_FOUND: no runtime 'nope'"
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
            text = response.read().decode()
        assert "agentrunner_runtimes_connected 1.0" in text
        assert 'agentrunner_runtime_slots{runtime="laptop-1"} 3.0' in text
        assert 'agentrunner_runtime_claims_total{runtime="laptop-1"} 1.0' in text
    finally:
        runtime.stop()
        host.stop()


def test_config_check_reports_agents_no_endpoint_or_runtime_can_serve(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "host.yaml",
        {
            "listen": {"address": "127.0.0.1:0"},
            "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'host.db'}"},
            "runtimes": {
                "clients": [
                    {
                        "id": "laptops",
                        "api_key_env": "LAPTOP_KEY",
                        "runner_ids": [REFERENCE_ID],
                        "labels": ["workspace=team-a"],
                    }
                ]
            },
            "agents": [
                {"id": "served", "runner_id": REFERENCE_ID},
                {
                    "id": "wrong-labels",
                    "runner_id": REFERENCE_ID,
                    "runtime_selector": {"workspace": "team-b"},
                },
                {"id": "nobody", "runner_id": "plugin:x/y/default"},
            ],
        },
    )
    checked = host_cli("config", "check", "--config", str(config), "--json")
    assert checked.returncode == 1
    problems = {p["path"]: p for p in json.loads(checked.stdout)["problems"]}
    assert problems["agents.1.runtime_selector"]["severity"] == "error"
    assert "with the labels workspace=team-b" in problems["agents.1.runtime_selector"]["message"]
    assert "a runtime may serve it once one connects (laptops)" in problems["agents.0.runner_id"]["message"]
    assert "no runtime may serve it either" in problems["agents.2.runner_id"]["message"]
    assert os.environ.get("LAPTOP_KEY") is None  # (the key's variable need not be set to check the config)
