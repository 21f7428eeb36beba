"""The claude-code runner against the fake `claude` (a real subprocess), through the host double."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import psutil
import pytest
from google.protobuf import json_format

from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2
from agentrunner_runners.claude_code import SESSION_KEY
from tests.runners.claude_code.conftest import Fake, run

pytestmark = pytest.mark.asyncio


def _details(out) -> dict[str, Any]:
    return json_format.MessageToDict(out.failure.details)


async def test_a_turn_streams_once_and_stores_a_new_session_before_output(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "hello there")
    assert out.completed and out.text == "Claude heard: hello there (turn 1)"
    assert out.types[0] == "state.updated"  # the working directory ...
    session = [r.state_updated for r in out.of_type("state.updated") if r.state_updated.key == SESSION_KEY]
    first_output = next(i for i, t in enumerate(out.types) if t.startswith("message."))
    session_at = next(
        i
        for i, r in enumerate(out.results)
        if r.HasField("state_updated") and r.state_updated.key == SESSION_KEY
    )
    assert session_at < first_output  # ... and the new session id before any output
    sid = session[0].value.string_value
    (call,) = fake.invocations()
    argv = call["argv"]
    assert argv[argv.index("--session-id") + 1] == sid and "--resume" not in argv
    assert call["stdin"] == "hello there" and "hello there" not in " ".join(argv)
    # the defaults: Claude Code asks nobody; it may write into outbox/ and call LangBot's tools (none
    # here: the bridge is off in this suite), and has turns for ToolSearch + a tool call + the answer
    assert (
        argv[argv.index("--permission-mode") + 1] == "dontAsk" and argv[argv.index("--max-turns") + 1] == "10"
    )
    assert argv[argv.index("--allowedTools") + 1 :][:1] == ["Edit(./outbox/**)"]
    assert (
        argv[argv.index("--disallowedTools") + 1] == "AskUserQuestion"
        and "--include-partial-messages" in argv
    )
    # the answer is delivered exactly once: streamed deltas + one message.completed, nothing in run.completed
    assert "".join(out.deltas) == out.text and len(out.of_type("message.completed")) == 1
    assert not out.terminal.run_completed.HasField("message")
    deltas = {r.message_delta.message_id for r in out.of_type("message.delta")}
    assert deltas == {out.of_type("message.completed")[0].message_completed.message.message_id}
    usage = out.terminal.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (16, 7)
    assert json_format.MessageToDict(usage.extra)["total_cost_usd"] == 0.0123
    assert call["cwd"].startswith(str(fake.root))


async def test_the_next_turn_resumes_the_stored_session(host: HostDouble, fake: Fake) -> None:
    first = await run(host, fake, "one")
    sid = next(
        r.state_updated.value.string_value
        for r in first.of_type("state.updated")
        if r.state_updated.key == SESSION_KEY
    )
    second = await run(host, fake, "two", state={"conversation": {SESSION_KEY: sid}})
    assert second.text == "Claude heard: two (turn 2)"
    argv = fake.invocations()[1]["argv"]
    assert argv[argv.index("--resume") + 1] == sid
    assert not [r for r in second.of_type("state.updated") if r.state_updated.key == SESSION_KEY]


async def test_a_rejected_resume_falls_back_to_a_fresh_session_once(host: HostDouble, fake: Fake) -> None:
    out = await run(
        host, fake, "again", state={"conversation": {SESSION_KEY: "0b5c0d8e-0000-4000-8000-000000000000"}}
    )
    assert out.completed and out.text.endswith("(turn 1)")
    first, second = fake.invocations()
    assert "--resume" in first["argv"] and "--session-id" in second["argv"]
    new = second["argv"][second["argv"].index("--session-id") + 1]
    stored = [
        r.state_updated.value.string_value
        for r in out.of_type("state.updated")
        if r.state_updated.key == SESSION_KEY
    ]
    assert stored == [new]


async def test_tools_commentary_is_progress_and_the_answer_is_the_result(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "tools please")
    assert out.text == "There are two entries: README.md and src."
    assert out.progress == ["I'll list the files first."]
    started = out.of_type("tool.call.started")[0].tool_call_started
    done = out.of_type("tool.call.completed")[0].tool_call_completed
    assert (started.tool_call_id, started.tool_name, json_format.MessageToDict(started.parameters)) == (
        "toolu_01",
        "Bash",
        {"command": "ls"},
    )
    assert done.tool_call_id == "toolu_01" and "README.md" in done.result_preview["text"]
    answers = [
        r
        for r in out.of_type("message.completed")
        if r.message_completed.message.kind != common_pb2.MESSAGE_KIND_PROGRESS
    ]
    assert [a.message_completed.message.content for a in answers] == [out.text]


async def test_thinking_is_reasoning_never_answer(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "think hard")
    assert out.text == "Short answer."
    assert out.reasoning == "The user wants a short answer. "
    for streaming in (False,):
        plain = await run(host, fake, "think again", config={"streaming": streaming})
        assert plain.reasoning == "The user wants a short answer. " and plain.text == "Short answer."
        assert plain.of_type("message.delta") == []


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("multibyte", "héllo 👋🏽 世界"),
        ("u2028", "line\u2028separator\u2029paragraph"),
        ("garbage", "Claude heard: garbage mid-stream (turn 1)"),
        ("subagent", "The helper found it."),
    ],
)
async def test_awkward_streams_give_the_exact_answer(
    host: HostDouble, fake: Fake, word: str, expected: str
) -> None:
    out = await run(host, fake, f"{word} mid-stream" if word == "garbage" else word)
    assert out.completed and out.text == expected
    assert "SUB-AGENT" not in "".join(out.deltas) + "".join(out.progress)


async def test_a_line_over_200_kb_is_one_record(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "big")
    assert out.text == "B" * 250_000


async def test_split_tool_input_json_is_reassembled(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "jsonsplit")
    started = out.of_type("tool.call.started")[0].tool_call_started
    assert json_format.MessageToDict(started.parameters) == {"pattern": "déjà vu", "path": "src"}
    assert out.types.count("tool.call.started") == 1


@pytest.mark.parametrize(
    ("word", "code", "kind", "retryable"),
    [
        ("noresult", "claude_code.no_result", "no_result", False),
        ("crash", "claude_code.process_failed", "process_failed", False),
        ("maxturns", "claude_code.max_turns", "max_turns", False),
        ("overloaded", "claude_code.api_error", "rate_limited", True),
        ("empty", "claude_code.empty_response", "empty_response", False),
    ],
)
async def test_failures_are_typed(
    host: HostDouble, fake: Fake, word: str, code: str, kind: str, retryable: bool
) -> None:
    out = await run(host, fake, word)
    assert out.failure is not None, out.types
    assert (out.failure.code, _details(out)["kind"], out.failure.retryable) == (code, kind, retryable)
    if word == "crash":
        assert "status 3" in out.failure.message and "sk-ant-api03" not in out.failure.message
        assert "abc123abc123" not in out.failure.message and "[REDACTED]" in out.failure.message
    if word in ("maxturns", "overloaded", "empty"):
        assert out.terminal.usage.completion_tokens == 7  # usage the CLI reported stays on run.failed


async def test_start_failures_and_bad_input(host: HostDouble, fake: Fake) -> None:
    missing = await run(host, fake, "hi", config={"command": "no-such-claude-binary"})
    assert (
        missing.failure.code == "claude_code.command_not_found"
        and _details(missing)["kind"] == "start_failed"
    )
    empty = await run(host, fake, "   ")
    assert empty.failure.code == "claude_code.empty_input" and _details(empty)["kind"] == "input_invalid"
    bad = await run(host, fake, "hi", config={"args-json": "[not json"})
    assert bad.failure.code == "runner.config_invalid" and _details(bad) == {
        "field": "args-json",
        "kind": "config_invalid",
    }
    outside = await run(host, fake, "hi", config={"workspace": "/etc"})
    assert outside.failure.code == "runner.config_invalid" and _details(outside)["field"] == "workspace"
    assert fake.invocations() == []


def _processes_with(text: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "status", "cwd"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and text in (p.info["cwd"] or ""):
                out.append(p)
        except psutil.Error:
            continue
    return out


async def test_timeout_kills_the_harness_and_its_children(host: HostDouble, fake: Fake) -> None:
    start = time.monotonic()
    out = await run(host, fake, "hang", config={"timeout": 2})
    assert out.failure.code == "claude_code.timeout" and out.failure.retryable
    assert time.monotonic() - start < 20
    assert _processes_with(str(fake.root)) == []


async def test_cancel_mid_run_leaves_no_process(host: HostDouble, fake: Fake) -> None:
    handle = await host.start_run(
        __import__("agentrunner_runners.claude_code", fromlist=["ClaudeCodeRunner"]).ClaudeCodeRunner,
        "hang",
        config=fake.config(),
    )
    for _ in range(100):
        if len(_processes_with(str(fake.root))) >= 2:
            break
        await asyncio.sleep(0.1)
    assert len(_processes_with(str(fake.root))) >= 2  # the fake and its grandchild
    await host.cancel(handle.run_id, grace=5.0)
    out = await handle.wait(30)
    assert out.failure.code == "cancelled" and _details(out)["kind"] == "cancelled"
    assert _processes_with(str(fake.root)) == []


async def test_context_files_skills_and_attachments_reach_the_workspace(host: HostDouble, fake: Fake) -> None:
    host.on("DownloadArtifact", [{"data": "aGVsbG8gZmlsZQ==", "offset": "0"}])
    att = common_pb2.ArtifactRef(
        artifact_id="art_1", name="../notes.txt", mime_type="text/plain", size_bytes=10, sha256="ab"
    )
    out = await run(host, fake, "context", attachments=[att], skills=["summarize"])
    seen = json.loads(out.text)
    assert seen["schema"] == "langbot.agent_runner.external_harness_context.v1" and seen["md"]
    assert seen["inputs"] == [["inputs/notes.txt", "hello file"]]
    assert seen["skills"] == ["summarize"]
    workspace = next(p for p in fake.root.iterdir() if p.name.startswith("conv-"))
    skill = workspace / ".claude" / "skills" / "summarize" / "SKILL.md"
    assert skill.stat().st_mode & 0o222 == 0  # read-only
    assert not list((workspace / ".langbot").glob("mcp-*.json"))  # no MCP config left behind


async def test_env_is_explicit(host: HostDouble, fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRUNNER_DATABASE_URL", "postgresql://secret@db/x")
    await run(host, fake, "hi", config={"env-json": '{"CLAUDE_EXTRA": "1"}'})
    env = fake.invocations()[0]["env"]
    assert "CLAUDE_EXTRA" in env and "AGENTRUNNER_DATABASE_URL" not in env and "PATH" in env
    assert os.environ.get("AGENTRUNNER_DATABASE_URL")
