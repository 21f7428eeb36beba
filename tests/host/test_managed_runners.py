"""Runner processes the host starts itself (`runners[].kind: langbot-plugins`, server/managed.py): the
config rules, the environment the bridge gets, a bridge that cannot start never stopping the host, and a
plugins directory that is not there told in one line before anything starts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agentrunner_host.config.model import ConfigError, HostConfig, RunnerEndpointConfig, parse_config
from agentrunner_host.server.managed import ManagedRunners, bridge_env
from tests.integration.conftest import cli, write_config


def _config(runner: dict[str, object]) -> HostConfig:
    return parse_config({"runners": [{"id": "langbot", **runner}]})


def test_a_langbot_plugins_runner_needs_its_plugins_and_a_grpc_one_its_address(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs plugins_dir"):
        _config({"kind": "langbot-plugins"})
    with pytest.raises(ConfigError, match="needs an address"):
        _config({})
    with pytest.raises(ConfigError, match="for runners of kind langbot-plugins"):
        _config({"address": "127.0.0.1:1", "plugins_dir": str(tmp_path)})
    entry = RunnerEndpointConfig(id="langbot", kind="langbot-plugins", plugins_dir=tmp_path)
    assert entry.address == "127.0.0.1:0"  # a free loopback port, picked when the host starts it


def test_the_bridge_sees_no_secret_of_the_host(tmp_path: Path) -> None:
    entry = RunnerEndpointConfig(id="lb", kind="langbot-plugins", plugins_dir=tmp_path, env=["ACME_TOKEN"])
    environ = {
        "PATH": "/usr/bin",
        "HOME": "/home/x",
        "LC_ALL": "C.UTF-8",
        "HTTPS_PROXY": "http://proxy:3128",
        "OPENAI_API_KEY": "sk-secret",
        "AGENTRUNNER_CONSOLE_TOKEN": "console-secret",
        "AGENTRUNNER_RUNNER_TOKENS": '{"ref": "s3cret"}',
        "AGENTRUNNER_HOST_CA_FILE": "/etc/ca.pem",
        "AGENTRUNNER_HOST_API_KEY": "ark-cli-key",  # the CLI's key to the host (a shell exported it)
        "AGENTRUNNER_HOST_API_KEY_FILE": "/home/x/cli.key",
        "ACME_TOKEN": "named",
        "OTHER_TOKEN": "not named",
    }
    env = bridge_env(entry, environ)
    assert env["ACME_TOKEN"] == "named" and env["AGENTRUNNER_HOST_CA_FILE"] == "/etc/ca.pem"
    assert {"PATH", "HOME", "LC_ALL", "HTTPS_PROXY"} <= set(env)
    for secret in (
        "OPENAI_API_KEY",
        "AGENTRUNNER_CONSOLE_TOKEN",
        "AGENTRUNNER_RUNNER_TOKENS",
        "AGENTRUNNER_HOST_API_KEY",
        "AGENTRUNNER_HOST_API_KEY_FILE",
        "OTHER_TOKEN",
    ):
        assert secret not in env


@pytest.mark.asyncio
async def test_a_bridge_that_cannot_start_leaves_the_host_running(tmp_path: Path) -> None:
    """A plugins directory that does not exist: the bridge exits at once (code 1); starting the host's
    managed runners neither raises nor waits for the start-up timeout, and the entry keeps its address
    (the registry reports that endpoint down) while the bridge is retried with backoff."""
    config = parse_config(
        {"runners": [{"id": "langbot", "kind": "langbot-plugins", "plugins_dir": str(tmp_path / "missing")}]}
    )
    started = time.monotonic()
    managed = await ManagedRunners.start(config)
    try:
        assert time.monotonic() - started < 30
        (runner,) = managed.runners
        assert runner.process is not None and await asyncio.wait_for(runner.process.wait(), 30) == 1
        host, port = config.runners[0].address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
    finally:
        await managed.stop()


def test_a_plugins_dir_that_is_not_a_directory_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    """`serve` refuses to start (exit 2, one line naming the entry's path) instead of serving with a
    bridge that exits and is retried forever; `config check` reports it as an error."""
    config = write_config(
        tmp_path / "host.yaml",
        {
            "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'host.db'}"},
            "runners": [{"id": "langbot", "kind": "langbot-plugins", "plugins_dir": str(tmp_path / "nope")}],
        },
    )
    assert cli("db", "upgrade", "--config", str(config)).returncode == 0  # nothing else stops it serving
    served = cli("serve", "--config", str(config), timeout=120)  # exits at once; the margin is for load
    assert served.returncode == 2, served.stdout + served.stderr
    (line,) = served.stderr.strip().splitlines()
    assert "runners.0.plugins_dir" in line and "is not a directory" in line, line
    checked = cli("config", "check", "--offline", "--config", str(config))
    assert checked.returncode == 1
    assert "error: runners.0.plugins_dir: " in checked.stdout, checked.stdout
