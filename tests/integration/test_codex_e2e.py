"""The codex runner end to end: the host (CLI `serve`, SQLite), the runner as its own process and the
fake `codex` as real subprocesses; nothing in-process."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrunner.results import is_answer
from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from agentrunner_host.cli import full_interaction_support
from agentrunner_runners.testing import install_fake
from agentrunner_runners.testing.fake_codex import MCP_PREFIX
from tests.helpers import next_message, rest_of
from tests.integration.conftest import Proc, audit_outcomes, cli, run_request, start_host, write_config
from tests.integration.test_claude_code_e2e import harness_processes, results_of, run, wait_for

pytestmark = pytest.mark.asyncio
# agent settings whose names are not Python identifiers
STDIO: dict[str, Any] = {"mcp-bridge-transport": "stdio"}
ASK_TIMEOUT: dict[str, Any] = {"approval-timeout": 60}

CODEX = "agentrunner_runners.codex:CodexRunner"
CODEX_ID = "plugin:langbot/codex-agent/default"


@dataclass
class Stack:
    address: str
    db_file: Path
    root: Path
    log: Path

    def invocations(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


def _host_config(tmp: Path, runner_address: str, codex: Path, root: Path, home: Path) -> dict[str, Any]:
    """The stack's host: the codex runner on the fake CLI, four agents (steering, a stdio MCP bridge, no
    steering, approvals asked), bound per conversation."""
    db_file = tmp / "host.db"
    base = {"command": str(codex), "workspace": str(root), "codex-home": str(home)}

    def agent(
        agent_id: str, steering: bool = True, events: tuple[str, ...] = (), **extra: Any
    ) -> dict[str, Any]:
        return {
            "id": agent_id,
            "event_types": ["message.received", *events],
            "runner_id": CODEX_ID,
            "runner_config": {**base, **extra},
            "resource_policy": {"tools": ["current_time"], "steering": steering},
            "timeout_seconds": 120,
        }

    return {
        "instance_id": "codex-host",
        "listen": {"address": "127.0.0.1:0"},
        "database": {"url": f"sqlite+aiosqlite:///{db_file}", "artifact_dir": str(tmp / "artifacts")},
        "limits": {"cancel_grace_seconds": 5},
        "runners": [{"id": "codex", "address": runner_address}],
        "tools": {"native": {"fetch_url_allow": ["http://127.0.0.1:9/"]}},
        "agents": [
            agent("codex"),
            agent("codex-stdio", **STDIO),
            agent("codex-no-steering", steering=False),
            agent(
                "codex-ask",
                events=("interaction.submitted",),
                approvals="ask",
                **ASK_TIMEOUT,
            ),
        ],
        "bindings": [
            {
                "id": "busy",
                "scope": {"type": "conversation", "id": "busy-conv"},
                "event": "message.*",
                "target": {"agent": "codex-no-steering"},
            },
            {
                "id": "stdio",
                "scope": {"type": "conversation", "id": "stdio-conv"},
                "event": "message.*",
                "target": {"agent": "codex-stdio"},
            },
            {
                "id": "ask",
                "scope": {"type": "conversation", "id": "ask-conv"},
                "event": "*",
                "target": {"agent": "codex-ask"},
            },
            {"id": "codex", "event": "message.*", "target": {"agent": "codex"}},
        ],
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("codex-e2e")
    codex = install_fake(tmp / "bin", "codex")
    root, log, home = tmp / "workspaces", tmp / "codex.log", tmp / "codex-home"
    home.mkdir()
    env = {
        "AGENTRUNNER_HARNESS_ROOTS": str(root),
        "FAKE_CODEX_LOG": str(log),
        "AGENTRUNNER_HARNESS_ENV_PASSTHROUGH": "FAKE_CODEX_LOG",
        "HOST_ONLY_SECRET": "sk-host-secret-that-must-not-leak-123",
    }
    procs: list[Proc] = []
    try:
        runner = Proc(
            [sys.executable, "-m", "agentrunner", "serve", CODEX, "--host", "127.0.0.1", "--port", "0"],
            "AGENTRUNNER_LISTENING",
            env=env,
            timeout=60,
        )
        procs.append(runner)
        db_file = tmp / "host.db"
        config = write_config(tmp / "host.yaml", _host_config(tmp, runner.value, codex, root, home))
        upgraded = cli("db", "upgrade", "--config", str(config))
        assert upgraded.returncode == 0, upgraded.stderr
        host = start_host(config)
        procs.append(host)
        yield Stack(host.value, db_file, root, log)
    finally:
        for proc in reversed(procs):
            proc.kill(signal.SIGTERM)


def answer(updates: list[Any]) -> common_pb2.AssistantMessage:
    """The one answer message of a run (reasoning and progress messages are not answers)."""
    answers = [
        r.message_completed.message
        for r in results_of(updates)
        if r.HasField("message_completed") and is_answer(r.message_completed.message)
    ]
    assert len(answers) == 1, results_of(updates)
    return answers[0]


def _thread(call: dict[str, Any]) -> str | None:
    """The thread a codex process resumed (app-server: `thread/resume`; exec: `resume <id>`)."""
    if "resumed" in call:
        return call["resumed"]
    argv = call["argv"]
    return argv[-1] if "resume" in argv else None


async def test_two_turns_of_a_conversation_resume_one_thread(stack: Stack) -> None:
    first = await run(stack.address, "hello host", conversation_id="resume-conv")
    second = await run(stack.address, "and again", conversation_id="resume-conv")
    assert answer(first).content == "Codex heard: hello host (turn 1)"
    assert answer(second).content == "Codex heard: and again (turn 2)"
    a, b = [i for i in stack.invocations() if i["stdin"] in ("hello host", "and again")]
    thread = next(
        r.state_updated.value.string_value
        for r in results_of(first)
        if r.HasField("state_updated") and r.state_updated.key == "external.codex_session_id"
    )
    assert _thread(a) is None and _thread(b) == thread
    assert a["cwd"] == b["cwd"] and "HOST_ONLY_SECRET" not in a["env"]
    usage = next(r.usage for r in results_of(second) if r.HasField("run_completed"))
    assert (usage.prompt_tokens, usage.completion_tokens) == (100, 10)  # this turn's, not the thread's total
    with sqlite3.connect(stack.db_file) as conn:
        rows = conn.execute(
            "SELECT role, content FROM transcript_items WHERE conversation_id = 'resume-conv' ORDER BY seq"
        ).fetchall()
    assert [r[0] for r in rows] == ["user", "assistant", "user", "assistant"]
    assert "Answering" not in " ".join(r[1] for r in rows)  # reasoning is not in the transcript


async def test_two_concurrent_runs_on_one_conversation_are_serialised(stack: Stack) -> None:
    """Without steering the host runs both messages; the runner's per-conversation lock keeps their codex
    turns apart, and the second (reading the thread id again after the wait) resumes the first's thread."""
    one, two = await asyncio.gather(
        run(stack.address, "slow first", conversation_id="busy-conv"),
        run(stack.address, "slow second", conversation_id="busy-conv"),
    )
    texts = sorted(answer(u).content for u in (one, two))
    # whichever ran first started the thread (turn 1); the other resumed it (turn 2)
    assert sorted(t[-8:] for t in texts) == ["(turn 1)", "(turn 2)"]
    assert {t.split(" (")[0] for t in texts} == {"Codex heard: slow first", "Codex heard: slow second"}
    a, b = sorted(
        (i for i in stack.invocations() if i["stdin"] in ("slow first", "slow second")),
        key=lambda i: i["started"],
    )
    assert a["ended"] <= b["started"]  # never two codex turns on one thread at once
    assert _thread(a) is None and _thread(b) is not None  # the second resumed the thread the first started


