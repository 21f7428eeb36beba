"""The claude-code runner with the **real** Claude Code CLI (`.ci/install-real-tools claude`, version in
`.ci/real-tools.env`): the host (CLI `serve`, SQLite), the runner as its own process, the real `claude`
started by it, and a local mock of the Anthropic Messages API (`anthropic_mock`) scripted per test.
Every agent but two uses the runner's default config, as a new user gets it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
from google.protobuf import json_format

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from agentrunner_host.views.timeline import build_timeline
from agentrunner_runners.testing.anthropic_mock import AnthropicMock, serve_in_thread
from tests.helpers import next_message, rest_of
from tests.integration.conftest import CLI, ROOT, Proc, audit_outcomes, cli, run_request, write_config
from tests.integration.test_claude_code_e2e import (
    CLAUDE_ID,
    answer,
    harness_processes,
    results_of,
    start_claude_runner,
    wait_for,
)
from tests.real.tools import real_tool

pytestmark = pytest.mark.asyncio

KEY = "sk-ant-api03-real-suite-key-0123456789abcdef"
BAD_KEY = "sk-ant-api03-refused-key-0123456789abcdef"


@dataclass
class Stack:
    address: str
    db_file: Path
    root: Path
    home: Path
    mock: AnthropicMock


def _agent(claude: Path, root: Path, agent_id: str, **config: Any) -> dict[str, Any]:
    return {
        "id": agent_id,
        "runner_id": CLAUDE_ID,
        "runner_config": {"command": str(claude), "workspace": str(root), **config},
        "resource_policy": {"tools": ["current_time"]},
        "timeout_seconds": 120,
    }


def _only(conversation: str, agent_id: str) -> dict[str, Any]:
    return {
        "id": conversation,
        "scope": {"type": "conversation", "id": conversation},
        "event": "message.*",
        "target": {"agent": agent_id},
    }


def _host_config(tmp: Path, claude: Path, root: Path, runner: str) -> Path:
    """The host's config: the default agent, one that may run commands, one with a refused key."""
    db_file = tmp / "host.db"
    return write_config(
        tmp / "host.yaml",
        {
            "instance_id": "claude-real",
            "listen": {"address": "127.0.0.1:0"},
            "database": {
                "url": f"sqlite+aiosqlite:///{db_file}",
                "artifact_dir": str(tmp / "artifacts"),
            },
            "limits": {"cancel_grace_seconds": 5},
            "runners": [{"id": "claude", "address": runner}],
            "agents": [
                _agent(claude, root, "claude"),  # the defaults
                # commands allowed (the user's choice): the key must still not show in `env`
                _agent(claude, root, "claude-bash", **{"allowed-tools": "Bash, Edit(./outbox/**)"}),
                # Claude Code's own retry count (10): only the runner's reading of the retry
                # lines can make a refused key fail fast
                _agent(
                    claude,
                    root,
                    "claude-badkey",
                    **{"env-json": {"ANTHROPIC_API_KEY": BAD_KEY, "CLAUDE_CODE_MAX_RETRIES": "10"}},
                ),
            ],
            "bindings": [
                _only("env-conv", "claude-bash"),
                _only("cancel-conv", "claude-bash"),
                _only("badkey-conv", "claude-badkey"),
                {"id": "claude", "event": "message.*", "target": {"agent": "claude"}},
            ],
        },
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    claude = real_tool("claude") / "node_modules" / ".bin" / "claude"
    tmp = tmp_path_factory.mktemp("claude-real")
    root, home = tmp / "workspaces", tmp / "home"
    home.mkdir()
    mock = AnthropicMock(rejected_keys=(BAD_KEY,))
    procs: list[Proc] = []
    with serve_in_thread(mock):
        try:
            runner = start_claude_runner(
                {
                    "AGENTRUNNER_HARNESS_ROOTS": str(root),
                    "HOME": str(home),  # Claude Code's sessions and settings stay in the test's dir
                    "ANTHROPIC_BASE_URL": mock.url,
                    "ANTHROPIC_API_KEY": KEY,
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                    "DISABLE_AUTOUPDATER": "1",
                }
            )
            procs.append(runner)
            config = _host_config(tmp, claude, root, runner.value)
            upgraded = cli("db", "upgrade", "--config", str(config))
            assert upgraded.returncode == 0, upgraded.stderr
            # generous start timeouts: these suites share 2 cores with the rest of `make test`
            host = Proc(
                [*CLI, "serve", "--config", str(config), "--log-level", "WARNING"],
                "AGENTRUNNER_HOST_LISTENING",
                timeout=90,
            )
            procs.append(host)
            yield Stack(host.value, tmp / "host.db", root, home, mock)
        finally:
            for proc in reversed(procs):
                proc.kill(signal.SIGTERM)


async def run(address: str, text: str, conversation: str) -> list[host_service_pb2.HostServiceRunResponse]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        return [u async for u in stub.Run(run_request(text, conversation_id=conversation), timeout=120)]


def failure(updates: list[Any]) -> Any:
    (failed,) = [r.run_failed for r in results_of(updates) if r.HasField("run_failed")]
    return failed


def done(updates: list[Any]) -> Any:
    (completed,) = [r for r in results_of(updates) if r.HasField("run_completed")]
    return completed


def extra(updates: list[Any]) -> dict[str, Any]:
    return json_format.MessageToDict(done(updates).usage.extra)


def tail_running(root: Path) -> bool:
    """Whether the model's `tail -f /dev/null` (a grandchild of the runner) is running in `root`."""
    for process in harness_processes(root):
        with contextlib.suppress(psutil.Error):
            if "tail" in " ".join(process.cmdline()):
                return True
    return False


def stored(db_file: Path, run_id: str) -> bytes:
    with sqlite3.connect(db_file) as conn:
        rows = conn.execute("SELECT payload FROM run_results WHERE run_id = ?", (run_id,)).fetchall()
    return b"".join(r[0] for r in rows)


async def test_streamed_answers_resume_the_session_and_each_run_costs_its_own(stack: Stack) -> None:
    turns = [await run(stack.address, f"question number {i}", "resume-conv") for i in (1, 2, 3)]
    for i, updates in enumerate(turns, 1):
        assert answer(updates).content == f"Mock heard: question number {i} (turn {i})"
        deltas = [r.message_delta.text for r in results_of(updates) if r.HasField("message_delta")]
        assert len(deltas) > 2 and "".join(deltas) == answer(updates).content  # streamed, then once
    # the third request carried the first two turns: Claude Code resumed its session
    (third,) = stack.mock.turns("question number 3")
    assert "question number 1" in json.dumps(third["messages"]) and "(turn 2)" in json.dumps(
        third["messages"]
    )
    costs = [extra(u) for u in turns]
    assert costs[0]["total_cost_usd"] > 0
    assert [c["total_cost_usd"] for c in costs] == [costs[0]["total_cost_usd"]] * 3  # not 1x, 2x, 3x
    assert costs[2]["session_total_cost_usd"] == pytest.approx(3 * costs[0]["total_cost_usd"])


async def test_a_missing_session_falls_back_to_a_new_one_and_the_conversation_goes_on(stack: Stack) -> None:
    first = await run(stack.address, "remember me", "lost-conv")
    session = done(first).metadata["session_id"]
    gone = list((stack.home / ".claude" / "projects").glob(f"*/{session}.jsonl"))
    assert gone, session
    for transcript in gone:  # the session's transcript is gone (e.g. a first turn cancelled early)
        transcript.unlink()
    second = await run(stack.address, "are you there", "lost-conv")
    assert answer(second).content == "Mock heard: are you there (turn 1)"  # a new session
    logs = [r.run_log.text for r in results_of(second) if r.HasField("run_log")]
    assert any("could not resume session" in line for line in logs)
    third = await run(stack.address, "still there", "lost-conv")
    assert answer(third).content == "Mock heard: still there (turn 2)"  # not stuck: it resumes again


async def test_a_langbot_tool_is_called_with_the_default_config(stack: Stack) -> None:
    stack.mock.script(
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
            {"text": "LangBot says: {tool_result}"},
        ],
    )
    updates = await run(stack.address, "What is the time in Tokyo?", "mcp-conv")
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED, results_of(updates)[-1]
    # the host tool's result reached the model (the mock echoes the last tool result it was sent)
    assert "+09:00" in answer(updates).content
    last = stack.mock.turns("time in Tokyo")[-1]["messages"][-1]
    assert "+09:00" in json.dumps(last) and "tool_result" in json.dumps(last)
    assert audit_outcomes(stack.db_file, updates[0].accepted.run_id, "CallTool") == ["OK"]


