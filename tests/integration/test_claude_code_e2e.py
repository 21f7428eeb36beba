"""The claude-code runner end to end: the host (CLI `serve`, SQLite), the runner as its own process and
the fake `claude` (and `ssh`) as real subprocesses; nothing in-process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from agentrunner_runners.testing import install_fake
from agentrunner_runners.testing.fake_claude import MCP_PREFIX
from tests.helpers import next_message, rest_of
from tests.integration.conftest import Proc, audit_outcomes, cli, run_request, start_host, write_config

pytestmark = pytest.mark.asyncio

CLAUDE = "agentrunner_runners.claude_code:ClaudeCodeRunner"
CLAUDE_ID = "plugin:langbot/claude-code-agent/default"


@dataclass
class Stack:
    address: str
    db_file: Path
    root: Path
    log: Path
    ssh_log: Path
    remote_home: Path
    runner_env: dict[str, str]
    config: Path

    def invocations(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


def start_claude_runner(env: dict[str, str]) -> Proc:
    return Proc(
        [sys.executable, "-m", "agentrunner", "serve", CLAUDE, "--host", "127.0.0.1", "--port", "0"],
        "AGENTRUNNER_LISTENING",
        env=env,
        timeout=60,
    )


def _host_config(tmp: Path, runner_address: str, claude: Path, ssh: Path, root: Path) -> dict[str, Any]:
    """The stack's host: the Claude Code runner on the fake CLI, three agents (local, a stdio MCP
    bridge, on a remote machine over the fake ssh), bound per conversation."""
    db_file = tmp / "host.db"
    base = {"command": str(claude), "workspace": str(root)}

    def agent(agent_id: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": agent_id,
            "runner_id": CLAUDE_ID,
            "runner_config": {**base, **extra},
            "resource_policy": {"tools": ["current_time"], "steering": True},
            "timeout_seconds": 120,
        }

    def only(conversation_prefix: str, agent_id: str) -> dict[str, Any]:
        return {
            "id": agent_id,
            "scope": {"type": "conversation", "id": conversation_prefix},
            "event": "message.*",
            "target": {"agent": agent_id},
        }

    return {
        "instance_id": "claude-host",
        "listen": {"address": "127.0.0.1:0"},
        "database": {"url": f"sqlite+aiosqlite:///{db_file}", "artifact_dir": str(tmp / "artifacts")},
        "limits": {"cancel_grace_seconds": 5},
        "runners": [{"id": "claude", "address": runner_address}],
        "tools": {"native": {"fetch_url_allow": ["http://127.0.0.1:9/"]}},
        "agents": [
            agent("claude"),
            agent("claude-stdio", **{"mcp-bridge-transport": "stdio"}),
            agent(
                "claude-ssh",
                location="remote-ssh",
                **{
                    "ssh-target": "dev@remote.example",
                    "ssh-port": 2222,
                    "ssh-command": str(ssh),
                    "workspace": "~/.langbot/workspaces",
                    "mcp-servers-json": json.dumps(
                        [{"name": "docs", "type": "http", "url": "http://127.0.0.1:9/mcp"}]
                    ),
                },
            ),
        ],
        "bindings": [
            only("stdio-conv", "claude-stdio"),
            only("ssh-conv", "claude-ssh"),
            {"id": "claude", "event": "message.*", "target": {"agent": "claude"}},
        ],
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("claude-e2e")
    bin_dir = tmp / "bin"
    claude = install_fake(bin_dir, "claude")
    ssh = install_fake(bin_dir, "ssh")
    root, log, ssh_log, remote_home = (
        tmp / "workspaces",
        tmp / "claude.log",
        tmp / "ssh.log",
        tmp / "remote-home",
    )
    remote_home.mkdir()
    env = {
        "AGENTRUNNER_HARNESS_ROOTS": str(root),
        "FAKE_CLAUDE_LOG": str(log),
        "FAKE_CLAUDE_HOME": str(tmp / "claude-home"),
        "FAKE_SSH_LOG": str(ssh_log),
        "FAKE_SSH_HOME": str(remote_home),
        "AGENTRUNNER_HARNESS_ENV_PASSTHROUGH": "FAKE_CLAUDE_LOG,FAKE_CLAUDE_HOME,FAKE_SSH_LOG,FAKE_SSH_HOME",
        "HOST_ONLY_SECRET": "sk-host-secret-that-must-not-leak-123",
    }
    procs: list[Proc] = []
    try:
        runner = start_claude_runner(env)
        procs.append(runner)
        db_file = tmp / "host.db"
        config = write_config(tmp / "host.yaml", _host_config(tmp, runner.value, claude, ssh, root))
        upgraded = cli("db", "upgrade", "--config", str(config))
        assert upgraded.returncode == 0, upgraded.stderr
        host = start_host(config)
        procs.append(host)
        yield Stack(host.value, db_file, root, log, ssh_log, remote_home, env, config)
    finally:
        for proc in reversed(procs):
            proc.kill(signal.SIGTERM)


async def run(address: str, text: str, **kwargs: Any) -> list[host_service_pb2.HostServiceRunResponse]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        return [u async for u in stub.Run(run_request(text, **kwargs), timeout=120)]


def results_of(updates: list[Any]) -> list[Any]:
    return [u.result for u in updates if u.HasField("result")]


def answer(updates: list[Any]) -> common_pb2.AssistantMessage:
    answers = [
        r.message_completed.message
        for r in results_of(updates)
        if r.HasField("message_completed")
        and r.message_completed.message.kind != common_pb2.MESSAGE_KIND_PROGRESS
    ]
    assert len(answers) == 1, results_of(updates)
    return answers[0]


def harness_processes(root: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cwd", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and str(root) in (p.info["cwd"] or ""):
                found.append(p)
        except psutil.Error:
            continue
    return found


async def wait_for(predicate: Any, seconds: float = 30.0) -> None:
    end = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < end, "timed out waiting"
        await asyncio.sleep(0.1)


async def test_two_turns_of_a_conversation_resume_one_session(stack: Stack) -> None:
    first = await run(stack.address, "hello host", conversation_id="resume-conv")
    second = await run(stack.address, "and again", conversation_id="resume-conv")
    assert answer(first).content == "Claude heard: hello host (turn 1)"
    assert answer(second).content == "Claude heard: and again (turn 2)"
    a, b = [i for i in stack.invocations() if i["stdin"] in ("hello host", "and again")]
    sid = a["argv"][a["argv"].index("--session-id") + 1]
    assert b["argv"][b["argv"].index("--resume") + 1] == sid
    assert a["cwd"] == b["cwd"] and a["cwd"].startswith(str(stack.root))
    assert "HOST_ONLY_SECRET" not in a["env"]  # the runner's own environment is not inherited
    assert second[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    # the transcript has the answers (once each), not the streamed deltas twice
    with sqlite3.connect(stack.db_file) as conn:
        rows = conn.execute(
            "SELECT role, content FROM transcript_items WHERE conversation_id = 'resume-conv' ORDER BY seq"
        ).fetchall()
    assert [r[0] for r in rows] == ["user", "assistant", "user", "assistant"]
    assert rows[3][1] == "Claude heard: and again (turn 2)"


async def test_cancel_mid_run_leaves_no_process_behind(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        call = stub.Run(run_request("hang on", conversation_id="cancel-conv"), timeout=120)
        accepted = await next_message(call)
        run_id = accepted.accepted.run_id
        await wait_for(lambda: len(harness_processes(stack.root)) >= 2)
        await stub.CancelRun(
            host_service_pb2.CancelRunRequest(run_id=run_id, reason="user pressed stop"), timeout=10
        )
        rest = await rest_of(call)
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED
    await wait_for(lambda: harness_processes(stack.root) == [], seconds=15)


async def test_the_runner_stopping_takes_its_harness_with_it(stack: Stack, tmp_path: Path) -> None:
    """SIGTERM to a runner process with a harness running: no fake claude (nor its child) survives."""
    runner = start_claude_runner(stack.runner_env)
    try:
        from agentrunner.testing import make_context
        from agentrunner.v1 import runner_service_pb2, runner_service_pb2_grpc

        ctx = make_context(
            "hang now",
            config={
                "command": str(Path(stack.config).parent / "bin" / "claude"),
                "workspace": str(stack.root),
                "enable-langbot-mcp": False,
            },
            deadline=60,
        )
        async with grpc.aio.insecure_channel(runner.value) as channel:
            stub = runner_service_pb2_grpc.RunnerServiceStub(channel)
            call = stub.Run(runner_service_pb2.RunRequest(runner_id=CLAUDE_ID, context=ctx), timeout=60)
            await wait_for(lambda: len(harness_processes(stack.root)) >= 2)
            runner.popen.send_signal(signal.SIGTERM)
            seen = []
            with contextlib.suppress(grpc.aio.AioRpcError):
                async for response in call:
                    seen.append(response.result)
        # a graceful stop ends the run with `run.failed cancelled` (or the call breaks): either way no orphan
        assert not seen or seen[-1].run_failed.code == "cancelled"
        runner.popen.wait(timeout=30)
        await wait_for(lambda: harness_processes(stack.root) == [], seconds=15)
    finally:
        runner.kill()


@pytest.mark.parametrize("conversation", ["mcp-http-conv", "stdio-conv"])
async def test_the_mcp_bridge_serves_the_harness_and_the_host_refuses_ungranted_tools(
    stack: Stack, conversation: str
) -> None:
    granted = await run(
        stack.address,
        'mcp langbot langbot_call_tool {"tool_name": "current_time", "arguments": {}}',
        conversation_id=conversation,
    )
    refused = await run(
        stack.address,
        'mcp langbot langbot_call_tool {"tool_name": "fetch_url", "arguments": {"url": "http://127.0.0.1:9/"}}',
        conversation_id=conversation,
    )
    ok, denied = (json.loads(answer(u).content.removeprefix(MCP_PREFIX)) for u in (granted, refused))
    assert "langbot_call_tool" in ok["tools"] and not ok["is_error"]
    assert json.loads(ok["text"])["text"]  # the host tool's answer (the current time)
    assert denied["is_error"] and "UNAUTHORIZED" in denied["text"]
    config_argv = [i["argv"] for i in stack.invocations() if i["stdin"].startswith("mcp langbot")][-1]
    mcp_file = config_argv[config_argv.index("--mcp-config") + 1]
    assert not await asyncio.to_thread(os.path.exists, mcp_file)  # removed after the run
    for updates, outcome in ((granted, "OK"), (refused, "UNAUTHORIZED")):
        run_id = updates[0].accepted.run_id
        assert audit_outcomes(stack.db_file, run_id, "CallTool") == [outcome]
        kinds = [r.WhichOneof("payload") for r in results_of(updates)]
        assert "tool_call_started" in kinds and "tool_call_completed" in kinds


async def test_an_outbox_file_becomes_an_artifact_the_client_downloads(stack: Stack, tmp_path: Path) -> None:
    updates = await run(stack.address, "outbox please", conversation_id="outbox-conv")
    message = answer(updates)
    assert message.content == "I wrote outbox/report.txt." and [a.name for a in message.artifacts] == [
        "report.txt"
    ]
    ref = message.artifacts[0]
    logs = [r.run_log.text for r in results_of(updates) if r.HasField("run_log")]
    assert any("outbox/escape.txt skipped" in line for line in logs)  # the symlink to /etc/hostname
    target = tmp_path / "report.txt"
    done = cli("artifacts", "get", ref.artifact_id, "-o", str(target), "--host", stack.address)
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "report body\n" * 30000 and ref.size_bytes == target.stat().st_size


async def test_failures_reach_the_client_typed_and_redacted(stack: Stack) -> None:
    updates = await run(stack.address, "crash now", conversation_id="crash-conv")
    failed = [r.run_failed for r in results_of(updates) if r.HasField("run_failed")]
    assert [f.code for f in failed] == ["claude_code.process_failed"]
    assert "sk-ant-api03" not in failed[0].message and "[REDACTED]" in failed[0].message
    with sqlite3.connect(stack.db_file) as conn:
        stored = b"".join(
            r[0]
            for r in conn.execute(
                "SELECT payload FROM run_results WHERE run_id = ?", (updates[0].accepted.run_id,)
            )
        )
    assert b"claude_code.process_failed" in stored and b"SECRETSECRET" not in stored


async def test_remote_ssh_carries_the_workspace_and_mcp_config_over_stdin(stack: Stack) -> None:
    updates = await run(stack.address, "context over ssh", conversation_id="ssh-conv")
    seen = json.loads(answer(updates).content)
    assert seen["schema"] == "langbot.agent_runner.external_harness_context.v1" and seen["md"]
    argv = json.loads(stack.ssh_log.read_text().splitlines()[-1])["argv"]
    assert argv[:6] == ["-T", "-o", "BatchMode=yes", "-p", "2222", "dev@remote.example"]
    assert argv[6].startswith("bash -lc ") and "context over ssh" not in argv[6]
    call = [i for i in stack.invocations() if i["stdin"] == "context over ssh"][-1]
    remote_ws = Path(call["cwd"])
    assert str(remote_ws).startswith(str(stack.remote_home / ".langbot" / "workspaces" / "conv-ssh-conv"))
    mcp_rel = call["argv"][call["argv"].index("--mcp-config") + 1]
    assert mcp_rel.startswith(".langbot/mcp-") and not (remote_ws / mcp_rel).exists()  # removed after the run
    assert (remote_ws / "agent-context.json").exists()
    assert os.stat(remote_ws / "agent-context.json").st_mode & 0o777 == 0o644
