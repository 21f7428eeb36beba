"""The CLI as a user meets it: one-line errors (busy ports named with their holder, unknown log
levels, missing files), JSON logs only, `--version`, and finding runs: `run` printing the id at once and
on Ctrl-C, `runs list` with filters, `runs show` following a live run and grouping deltas per message,
`runs cancel`, `config check` naming bad runner_config keys by path."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import yaml

from tests.host.conftest import start_process, stop_process

pytestmark = pytest.mark.timeout(300)  # a dozen CLI processes; each import is slow on a loaded machine
CLI = [sys.executable, "-m", "agentrunner_host"]
ENV = {**os.environ, "COLUMNS": "200"}


def cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=ENV)


def _config(tmp: pathlib.Path, runner: str = "127.0.0.1:9", **extra: Any) -> pathlib.Path:
    data: dict[str, Any] = {
        "listen": {"address": "127.0.0.1:0"},
        "database": {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "artifacts")},
        "registry": {"retry_interval_seconds": 0.5},
        "runners": [{"id": "ref", "address": runner}],
        "agents": [{"id": "echo", "runner_id": "plugin:langbot/reference/default",
                    "runner_config": {"prefix": "echo: "}, "event_types": ["message.*"]}],
        "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "echo"}}],
        **extra,
    }  # fmt: skip
    path = tmp / "host.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli("db", "upgrade", "--config", str(path)).returncode == 0
    return path


def _error_lines(stderr: str) -> list[str]:
    """The lines that are not JSON log records (every log line must be one)."""
    out = []
    for line in stderr.splitlines():
        try:
            json.loads(line)
        except ValueError:
            out.append(line)
    return out


def test_busy_ports_are_one_line_errors_naming_port_and_holder(tmp_path: pathlib.Path) -> None:
    config = _config(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        grpc_busy = cli("serve", "--config", str(config), "--address", f"127.0.0.1:{port}")
        metrics = yaml.safe_load(config.read_text())
        metrics["metrics"] = {"address": f"127.0.0.1:{port}"}
        config.write_text(yaml.safe_dump(metrics))
        metrics_busy = cli("serve", "--config", str(config))
    for done, what in ((grpc_busy, "listen.address"), (metrics_busy, "metrics.address")):
        assert done.returncode == 3
        assert _error_lines(done.stderr) == [
            f"error: cannot listen on 127.0.0.1:{port} ({what}): port {port} is already in use by "
            f"pid {os.getpid()} ({psutil.Process().name()})"
        ], done.stderr
    # on a database at head the host serves without Alembic (issue 37: it is not even imported) ...
    loggers = [
        json.loads(line).get("logger") for line in grpc_busy.stderr.splitlines() if line.startswith("{")
    ]
    assert "alembic.runtime.migration" not in loggers
    # ... and where Alembic does run (a database not at head, refused), its lines are JSON records too,
    # nothing plain precedes them
    unmigrated = yaml.safe_load(config.read_text())
    unmigrated["database"]["url"] = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    config.write_text(yaml.safe_dump(unmigrated))
    refused = cli("serve", "--config", str(config))
    assert refused.returncode == 3
    lines = refused.stderr.splitlines()
    first_plain = next(i for i, line in enumerate(lines) if not line.startswith("{"))
    assert lines[first_plain].startswith("refusing to serve: "), refused.stderr
    assert any(json.loads(line).get("logger") == "alembic.runtime.migration" for line in lines[:first_plain])


def test_bad_input_and_unreachable_hosts_are_one_line_errors(tmp_path: pathlib.Path) -> None:
    level = cli("serve", "--config", str(tmp_path / "any.yaml"), "--log-level", "loud")
    assert (
        level.returncode == 2 and "'loud' is not one of" in level.stderr and "Traceback" not in level.stderr
    )
    missing = cli("migrate-pipeline", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2
    assert (
        missing.stderr.strip() == f"error: {tmp_path / 'nope.yaml'}: cannot read: No such file or directory"
    )
    version = cli("--version")
    release = (pathlib.Path(__file__).resolve().parents[2] / "VERSION").read_text().strip()
    assert version.returncode == 0 and version.stdout.startswith(f"agentrunner-host {release} ")
    down = cli("runners", "--host", "127.0.0.1:9")
    assert down.returncode == 1
    assert down.stderr.strip() == (
        "error: cannot reach 127.0.0.1:9: connection refused (nothing listens there: is the server running?)"
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("cli-ux")
    runner, address = start_process(
        [sys.executable, "-m", "agentrunner", "serve", "agentrunner_runners.reference:ReferenceRunner"]
    )
    config = _config(tmp, address)
    host = subprocess.Popen([*CLI, "serve", "--config", str(config)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=ENV)  # fmt: skip
    assert host.stdout is not None
    line = host.stdout.readline()
    assert line.startswith("AGENTRUNNER_HOST_LISTENING "), line
    yield line.split()[1]
    host.terminate()
    host.wait(timeout=15)
    stop_process(runner)


def _started(proc: subprocess.Popen[str]) -> str:
    """Reads `run`'s stderr up to the line printed when the host accepted the event."""
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.startswith("started run_"), line
    return line.split()[1]


