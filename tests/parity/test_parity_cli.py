"""The CLI end to end: `agentrunner-host serve` and the SDK runner as separate processes; `run` shows
replies, `run.log` lines and interactions; `interact` answers one; `runs show` prints the logs."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.parity.support import CLI, ROOT, Proc, host_config, start_runner


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    runner = start_runner()
    directory = tmp_path_factory.mktemp("parity-cli")
    config = host_config(
        runner.value,
        {"url": f"sqlite+aiosqlite:///{directory / 'host.db'}", "artifact_dir": str(directory / "a")},
    )
    path = directory / "host.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    upgraded = cli("db", "upgrade", "--config", str(path))
    assert upgraded.returncode == 0, upgraded.stderr
    host = Proc(
        [*CLI, "serve", "--config", str(path), "--log-level", "WARNING"], "AGENTRUNNER_HOST_LISTENING"
    )
    try:
        yield host.value
    finally:
        host.kill()
        runner.kill()


def run_id_of(proc: subprocess.CompletedProcess[str]) -> str:
    found = re.search(r"run (run_[0-9a-f]+):", proc.stderr)
    assert found, proc.stderr
    return found.group(1)


def test_run_shows_replies_and_log_lines(served: str) -> None:
    replied = cli("run", 'reply {"text": "hello from a reply"}', "--host", served)
    assert replied.returncode == 0, replied.stderr
    assert "hello from a reply" in replied.stdout
    logged = cli("run", "log", "--host", served)
    assert logged.returncode == 0, logged.stderr
    assert "[info] starting" in logged.stdout and "[warning] careful now" in logged.stdout
    shown = cli("runs", "show", run_id_of(logged), "--host", served)
    assert shown.returncode == 0, shown.stderr
    assert "[warning] careful now" in shown.stdout


def test_run_shows_an_interaction_and_interact_answers_it(served: str, tmp_path: Path) -> None:
    asked = cli("run", 'form {"id": "cli-form-1"}', "--host", served)
    assert asked.returncode == 0, asked.stderr
    out = asked.stdout
    assert "? interaction cli-form-1 (expires " in out
    assert "Deploy settings" in out and "env (select, required): Environment options: staging, prod" in out
    assert "actions: deploy (Deploy), cancel (Cancel)" in out
    answered = cli(
        "interact",
        "cli-form-1",
        "--action",
        "deploy",
        "--value",
        "env=prod",
        "--value",
        "replicas=2",
        "--host",
        served,
    )
    assert answered.returncode == 0, answered.stderr
    flat = "".join(answered.stdout.splitlines())  # the terminal wraps long lines
    report = json.loads(flat[flat.index("{") :])
    assert report["event_type"] == "interaction.submitted"
    assert report["values"] == {"env": "prod", "replicas": 2}
    again = cli("interact", "cli-form-1", "--action", "deploy", "--value", "env=prod", "--host", served)
    assert again.returncode == 1 and "FAILED_PRECONDITION" in again.stderr
