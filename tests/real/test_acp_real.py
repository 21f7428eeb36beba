"""The acp runner with **real** ACP agents (`.ci/install-real-tools claude_acp codex_acp`, versions in
`.ci/real-tools.env`): `@agentclientprotocol/claude-agent-acp` against the Anthropic Messages mock and
`@agentclientprotocol/codex-acp` against the OpenAI Responses mock, both in threads of the test process;
the runner as its own process, the host (CLI `serve`, SQLite), one stack for the module. Each agent is a
user's config: `provider` and the command's path, nothing else."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from agentrunner_host.views.timeline import build_timeline
from agentrunner_runners.testing.anthropic_mock import AnthropicMock, serve_in_thread
from agentrunner_runners.testing.openai_responses_mock import ResponsesMock, codex_config, text
from tests.helpers import next_message, rest_of
from tests.integration.conftest import CLI, Proc, audit_outcomes, cli, run_request, write_config
from tests.integration.test_claude_code_e2e import harness_processes, results_of, wait_for
from tests.real.tools import real_tool

pytestmark = pytest.mark.asyncio

ACP_ID = "plugin:langbot/acp-agent/default"
ANTHROPIC_KEY = "sk-ant-api03-acp-real-suite-key-0123456789abcdef"
OPENAI_KEY = "sk-mock-openai-acp-key-that-must-not-leak-0123456789"
AGENTS = ("claude", "codex")


@dataclass
class Stack:
    address: str
    db_file: Path
    root: Path
    anthropic: AnthropicMock
    openai: ResponsesMock

    async def run(self, text: str, conversation: str, agent: str) -> list[Any]:
        request = run_request(text, conversation_id=conversation)
        request.agent_id = agent
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            return [u async for u in stub.Run(request, timeout=120)]

    def model_requests(self, agent: str, marker: str) -> list[str]:
        """The bodies (as text) of the main model requests of `agent` that mention `marker`."""
        if agent == "claude":
            return [json.dumps(body) for body in self.anthropic.turns(marker)]
        return [json.dumps(r.body) for r in self.openai.requests if marker in json.dumps(r.body)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    claude = real_tool("claude_acp") / "node_modules" / ".bin" / "claude-agent-acp"
    codex = real_tool("codex_acp") / "node_modules" / ".bin" / "codex-acp"
    tmp = tmp_path_factory.mktemp("acp-real")
    root, home = tmp / "workspaces", tmp / "home"
    home.mkdir()
    anthropic = AnthropicMock()
    procs: list[Proc] = []
    with serve_in_thread(anthropic), ResponsesMock() as openai:
        codex_home = codex_config(tmp / "codex-home", openai.url("/v1"), retries=1)
        try:
            runner = Proc(
                [
                    sys.executable,
                    "-m",
                    "agentrunner",
                    "serve",
                    "agentrunner_runners.acp:AcpRunner",
                    "--port",
                    "0",
                ],
                "AGENTRUNNER_LISTENING",
                env={
                    "AGENTRUNNER_HARNESS_ROOTS": str(root),
                    "HOME": str(home),  # the agents' sessions and settings stay in the test's dir
                    "ANTHROPIC_BASE_URL": anthropic.url,
                    "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                    "DISABLE_AUTOUPDATER": "1",
                    "CODEX_HOME": str(codex_home),
                    "OPENAI_API_KEY": OPENAI_KEY,
                },
                timeout=90,
            )
            procs.append(runner)

            def agent(agent_id: str, provider: str, command: Path) -> dict[str, Any]:
                return {
                    "id": agent_id,
                    "runner_id": ACP_ID,
                    "runner_config": {
                        "provider": provider,
                        "acp-command": str(command),
                        "workspace": str(root),
                    },
                    "resource_policy": {"tools": ["current_time"]},
                    "timeout_seconds": 150,
                }

            db_file = tmp / "host.db"
            config = write_config(
                tmp / "host.yaml",
                {
                    "instance_id": "acp-real",
                    "listen": {"address": "127.0.0.1:0"},
                    "database": {
                        "url": f"sqlite+aiosqlite:///{db_file}",
                        "artifact_dir": str(tmp / "artifacts"),
                    },
                    "limits": {"cancel_grace_seconds": 8},
                    "runners": [{"id": "acp", "address": runner.value}],
                    "agents": [agent("claude", "claude-code", claude), agent("codex", "codex", codex)],
                    "bindings": [{"id": "default", "event": "message.*", "target": {"agent": "claude"}}],
                },
            )
            upgraded = cli("db", "upgrade", "--config", str(config))
            assert upgraded.returncode == 0, upgraded.stderr
            host = Proc(
                [*CLI, "serve", "--config", str(config), "--log-level", "WARNING"],
                "AGENTRUNNER_HOST_LISTENING",
                timeout=120,
            )
            procs.append(host)
            yield Stack(host.value, db_file, root, anthropic, openai)
        finally:
            for proc in reversed(procs):
                proc.kill(signal.SIGTERM)


def deltas(updates: list[Any]) -> list[str]:
    return [
        r.message_delta.text
        for r in results_of(updates)
        if r.HasField("message_delta") and r.message_delta.kind == common_pb2.MESSAGE_KIND_UNSPECIFIED
    ]


def answer(updates: list[Any]) -> common_pb2.AssistantMessage:
    """The run's one answer (not its reasoning or progress)."""
    (message,) = [
        r.message_completed.message
        for r in results_of(updates)
        if r.HasField("message_completed")
        and r.message_completed.message.kind == common_pb2.MESSAGE_KIND_UNSPECIFIED
    ]
    return message