def _background_run(address: str, text: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, "run", text, "--host", address, "--conversation", "ux"], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_find_follow_and_cancel_runs(served: str) -> None:
    live = _background_run(served, "slow:300")
    run_id = _started(live)  # printed at once, long before the run ends
    listed = json.loads(cli("runs", "list", "--host", served, "--status", "running", "--json").stdout)
    assert run_id in [r["run_id"] for r in listed["runs"]]
    assert cli("runs", "cancel", run_id, "--host", served).returncode == 0
    _out, err = live.communicate(timeout=30)
    assert live.returncode == 1 and f"run {run_id}: cancelled" in err, err
    shown = json.loads(cli("runs", "show", run_id, "--host", served, "--json").stdout)
    assert shown["status"] == "cancelled"
    (message,) = [e for e in shown["timeline"] if e["kind"] == "message"]
    assert message["deltas"] >= 1 and message["text"].startswith(
        "tick 0 tick 1 "
    )  # one entry, not one per delta

    following = _background_run(served, "slow:100")
    follow_id = _started(following)
    shown_live = cli("runs", "show", follow_id, "--host", served)  # follows until the run ends
    assert shown_live.returncode == 0 and "tick 99" in shown_live.stdout, shown_live.stderr
    assert "following" in shown_live.stdout  # it was live when `runs show` started
    assert f"run {follow_id}: completed" in shown_live.stderr
    following.communicate(timeout=30)
    finished = cli("runs", "show", follow_id, "--host", served)
    assert "100 deltas" in finished.stdout and "run completed" in finished.stdout
    assert (
        cli("runs", "list", "--host", served, "--agent", "echo", "--conversation", "ux").stdout.count("run_")
        >= 2
    )
    assert "no runs match" in cli("runs", "list", "--host", served, "--agent", "nobody").stderr


def test_ctrl_c_on_run_cancels_it_and_prints_the_id(served: str) -> None:
    proc = _background_run(served, "slow:300")
    run_id = _started(proc)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and f"interrupted: run {run_id} cancelled" in err, err
    assert "Traceback" not in err, err
    for _ in range(50):
        status = json.loads(cli("runs", "show", run_id, "--host", served, "--json", "--no-follow").stdout)[
            "status"
        ]
        if status != "running":
            break
        time.sleep(0.2)
    assert status == "cancelled"


def test_config_check_names_bad_runner_config_by_path(served: str, tmp_path: pathlib.Path) -> None:
    address = json.loads(cli("runners", "--host", served, "--json").stdout)["endpoints"][0]["address"]
    data = yaml.safe_load(pathlib.Path(_config(tmp_path, address)).read_text())
    data["agents"][0]["runner_config"] = {"prefx": "x", "prefix": 3}
    data["bindings"].append(
        {"id": "late", "event": "message.received", "priority": -1, "target": {"agent": "echo"}}
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    checked = cli("config", "check", "--config", str(bad))
    assert checked.returncode == 1, checked.stdout
    lines = checked.stdout.splitlines()
    assert "error: agents.0.runner_config.prefx: unknown key (did you mean 'prefix'?)" in lines
    assert "error: agents.0.runner_config.prefix: expected a string, got int" in lines
    assert any(line.startswith("warning: bindings.1: 'late' never matches") for line in lines)
    data["agents"][0]["runner_config"] = {"prefix": "ok: "}
    data["bindings"].pop()
    bad.write_text(yaml.safe_dump(data))
    assert cli("config", "check", "--config", str(bad)).returncode == 0
