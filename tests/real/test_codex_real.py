"""The codex runner with the real Codex CLI (`.ci/install-real-tools codex`, the version pinned in
`.ci/real-tools.env`), both transports, through the real host and the runner as its own process,
against a local mock of the OpenAI Responses API (`openai_responses_mock`) scripted per test.

The runner's defaults are what a user gets: no test sets an approval policy, a sandbox or an MCP
setting, except the tests about them. The fakes (`tests/integration/test_codex_e2e.py`) stay for what
the real CLI cannot be made to do (approval requests, protocol violations, a hung CLI).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrunner.harness import directory_name
from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from agentrunner_runners.testing.openai_responses_mock import Reply, ResponsesMock, http_error, text
from tests.integration.conftest import ROOT, audit_outcomes, cli
from tests.real.codex_stack import API_KEY, HOST_SECRET, Stack, codex_processes, request, start_stack
from tests.real.tools import real_tool

pytestmark = pytest.mark.asyncio
BOTH = pytest.mark.parametrize("transport", ["app-server", "exec"])
_TOOL_CALL = 'call langbot_call_tool {"tool_name": "current_time", "arguments": {}}'


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    codex = real_tool("codex") / "node_modules" / ".bin" / "codex"
    with ResponsesMock() as mock:
        yield from start_stack(tmp_path_factory.mktemp("codex-real"), codex, mock)


def results(updates: list[Any]) -> list[Any]:
    return [u.result for u in updates if u.HasField("result")]


def answer(updates: list[Any]) -> common_pb2.AssistantMessage:
    answers = [
        r.message_completed.message
        for r in results(updates)
        if r.HasField("message_completed")
        and r.message_completed.message.kind == common_pb2.MESSAGE_KIND_UNSPECIFIED
    ]
    assert len(answers) == 1, results(updates)
    message: common_pb2.AssistantMessage = answers[0]
    return message


def failure(updates: list[Any]) -> Any:
    (failed,) = [r.run_failed for r in results(updates) if r.HasField("run_failed")]
    return failed


def tool_outputs(stack: Stack, marker: str) -> list[str]:
    """The tool outputs Codex sent the model in the requests whose prompt contains `marker`."""
    out = []
    for record in stack.mock.responses_for(marker):
        for item in record.body.get("input") or []:
            if item.get("type") == "function_call_output":
                out.append(json.dumps(item.get("output"), ensure_ascii=False))
    return out


@BOTH
async def test_a_streamed_answer_then_resumed_turns_that_send_the_instructions_once(
    stack: Stack, transport: str
) -> None:
    conv = f"resume-{transport}"
    first = await stack.run(f"hello there {transport}", conv, agent=transport)
    assert answer(first).content == f"You said: hello there {transport} (turn 1)"
    deltas = "".join(r.message_delta.text for r in results(first) if r.HasField("message_delta"))
    # app-server streams the answer as it comes; `codex exec --json` reports whole items only
    assert deltas == (answer(first).content if transport == "app-server" else "")
    second = await stack.run(f"and again {transport}", conv, agent=transport)
    assert answer(second).content == f"You said: and again {transport} (turn 2)"
    (seen,) = stack.mock.responses_for(f"and again {transport}")
    history = json.dumps(seen.body["input"])
    assert answer(first).content in history  # the mock saw turn 1
    usage = next(r.usage for r in results(second) if r.HasField("run_completed"))
    assert usage.prompt_tokens == max(
        1, len(json.dumps(seen.body["input"])) // 4
    )  # this turn's, not the total
    await stack.run(f"third time {transport}", conv, agent=transport)
    (third,) = stack.mock.responses_for(f"third time {transport}")
    # one conversation, one CODEX_HOME: the skills instructions (which name it) are sent once, not per turn
    assert json.dumps(third.body["input"]).count("<skills_instructions>") == 1


@BOTH
async def test_a_langbot_tool_is_called_with_the_default_config_and_its_result_reaches_the_model(
    stack: Stack, transport: str
) -> None:
    updates = await stack.run(_TOOL_CALL, f"tool-{transport}", agent=transport)
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    started = [r.tool_call_started.tool_name for r in results(updates) if r.HasField("tool_call_started")]
    assert "langbot.langbot_call_tool" in started and "current_time" in started
    (output,) = tool_outputs(stack, "langbot_call_tool")[-1:]
    assert '\\"is_error\\":false' in output and re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", output)
    assert answer(updates).content.startswith("langbot_call_tool returned:")
    assert audit_outcomes(stack.db_file, updates[0].accepted.run_id, "CallTool") == ["OK"]


async def test_a_file_left_in_the_outbox_comes_back_as_an_artifact(stack: Stack, tmp_path: Path) -> None:
    updates = await stack.run("run `printf 'codex report' > outbox/report.txt`", "outbox-conv")
    message = answer(updates)
    assert [a.name for a in message.artifacts] == ["report.txt"]
    target = tmp_path / "report.txt"
    done = cli(
        "artifacts", "get", message.artifacts[0].artifact_id, "-o", str(target), "--host", stack.address
    )
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "codex report"


@BOTH
async def test_env_shows_no_secret_and_previews_are_redacted(stack: Stack, transport: str) -> None:
    planted = f"sk-proj-planted{transport.replace('-', '')}0123456789abcdef"
    updates = await stack.run(f"run `env; echo {planted}`", f"env-{transport}", agent=transport)
    (output,) = tool_outputs(stack, planted)
    assert "CODEX_HOME=" in output and planted in output  # `env` ran and its output reached the model
    assert API_KEY not in output and "LANGBOT_MCP_TOKEN" not in output and HOST_SECRET not in output
    previews = [
        str(r.tool_call_started if r.HasField("tool_call_started") else r.tool_call_completed)
        for r in results(updates)
        if r.HasField("tool_call_started") or r.HasField("tool_call_completed")
    ]
    assert len(previews) == 2 and "[REDACTED]" in previews[1]
    assert not any(planted in p for p in previews)
    stored = stack.stored_text(updates[0].accepted.run_id)
    assert API_KEY not in stored and HOST_SECRET not in stored


@BOTH
async def test_a_conversation_cannot_write_into_another_or_into_tmp(stack: Stack, transport: str) -> None:
    victim = f"victim-{transport}"
    await stack.run("hello", victim, agent=transport)
    outbox = stack.root / directory_name(victim, "") / "outbox"
    assert outbox.is_dir()
    marker = Path(f"/tmp/codex-real-planted-{transport}-{os.getpid()}-{time.monotonic_ns()}")
    command = (
        f"touch $TMPDIR/scratch && echo TMPDIR-OK; echo planted > {outbox}/planted.txt; "
        f"touch {marker}; touch .codex/home/planted"
    )
    updates = await stack.run(f"run `{command}`", f"attacker-{transport}", agent=transport)
    (output,) = tool_outputs(stack, str(marker))
    assert "TMPDIR-OK" in output  # the conversation's own TMPDIR works
    attacker = stack.root / directory_name(f"attacker-{transport}", "")
    planted = (outbox / "planted.txt", marker, attacker / ".codex" / "home" / "planted")
    assert [path for path in planted if path.exists()] == []  # nor into its own CODEX_HOME
    assert output.count("Read-only file system") + output.count("Permission denied") >= 3, output
    again = await stack.run("hello again", victim, agent=transport)
    assert list(answer(again).artifacts) == []
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


async def test_a_workspace_under_tmp_is_refused_when_the_sandbox_lets_every_conversation_write_there(
    stack: Stack,
) -> None:
    start = time.monotonic()
    updates = await stack.run("hello", "cross-conv", agent="tmp-cross-writes")
    failed = failure(updates)
    assert time.monotonic() - start < 10
    assert failed.code == "runner.config_invalid" and "\n" not in failed.message
    assert "/tmp" in failed.message and "exclude_slash_tmp" in failed.message
    assert stack.mock.responses_for("cross-conv") == [] and not any(stack.tmp_root.iterdir())


@pytest.mark.parametrize("agent", ["app-server", "exec", "app-server-stdio"])
async def test_cancel_leaves_no_process_and_no_bridge(stack: Stack, agent: str) -> None:
    marker = f"SLOWTURN-{agent}"
    stack.mock.script(marker, Reply(text(f"{'word ' * 200}").items, delay=0.3))
    ports = stack.listening_ports()
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        call = stub.Run(request(f"{marker} please", f"cancel-{agent}", agent), timeout=120)
        accepted: Any = await call.read()
        end = time.monotonic() + 60
        while not stack.mock.responses_for(marker):  # Codex is streaming the slow answer
            assert time.monotonic() < end
            await asyncio.sleep(0.1)
        assert codex_processes(stack.root)
        await stub.CancelRun(
            host_service_pb2.CancelRunRequest(run_id=accepted.accepted.run_id, reason="stop")
        )
        last: Any = None
        while (item := await call.read()) is not grpc.aio.EOF:
            last = item
    assert last.finished.status == common_pb2.RUN_STATUS_CANCELLED
    # gone by the time the run is reported cancelled: Codex, its children, the MCP bridge (both kinds)
    assert codex_processes(stack.root) == [] and stack.listening_ports() == ports


@BOTH
async def test_an_upstream_500_and_a_401_are_typed_within_seconds(stack: Stack, transport: str) -> None:
    stack.mock.script(f"FAIL500-{transport}", http_error(500))
    stack.mock.script(f"FAIL401-{transport}", http_error(401))
    start = time.monotonic()
    server_error = failure(
        await stack.run(f"FAIL500-{transport}", f"f500-{transport}", agent=f"{transport}-fast")
    )
    took_500 = time.monotonic() - start
    start = time.monotonic()
    # the user's provider with Codex's default retries: the runner stops at the first 401 it reports
    auth = failure(await stack.run(f"FAIL401-{transport}", f"f401-{transport}", agent=transport))
    took_401 = time.monotonic() - start
    assert server_error.code == "codex.upstream_error" and server_error.retryable, server_error
    assert auth.code == "codex.auth_error" and not auth.retryable, auth
    assert took_500 < 15 and took_401 < 6, (took_500, took_401)
    assert len(stack.mock.responses_for(f"FAIL401-{transport}")) <= 3  # not Codex's six attempts
    for failed in (server_error, auth):
        assert not re.search(r"\{'|\bNone\b", failed.message), failed.message  # words, no Python reprs
    assert "401" in auth.message and API_KEY not in auth.message


async def test_a_session_logs_no_unknown_notifications(stack: Stack) -> None:
    for transport in ("app-server", "exec"):
        await stack.run(_TOOL_CALL, f"quiet-{transport}", agent=transport)
    log = stack.runner_log.read_text(errors="replace")
    assert "mcp bridge listening" in log  # the log is the runner's
    assert not re.findall(r"codex\.unknown_\w+.*", log)


async def test_make_demo_codex_drives_the_real_cli_against_the_mock() -> None:
    """`make demo-codex` with the real `codex` installed: the conversation runs offline against the
    Responses mock, every turn checked strictly (the demo exits 1 otherwise)."""
    bin_dir = real_tool("codex") / "node_modules" / ".bin"
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTRUNNER_HARNESS_ROOTS", "OPENAI_API_KEY")}
    env.update(COLUMNS="250", PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agentrunner_host.demos.harness", "codex"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert f"using the real `codex` at {bin_dir / 'codex'}" in out and "against a local mock" in out
    assert 'tool current_time({"timezone": "Asia/Tokyo"})' in out and "(turn 4)" in out