async def test_a_file_written_to_outbox_comes_back_as_an_artifact(stack: Stack) -> None:
    stack.mock.script(
        "write me a report",
        [
            {
                "tool_use": {
                    "name": "Write",
                    "input": {"file_path": "{cwd}/outbox/report.txt", "content": "réport\n"},
                }
            },
            {
                "tool_use": {
                    "name": "Write",
                    "input": {"file_path": "{cwd}/../elsewhere.txt", "content": "no"},
                }
            },
            {"text": "I wrote outbox/report.txt."},
        ],
    )
    updates = await run(stack.address, "Please write me a report", "outbox-conv")
    message = answer(updates)
    assert [a.name for a in message.artifacts] == ["report.txt"]
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        request = host_service_pb2.HostServiceDownloadArtifactRequest(
            artifact_id=message.artifacts[0].artifact_id
        )
        data = b"".join([chunk.data async for chunk in stub.DownloadArtifact(request, timeout=30)])
    assert data.decode() == "réport\n"
    assert not list(stack.root.glob("elsewhere.txt"))  # writing outside outbox/ was refused ...
    logs = [r.run_log.text for r in results_of(updates) if r.HasField("run_log")]
    assert any(line.startswith("Claude Code refused Write") for line in logs), logs  # ... and said so


async def test_the_model_running_env_does_not_see_the_key(stack: Stack) -> None:
    stack.mock.script(
        "show me the env",
        [{"tool_use": {"name": "Bash", "input": {"command": "env"}}}, {"text": "ENV:\n{tool_result}"}],
    )
    updates = await run(stack.address, "show me the env", "env-conv")
    text = answer(updates).content
    assert "ANTHROPIC_BASE_URL=" in text  # the command ran and its output reached the model
    assert KEY not in text and "ANTHROPIC_API_KEY" not in text
    assert KEY.encode() not in stored(stack.db_file, updates[0].accepted.run_id)
    # Claude Code itself had the key (through the runner's apiKeyHelper)
    sent = [
        r for r in stack.mock.requests if r.path == "/v1/messages" and "show me the env" in json.dumps(r.body)
    ]
    assert sent and all(r.headers.get("x-api-key") == KEY for r in sent)


