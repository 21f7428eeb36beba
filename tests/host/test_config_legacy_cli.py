"""Config validation, legacy pipeline migration, and the host run as a subprocess through its CLI with
the reference runner (SDK CLI) as another process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest
import yaml

from agentrunner_host.config.legacy import LEGACY_RUNNERS, migrate_pipeline, pipeline_to_agent
from agentrunner_host.config.model import ConfigError, load_config
from tests.host.conftest import start_process, stop_process

AGENT = {"id": "a", "runner_id": "plugin:x/y/default"}


def write(tmp_path, data) -> str:
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return str(path)


def test_tied_bindings_are_a_config_error_naming_file_and_path(tmp_path) -> None:
    path = write(
        tmp_path,
        {
            "agents": [AGENT],
            "bindings": [
                {
                    "id": "b1",
                    "scope": {"type": "bot", "id": "x"},
                    "event": "message.*",
                    "target": {"agent": "a"},
                },
                {
                    "id": "b2",
                    "scope": {"type": "bot", "id": "x"},
                    "event": "message.received",
                    "target": {"agent": "a"},
                },
                {
                    "id": "b3",
                    "scope": {"type": "bot", "id": "x"},
                    "event": "message.received",
                    "priority": 5,
                    "target": {"agent": "a"},
                },
            ],
        },
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}: bindings.1:") and "ties with bindings.0" in message
    assert "b3" not in message  # a higher priority is not a tie


def test_invalid_values_name_the_path(tmp_path) -> None:
    path = write(tmp_path, {"agents": [{"id": "a", "runner_id": "not-an-id", "timeout_seconds": -1}]})
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}: agents.0.runner_id:" in str(err.value)
    assert f"{path}: agents.0.timeout_seconds:" in str(err.value)


def test_unknown_target_and_bad_yaml(tmp_path) -> None:
    path = write(tmp_path, {"bindings": [{"id": "b", "target": {"agent": "nobody"}}]})
    with pytest.raises(ConfigError, match=r"bindings\.0\.target\.agent: unknown agent 'nobody'"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"host\.yaml: line 2: invalid YAML"):
        load_config(write(tmp_path, "agents: [\n"))


def test_defaults_and_env_override(tmp_path, monkeypatch) -> None:
    cfg = load_config(write(tmp_path, {"agents": [AGENT]}))
    assert cfg.agents[0].timeout_seconds == 300 and cfg.database.url.startswith("sqlite")
    monkeypatch.setenv("AGENTRUNNER_DATABASE_URL", "postgresql+psycopg://u@h/db")
    monkeypatch.setenv("AGENTRUNNER_RUNNER_TOKENS", '{"r": "s3cret"}')
    cfg = load_config(write(tmp_path, {"runners": [{"id": "r", "address": "x:1", "auth_token": "plain"}]}))
    from agentrunner_host.config.model import HostEnv

    assert cfg.database.url == "postgresql+psycopg://u@h/db"
    assert cfg.runners[0].resolved_token(HostEnv()) == "s3cret"


LEGACY: dict[str, Any] = {
    "ai": {
        "runner": {"runner": "dify-service-api"},
        "dify-service-api": {"base-url": "https://dify.example", "api-key": "k"},
        "local-agent": {"model": "m1", "prompt": [{"role": "system", "content": "be nice"}]},
    },
    "output": {"misc": {"stream": True}},
}


def test_migration_maps_runner_and_moves_every_legacy_section() -> None:
    migration = migrate_pipeline(LEGACY)
    ai = migration.config["ai"]
    assert ai["runner"] == {"id": "plugin:langbot/dify-agent/default"}
    assert ai["runner_config"]["plugin:langbot/dify-agent/default"] == {
        "base-url": "https://dify.example",
        "api-key": "k",
    }
    assert ai["runner_config"]["plugin:langbot/local-agent/default"]["model"] == "m1"
    assert "dify-service-api" not in ai and "local-agent" not in ai
    assert len(migration.changes) == 3
    assert LEGACY["ai"]["runner"] == {"runner": "dify-service-api"}  # input untouched
    # the new shape is read as is: nothing to change
    again = migrate_pipeline(migration.config)
    assert not again.changed and again.config == migration.config
    agent = pipeline_to_agent(LEGACY, "support")
    assert agent["runner_id"] == "plugin:langbot/dify-agent/default" and agent["delivery_policy"] == {
        "streaming": True
    }
    assert set(LEGACY_RUNNERS) == {
        "local-agent",
        "dify-service-api",
        "n8n-service-api",
        "coze-api",
        "dashscope-app-api",
        "langflow-api",
        "tbox-app-api",
    }


def test_migrate_pipeline_cli_rewrites_the_file(tmp_path) -> None:
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(LEGACY))
    out = subprocess.run(
        [sys.executable, "-m", "agentrunner_host", "migrate-pipeline", str(path), "--agent-id", "support"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "ai.dify-service-api -> ai.runner_config['plugin:langbot/dify-agent/default']" in out.stdout
    rewritten = json.loads(path.read_text())
    assert rewritten["ai"]["runner"]["id"] == "plugin:langbot/dify-agent/default"


def test_host_subprocess_via_cli_with_reference_runner(tmp_path) -> None:
    runner, runner_address = start_process(
        [
            sys.executable,
            "-m",
            "agentrunner",
            "serve",
            "agentrunner_runners.reference:ReferenceRunner",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ]
    )
    config = write(
        tmp_path,
        {
            "listen": {"address": "127.0.0.1:0"},
            "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'host.db'}"},
            "runners": [{"id": "ref", "address": runner_address}],
            "agents": [
                {"id": "demo", "runner_id": "plugin:langbot/reference/default", "event_types": ["message.*"]}
            ],
            "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "demo"}}],
        },
    )
    cli = [sys.executable, "-m", "agentrunner_host"]
    refused = subprocess.run([*cli, "serve", "--config", config], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 3 and not refused.stdout
    assert "agentrunner-host db upgrade" in " ".join(refused.stderr.split())
    upgraded = subprocess.run(
        [*cli, "db", "upgrade", "--config", config], capture_output=True, text=True, timeout=60
    )
    assert upgraded.returncode == 0 and "upgraded to" in upgraded.stdout, upgraded.stderr
    host = subprocess.Popen(
        [sys.executable, "-m", "agentrunner_host", "serve", "--config", config],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert host.stdout is not None
        line = host.stdout.readline()
        assert line.startswith("AGENTRUNNER_HOST_LISTENING "), line
        address = line.split()[1]
        env = {**os.environ, "COLUMNS": "200"}
        reply = subprocess.run(
            [*cli, "run", "hi there", "--host", address], capture_output=True, text=True, timeout=60, env=env
        )
        assert reply.returncode == 0, reply.stderr
        assert "echo: hi there" in reply.stdout
        run_id = re.search(r"run (run_[0-9a-f]+):", reply.stderr).group(1)  # the closing status line
        assert f"started {run_id}" in reply.stderr  # and printed as soon as the host accepted the event
        shown = subprocess.run(
            [*cli, "runs", "show", run_id, "--host", address],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert "completed" in shown.stdout and "run completed" in shown.stdout
        assert "state_updated" in shown.stdout  # the stored results, in sequence order
        assert "echo: hi there" in shown.stdout and "deltas" in shown.stdout  # one entry per message
        listed = subprocess.run(
            [*cli, "runners", "--host", address], capture_output=True, text=True, timeout=60, env=env
        )
        assert "plugin:langbot/reference/default" in listed.stdout
        failed = subprocess.run(
            [*cli, "run", "fail:controlled", "--host", address],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert failed.returncode == 1 and "runner.error" in failed.stdout + failed.stderr
    finally:
        host.terminate()
        host.wait(timeout=10)
        stop_process(runner)