async def test_cancel_mid_turn_leaves_no_process(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        call = stub.Run(
            run_request("hang on", conversation_id="cancel-conv"),
            timeout=120,
        )
        accepted = await next_message(call)
        await wait_for(lambda: len(harness_processes(stack.root)) >= 2)
        await stub.CancelRun(
            host_service_pb2.CancelRunRequest(run_id=accepted.accepted.run_id, reason="user pressed stop"),
            timeout=10,
        )
        rest = await rest_of(call)
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED
    await wait_for(lambda: harness_processes(stack.root) == [], seconds=15)


@pytest.mark.parametrize("conversation", ["stdio-conv", "http-conv"])
async def test_the_mcp_bridge_serves_codex_and_the_host_refuses_ungranted_tools(
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
    assert json.loads(ok["text"])["text"]
    assert denied["is_error"] and "UNAUTHORIZED" in denied["text"]
    for updates, outcome in ((granted, "OK"), (refused, "UNAUTHORIZED")):
        assert audit_outcomes(stack.db_file, updates[0].accepted.run_id, "CallTool") == [outcome]
        names = [
            r.tool_call_started.tool_name for r in results_of(updates) if r.HasField("tool_call_started")
        ]
        assert "langbot.langbot_call_tool" in names


async def test_an_outbox_file_becomes_an_artifact_the_client_downloads(stack: Stack, tmp_path: Path) -> None:
    message = answer(await run(stack.address, "outbox please", conversation_id="outbox-conv"))
    assert message.content == "I wrote outbox/report.txt." and [a.name for a in message.artifacts] == [
        "report.txt"
    ]
    target = tmp_path / "report.txt"
    done = cli(
        "artifacts", "get", message.artifacts[0].artifact_id, "-o", str(target), "--host", stack.address
    )
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "codex report\n" * 1000


async def test_approvals_round_trip_through_the_hosts_interaction_api(stack: Stack) -> None:
    """`approvals: ask`: each approval Codex requests reaches the client as an interaction; the client's
    `SubmitInteraction` answer is routed into the open run (steering) and becomes Codex's decision."""
    request = run_request("approve", conversation_id="ask-conv")
    request.event.delivery.interactions.CopyFrom(full_interaction_support())
    choices = iter(["confirm", "cancel", "confirm"])
    answered: list[asyncio.Task[list[Any]]] = []
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)

        async def submit(interaction_id: str, action_id: str) -> list[Any]:
            answer_request = host_service_pb2.SubmitInteractionRequest(
                interaction_id=interaction_id, action_id=action_id
            )
            return [u async for u in stub.SubmitInteraction(answer_request, timeout=120)]

        updates = []
        async for update in stub.Run(request, timeout=120):
            updates.append(update)
            if update.HasField("interaction"):
                asked = update.interaction.request
                assert asked.title.startswith("Codex asks to")
                answered.append(asyncio.create_task(submit(asked.interaction_id, next(choices))))
        followed = await asyncio.gather(*answered)
    assert len(answered) == 3
    assert answer(updates).content == "decisions: command=accept, inside=decline, outside=accept"
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    run_id = updates[0].accepted.run_id
    for stream in followed:  # each answer attached to the open run instead of starting another
        assert (
            stream[0].accepted.run_id == run_id
            and stream[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
        )