async def test_cancel_leaves_no_process_behind(stack: Stack) -> None:
    stack.mock.script(
        "run forever",
        [{"tool_use": {"name": "Bash", "input": {"command": "tail -f /dev/null", "timeout": 600000}}}],
    )
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        call = stub.Run(run_request("run forever", conversation_id="cancel-conv"), timeout=120)
        accepted = await next_message(call)
        await wait_for(lambda: tail_running(stack.root), 60)
        await stub.CancelRun(
            host_service_pb2.CancelRunRequest(run_id=accepted.accepted.run_id, reason="stop"), timeout=10
        )
        rest = await rest_of(call)
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED
    await wait_for(lambda: harness_processes(stack.root) == [], seconds=15)


async def test_a_500_is_retryable_within_seconds_and_leaves_no_answer_behind(stack: Stack) -> None:
    stack.mock.script("break the api", [{"status": 500}])
    start = time.monotonic()
    updates = await run(stack.address, "break the api", "500-conv")
    elapsed = time.monotonic() - start
    failed = failure(updates)
    assert (failed.code, failed.retryable, failed.details["kind"]) == (
        "claude_code.api_error",
        True,
        "http_error",
    )
    assert elapsed < 20, elapsed
    timeline = build_timeline(results_of(updates))
    assert not [e for e in timeline if e["kind"] == "message" and e["message_kind"] == "answer"], timeline


async def test_a_broken_stream_leaves_no_unfinished_answer(stack: Stack) -> None:
    """The API breaks off mid-answer: Claude Code abandons the streamed text, retries, and (the mock
    answering the retry) finishes; the abandoned text stays only as closed progress."""
    stack.mock.script(
        "half an answer", [{"stream_error": "overloaded_error", "partial": "I was about to say"}]
    )
    updates = await run(stack.address, "give me half an answer", "broken-conv")
    timeline = build_timeline(results_of(updates))
    messages = [e for e in timeline if e["kind"] == "message"]
    assert messages and all(e["completed"] for e in messages), timeline
    abandoned = [e for e in messages if e["text"].startswith("I was about to say")]
    assert abandoned and all(e["message_kind"] == "progress" for e in abandoned)
    answers = [e for e in messages if e["message_kind"] == "answer"]
    assert len(answers) <= 1 and not any("I was about to say" in e["text"] for e in answers)


async def test_a_refused_key_is_an_auth_error_within_seconds(stack: Stack) -> None:
    start = time.monotonic()
    updates = await run(stack.address, "hello", "badkey-conv")
    elapsed = time.monotonic() - start
    failed = failure(updates)
    assert (failed.code, failed.retryable, failed.details["kind"]) == (
        "claude_code.auth_error",
        False,
        "auth_error",
    )
    assert elapsed < 15, elapsed  # Claude Code alone would retry for ~3 minutes
    assert BAD_KEY not in failed.message
    await wait_for(lambda: harness_processes(stack.root) == [], seconds=15)


async def test_make_demo_claude_drives_the_real_cli_against_the_mock() -> None:
    """`make demo-claude`'s command with the installed CLI first on PATH: every check strict."""
    bin_dir = real_tool("claude") / "node_modules" / ".bin"
    env = {k: v for k, v in os.environ.items() if k != "AGENTRUNNER_HARNESS_ROOTS"}
    env.update(COLUMNS="250", PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agentrunner_host.demos.harness", "claude"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "using the real `claude`" in out and "against a local mock of its model API" in out
    assert 'tool current_time({"timezone": "Asia/Tokyo"})' in out and "+09:00" in out
    assert "Mock heard: Do you still know this conversation? (turn 4)" in out
    assert out.rstrip().endswith("demo finished")