def done(updates: list[Any]) -> Any:
    (completed,) = [r for r in results_of(updates) if r.HasField("run_completed")]
    return completed


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_plain_turn_streams_and_the_next_turn_resumes_the_session(stack: Stack, agent: str) -> None:
    conversation = f"resume-{agent}"
    first = await stack.run(f"first question for {agent}", conversation, agent)
    assert first[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED, results_of(first)[-3:]
    assert "first question for" in answer(first).content and "(turn 1)" in answer(first).content
    assert len(deltas(first)) >= 2 and "".join(deltas(first)) == answer(first).content  # streamed
    session = done(first).metadata["session_id"]
    second = await stack.run(f"second question for {agent}", conversation, agent)
    assert "(turn 2)" in answer(second).content  # the model saw the first turn ...
    (request,) = stack.model_requests(agent, f"second question for {agent}")[-1:]
    assert f"first question for {agent}" in request  # ... sent again by the resumed session
    assert done(second).metadata["session_id"] == session
    usage = done(second).usage
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0


async def test_claude_calls_a_langbot_tool_through_the_bridge_and_the_timeline_keeps_kinds_apart(
    stack: Stack,
) -> None:
    stack.anthropic.script(
        "time in Tokyo",
        [
            {
                "tool_use": {
                    "name": "ToolSearch",
                    "input": {"query": "select:mcp__langbot__langbot_call_tool"},
                }
            },
            {
                "tool_use": {
                    "name": "mcp__langbot__langbot_call_tool",
                    "input": {"tool_name": "current_time", "arguments": {"timezone": "Asia/Tokyo"}},
                }
            },
            {"thinking": "The tool answered; I will quote it.", "text": "LangBot says: {tool_result}"},
        ],
    )
    updates = await stack.run("What is the time in Tokyo?", "mcp-claude", "claude")
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED, results_of(updates)[-3:]
    assert "+09:00" in answer(updates).content  # the host tool's result reached the model
    run_id = updates[0].accepted.run_id
    assert audit_outcomes(stack.db_file, run_id, "CallTool") == ["OK"]
    shown = cli("runs", "show", run_id, "--json", "--host", stack.address)  # the CLI a user reads it with
    assert shown.returncode == 0, shown.stderr
    timeline = json.loads(shown.stdout)["timeline"]
    assert timeline == build_timeline(results_of(updates))  # stored as streamed
    kinds = {(e["kind"], e.get("message_kind")) for e in timeline}
    assert {("message", "answer"), ("message", "reasoning")} <= kinds, timeline
    tools = [e for e in timeline if e["kind"] == "tool_call"]
    (bridge,) = [e for e in tools if "langbot_call_tool" in e["tool_name"]]
    assert bridge["status"] == "completed" and bridge["parameters"]["tool_name"] == "current_time", bridge
    assert all(e["status"] in ("completed", "failed") for e in tools), tools  # every call closed
    answers = [e for e in timeline if e["kind"] == "message" and e["message_kind"] == "answer"]
    assert len(answers) == 1 and "The tool answered" not in answers[0]["text"]


async def test_codex_calls_a_langbot_tool_through_the_bridge(stack: Stack) -> None:
    prompt = 'call langbot_call_tool {"tool_name": "current_time", "arguments": {"timezone": "Asia/Tokyo"}}'
    updates = await stack.run(prompt, "mcp-codex", "codex")
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED, results_of(updates)[-3:]
    logs = [r.run_log.text for r in results_of(updates) if r.HasField("run_log")]
    assert answer(updates).content.startswith("langbot_call_tool returned:")
    assert "+09:00" in answer(updates).content, logs
    assert audit_outcomes(stack.db_file, updates[0].accepted.run_id, "CallTool") == ["OK"]
    started = [r.tool_call_started.tool_name for r in results_of(updates) if r.HasField("tool_call_started")]
    assert any("langbot_call_tool" in name for name in started), started


async def test_claude_writes_into_the_outbox_by_policy_and_is_refused_a_command(stack: Stack) -> None:
    stack.anthropic.script(
        "write me a report",
        [
            {
                "tool_use": {
                    "name": "Write",
                    "input": {"file_path": "{cwd}/outbox/report.txt", "content": "réport\n"},
                }
            },
            {"tool_use": {"name": "Bash", "input": {"command": "env"}}},
            {"text": "Done: {tool_result}"},
        ],
    )
    updates = await stack.run("Please write me a report", "outbox-claude", "claude")
    message = answer(updates)
    assert [a.name for a in message.artifacts] == ["report.txt"]  # an edit inside the workspace: allowed
    assert ANTHROPIC_KEY not in message.content and "ANTHROPIC_BASE_URL" not in message.content  # env refused
    completed = [r.tool_call_completed for r in results_of(updates) if r.HasField("tool_call_completed")]
    assert any(c.error_code for c in completed), completed  # the command's call failed: not allowed


@pytest.mark.parametrize("agent", AGENTS)
async def test_cancel_leaves_no_process_behind(stack: Stack, agent: str) -> None:
    marker = f"SLOWTURN-{agent}"
    stack.anthropic.script(marker, [{"hang": 120}])
    stack.openai.script(marker, replace(text("word " * 400), delay=0.3))
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        request = run_request(f"{marker} please", conversation_id=f"cancel-{agent}")
        request.agent_id = agent
        call = stub.Run(request, timeout=120)
        accepted = await next_message(call)
        await wait_for(lambda: bool(stack.model_requests(agent, marker)), 60)
        assert harness_processes(stack.root)  # the agent is running
        started = time.monotonic()
        await stub.CancelRun(
            host_service_pb2.CancelRunRequest(run_id=accepted.accepted.run_id, reason="stop"), timeout=10
        )
        rest = await rest_of(call)
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED
    assert time.monotonic() - started < 15
    await wait_for(lambda: harness_processes(stack.root) == [], seconds=15)


async def test_make_demo_acp_drives_a_real_agent_against_the_mock() -> None:
    """`make demo-acp`'s command with the installed agent first on PATH: every check strict."""
    import asyncio
    import subprocess

    from tests.integration.conftest import ROOT

    bin_dir = real_tool("claude_acp") / "node_modules" / ".bin"
    env = {k: v for k, v in os.environ.items() if k != "AGENTRUNNER_HARNESS_ROOTS"}
    env.update(COLUMNS="250", PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    finished = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agentrunner_host.demos.harness", "acp"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = finished.stdout
    assert finished.returncode == 0, out + finished.stderr
    assert "using the real `claude-agent-acp`" in out and "against a local mock of its model API" in out
    assert "+09:00" in out and out.rstrip().endswith("demo finished")
