"""The stack the LangBot bridge's end-to-end suites run against: every part a real process on loopback.

The host is started through its CLI (`db upgrade`, `serve`) on SQLite, and starts the bridge itself (a
`runners:` entry of kind `langbot-plugins` over `tests/langbot_bridge/plugins/`); the bridge starts the
public plugin runtime (`langbot-plugin` 0.7.18), which starts one worker per plugin. The OpenAI-compatible
mock (`agentrunner_host.testing.openai_mock`) answers the model calls and an MCP server over stdio
provides the `add` tool. Tests speak `HostService` like a client. The plugins were written for these
tests against the public SDK, unchanged: `qa/kit` (echo, llm, history, state, tool, reply, log, ask,
boom, forever, probe) and `qa/crashy` (crash, spoof). Each test module gets its own stack (`conftest.py`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc, result_pb2
from tests.integration.conftest import CLI, ROOT, Proc, cli, run_request, write_config

PLUGINS = Path(__file__).parent / "plugins"
KIT = "plugin:qa/kit/"
CRASHY = "plugin:qa/crashy/"


@dataclass
class Stack:
    address: str
    db_file: Path
    marker: Path
    mock: str
    host: Proc


@dataclass
class Outcome:
    updates: list[Any]

    @property
    def run_id(self) -> str:
        return str(self.updates[0].accepted.run_id)

    @property
    def results(self) -> list[result_pb2.RunResult]:
        return [u.result for u in self.updates if u.HasField("result")]

    def of(self, kind: str) -> list[Any]:
        return [getattr(r, kind) for r in self.results if r.WhichOneof("payload") == kind]

    @property
    def status(self) -> str:
        finished = [u.finished for u in self.updates if u.HasField("finished")]
        return common_pb2.RunStatus.Name(finished[-1].status) if finished else "none"

    @property
    def answer(self) -> str:
        done = self.of("run_completed")
        return done[0].message.content if done else ""

    @property
    def streamed(self) -> str:
        text = ""
        for delta in self.of("message_delta"):
            text = delta.cumulative_text if delta.HasField("cumulative_text") else text + delta.text
        return text


def _agent(name: str, runner_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": name, "runner_id": runner_id, **extra}


def _binding(name: str) -> dict[str, Any]:
    """Events of the bot named like the agent go to it (the tests pick the agent by `bot_id`)."""
    return {
        "id": name,
        "scope": {"type": "bot", "id": name},
        "event": "*",
        "target": {"agent": name},
    }


def _agents(marker: Path) -> list[dict[str, Any]]:
    return [
        _agent("echo", KIT + "echo", runner_config={"prefix": "> "}),
        _agent("snapshots", KIT + "echo", runner_config={"style": "snapshots"}),
        _agent("llm", KIT + "llm", runner_config={"model": "chat"}),
        _agent("history", KIT + "history"),
        _agent("state", KIT + "state"),
        _agent("tool", KIT + "tool", resource_policy={"tools": ["add"]}),
        _agent("reply", KIT + "reply"),
        _agent("log", KIT + "log"),
        _agent("ask", KIT + "ask", event_types=["message.received", "interaction.submitted"]),
        _agent("boom", KIT + "boom"),
        _agent("forever", KIT + "forever", runner_config={"marker": str(marker)}),
        _agent("deadline", KIT + "forever", runner_config={"marker": str(marker)}, timeout_seconds=3),
        _agent("probe", KIT + "probe", state_policy={"scopes": ["conversation"]}),
        _agent("crash", CRASHY + "crash"),
        _agent("spoof", CRASHY + "spoof"),
    ]


def host_config(tmp: Path, model_base: str, marker: Path) -> dict[str, Any]:
    """The host's config: the bridge entry (plugin settings from a file and the environment), the mock
    model, the MCP `add` tool, an agent per test plugin bound to the bot of its name, and `many` (echo)."""
    (tmp / "plugins.yaml").write_text("qa/kit: {greeting: {env: QA_GREETING}}\n")
    agents = _agents(marker)
    bridge = {
        "id": "langbot",
        "kind": "langbot-plugins",
        "plugins_dir": str(PLUGINS),
        "args": ["--skip-deps-check", "--plugin-config", str(tmp / "plugins.yaml")],
        "env": ["QA_GREETING"],
    }
    mcp = {
        "name": "stdio",
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-m", "tests.mocks.mcp_stdio_server"],
        "cwd": str(ROOT),
    }
    return {
        "instance_id": "langbot-bridge-host",
        "listen": {"address": "127.0.0.1:0"},
        "database": {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "artifacts")},
        "runners": [bridge],
        "models": [{"id": "chat", "base_url": f"{model_base}/v1", "model": "mock-chat"}],
        "tools": {"mcp_servers": [mcp]},
        "agents": agents,
        "bindings": [*(_binding(a["id"]) for a in agents), {**_binding("many"), "target": {"agent": "echo"}}],
    }


@contextmanager
def running_stack(tmp: Path) -> Iterator[Stack]:
    """The mock model server and the host (which starts the bridge); all killed on the way out."""
    procs: list[Proc] = []
    try:
        mock = Proc(
            [sys.executable, "-m", "agentrunner_host.testing.openai_mock", "--port", "0"],
            "MOCK_OPENAI_LISTENING",
        )
        procs.append(mock)
        base = f"http://127.0.0.1:{mock.value}"
        marker = tmp / "cancelled.txt"
        config = write_config(tmp / "host.yaml", host_config(tmp, base, marker))
        upgraded = cli("db", "upgrade", "--config", str(config))
        assert upgraded.returncode == 0, upgraded.stderr
        host = Proc(  # the host starts the bridge and waits for its plugins' workers (a few seconds each)
            [*CLI, "serve", "--config", str(config), "--log-level", "WARNING"],
            "AGENTRUNNER_HOST_LISTENING",
            {"QA_GREETING": "bonjour", "OPENAI_API_KEY": "sk-host-secret"},
            timeout=120,
        )
        procs.append(host)
        yield Stack(host.value, tmp / "host.db", marker, base, host)
    finally:
        for proc in reversed(procs):
            proc.kill()


def request_for(agent: str, text: str, conversation: str = "") -> host_service_pb2.HostServiceRunRequest:
    request = run_request(text, conversation_id=conversation or agent)
    request.event.bot_id = agent
    return request


async def ask(stack: Stack, agent: str, text: str, *, conversation: str = "") -> Outcome:
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        return Outcome([u async for u in stub.Run(request_for(agent, text, conversation), timeout=60)])


async def start_forever(stub: host_service_pb2_grpc.HostServiceStub, conversation: str) -> tuple[Any, str]:
    call: Any = stub.Run(request_for("forever", "run forever", conversation), timeout=120)  # an aio call
    updates = []
    async for update in call:
        updates.append(update)
        if update.HasField("result") and update.result.HasField("message_delta"):
            return call, updates[0].accepted.run_id
    raise AssertionError(f"the forever runner never started: {updates}")
