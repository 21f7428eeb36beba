"""Fixtures: runner processes over real gRPC and an in-process host on port 0, wired by
`HostApp.open` on a migrated SQLite database in a temp dir (copied from a session template)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc
import pytest
import pytest_asyncio

from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from agentrunner_host.config.model import parse_config
from agentrunner_host.server.app import HostApp
from agentrunner_host.store.migrate import upgrade
from tests.helpers import audit_outcomes

HERE = pathlib.Path(__file__).parent
FAKE_ID = "plugin:test/fake/default"


def start_process(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 20.0
) -> tuple[subprocess.Popen[str], str]:
    """Starts a runner process and waits for its `AGENTRUNNER_LISTENING host:port` line."""
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
    )
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("AGENTRUNNER_LISTENING "):
        proc.kill()
        raise RuntimeError(f"runner did not start: {line!r}")
    return proc, line.split()[1]


def stop_process(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


class FakeRunner:
    def __init__(self, log_path: pathlib.Path) -> None:
        self.log_path = log_path
        self.proc, self.address = start_process(
            [sys.executable, str(HERE / "fake_runner.py")], env={"FAKE_RUNNER_LOG": str(log_path)}
        )

    def lines(self) -> list[str]:
        return self.log_path.read_text().splitlines() if self.log_path.exists() else []

    def stop(self) -> None:
        stop_process(self.proc)


@pytest.fixture(scope="module")
def fake_runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeRunner]:
    runner = FakeRunner(tmp_path_factory.mktemp("fake") / "events.log")
    yield runner
    runner.stop()


def host_config(runner_address: str, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "listen": {"address": "127.0.0.1:0"},
        "registry": {
            "refresh_interval_seconds": 30,
            "retry_interval_seconds": 0.3,
            "describe_timeout_seconds": 2,
        },
        "limits": {"cancel_grace_seconds": 0.3, "post_terminal_drain_seconds": 0.3},
        "runners": [{"id": "fake", "address": runner_address}],
        "models": [
            # never called by these tests (no provider behind the URL): selection and projection only
            {"id": "gpt-test", "base_url": "http://127.0.0.1:9/v1", "model": "m", "provider": "mock"},
            {"id": "other-model", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
        ],
        # host-native tools: current_time, and fetch_url (listed because an allow-list is set)
        "tools": {"native": {"fetch_url_allow": ["http://127.0.0.1:9/"]}},
        "agents": [
            {
                "id": "fake-agent",
                "runner_id": FAKE_ID,
                "runner_config": {"model": "gpt-test"},
                "resource_policy": {"tools": ["current_time"], "platform_actions": ["message.edit"]},
                "event_types": ["message.*"],
                "timeout_seconds": 30,
            },
            {"id": "short-agent", "runner_id": FAKE_ID, "event_types": ["*"], "timeout_seconds": 1},
            {
                "id": "steer-agent",
                "runner_id": FAKE_ID,
                "runner_config": {"model": "gpt-test"},
                "resource_policy": {"steering": True},
                "event_types": ["message.*"],
                "timeout_seconds": 30,
            },
        ],
        "bindings": [
            {"id": "default", "event": "message.*", "target": {"agent": "fake-agent"}},
            {
                "id": "muted",
                "scope": {"type": "bot", "id": "muted-bot"},
                "event": "*",
                "target": {"discard": True},
            },
            {
                "id": "steerable",
                "scope": {"type": "conversation", "id": "steer-conv"},
                "event": "message.*",
                "target": {"agent": "steer-agent"},
            },
        ],
    }
    config.update(overrides)
    return config


class Host:
    def __init__(self, app: HostApp, channel: grpc.aio.Channel) -> None:
        self.app = app
        self.channel = channel
        self.stub = host_service_pb2_grpc.HostServiceStub(channel)
        self.address = f"127.0.0.1:{app.port}"

    async def run(self, text: str, **kwargs: Any) -> list[host_service_pb2.HostServiceRunResponse]:
        return [u async for u in self.stub.Run(run_request(text, **kwargs), timeout=30)]


def run_request(
    text: str,
    *,
    event_id: str = "",
    agent_id: str = "",
    conversation_id: str = "conv-1",
    bot_id: str = "bot-1",
    event_type: str = "message.received",
    streaming: bool = True,
) -> host_service_pb2.HostServiceRunRequest:
    req = host_service_pb2.HostServiceRunRequest(agent_id=agent_id)
    ev = req.event
    ev.event_id = event_id
    ev.event_type = event_type
    ev.bot_id = bot_id
    ev.conversation.conversation_id = conversation_id
    ev.input.text = text
    ev.delivery.supports_streaming = streaming
    return req


HostFactory = Callable[..., Any]


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """One migrated SQLite database per test process; each host gets a copy."""
    path = tmp_path_factory.mktemp("host-db-template") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


def fresh_database(template: pathlib.Path, directory: pathlib.Path) -> dict[str, Any]:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "host.db"
    shutil.copy(template, target)
    return {"url": f"sqlite+aiosqlite:///{target}", "artifact_dir": str(directory / "artifacts")}


@pytest_asyncio.fixture(loop_scope="session")
async def make_host(
    sqlite_template: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[HostFactory]:
    started: list[Host] = []

    async def factory(config: dict[str, Any], **kwargs: Any) -> Host:
        config = dict(config)
        config.setdefault("database", fresh_database(sqlite_template, tmp_path_factory.mktemp("host")))
        app = await HostApp.open(parse_config(config), **kwargs)
        await app.start("127.0.0.1:0")
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{app.port}")
        host = Host(app, channel)
        started.append(host)
        return host

    yield factory
    for host in started:
        await host.channel.close()
        await host.app.stop(0.5)


@pytest_asyncio.fixture(loop_scope="session")
async def host(make_host: HostFactory, fake_runner: FakeRunner) -> Host:
    return await make_host(host_config(fake_runner.address))


async def audited(host: Host, run_id: str, method: str) -> list[str]:
    """Outcomes of the proxy calls of `run_id` to `method`, from the host's event log (audit records)."""
    return await audit_outcomes(host.app.db, run_id, method)


def results(updates: list[host_service_pb2.HostServiceRunResponse]) -> list[Any]:
    return [u.result for u in updates if u.HasField("result")]


def text_of(updates: list[host_service_pb2.HostServiceRunResponse]) -> str:
    out = ""
    for r in results(updates):
        kind = r.WhichOneof("payload")
        if kind == "message_delta":
            out += r.message_delta.text
        elif kind == "message_completed":
            out += "|" + r.message_completed.message.content
    return out
