"""The codex runner (`exec` transport) against the fake `codex` (a real subprocess), through the host double."""

from __future__ import annotations

import asyncio
import json
import os
import time
import tomllib
from typing import Any

import psutil
import pytest
from google.protobuf import json_format

from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2
from agentrunner_runners.codex import SESSION_KEY, USAGE_KEY, CodexRunner
from tests.runners.codex.conftest import Fake, run

pytestmark = pytest.mark.asyncio


@pytest.fixture(autouse=True)
def _exec(fake: Fake) -> None:
    fake.transport = "exec"


def _details(out) -> dict[str, Any]:
    return json_format.MessageToDict(out.failure.details)


def _stored(out, key: str) -> list[Any]:
    return [
        json_format.MessageToDict(r.state_updated.value)
        for r in out.of_type("state.updated")
        if r.state_updated.key == key
    ]


async def test_a_turn_answers_once_and_stores_the_thread_before_output(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "hello there")
    assert out.completed and out.text == "Codex heard: hello there (turn 1)"
    (thread,) = _stored(out, SESSION_KEY)
    at = next(
        i
        for i, r in enumerate(out.results)
        if r.HasField("state_updated") and r.state_updated.key == SESSION_KEY
    )
    first_output = next(i for i, t in enumerate(out.types) if t.startswith("message."))
    assert at < first_output
    answers = [
        r.message_completed.message.content
        for r in out.of_type("message.completed")
        if r.message_completed.message.kind == common_pb2.MESSAGE_KIND_UNSPECIFIED
    ]
    assert answers == [out.text] and not out.terminal.run_completed.HasField("message")
    assert out.reasoning == "**Answering** the user directly." and "Answering" not in out.text
    usage = out.terminal.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (100, 10, 110)
    assert json_format.MessageToDict(usage.extra) == {"cached_input_tokens": 20}
    (call,) = fake.invocations()
    argv = call["argv"]
    assert argv[:2] == ["exec", "--json"] and "resume" not in argv
    assert argv[argv.index("--sandbox") + 1] == "workspace-write" and 'approval_policy="never"' in argv
    assert call["stdin"] == "hello there" and "hello there" not in " ".join(argv)
    assert call["cwd"].startswith(str(fake.root)) and out.terminal.metadata["thread_id"] == thread


async def test_the_next_turn_resumes_the_thread_and_reports_only_its_own_usage(
    host: HostDouble, fake: Fake
) -> None:
    first = await run(host, fake, "one")
    (thread,) = _stored(first, SESSION_KEY)
    (total,) = _stored(first, USAGE_KEY)
    assert total == {"thread_id": thread, "input_tokens": 100, "cached_input_tokens": 20, "output_tokens": 10}
    second = await run(host, fake, "two", state={"conversation": {SESSION_KEY: thread, USAGE_KEY: total}})
    assert second.text == "Codex heard: two (turn 2)"
    argv = fake.invocations()[1]["argv"]
    assert argv[-2:] == ["resume", thread]
    assert _stored(second, SESSION_KEY) == []  # the same thread: nothing to store
    # codex reports the thread's total (200/40/20); the run reports this turn's share
    assert (second.terminal.usage.prompt_tokens, second.terminal.usage.completion_tokens) == (100, 10)
    assert _stored(second, USAGE_KEY)[0]["input_tokens"] == 200


async def test_a_thread_codex_cannot_resume_falls_back_to_a_new_one(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "again", state={"conversation": {SESSION_KEY: "thread-gone"}})
    assert out.completed and out.text.endswith("(turn 1)")
    first, second = fake.invocations()
    assert first["argv"][-2:] == ["resume", "thread-gone"] and "resume" not in second["argv"]
    (new,) = _stored(out, SESSION_KEY)
    assert new != "thread-gone"
    # a stored total of another thread is not subtracted
    out2 = await run(
        host,
        fake,
        "fresh",
        state={"conversation": {USAGE_KEY: {"thread_id": "other", "input_tokens": 5000, "output_tokens": 1}}},
    )
    assert out2.terminal.usage.prompt_tokens == 100


async def test_every_item_type(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "tools please")
    assert out.text == "There are two entries: README.md and src."
    assert out.progress[0] == "I'll look at the workspace first."
    assert any("[x] List the files" in p and "[ ] Write notes" in p for p in out.progress)
    assert out.progress[-1].startswith("[x] List the files\n[x] Write notes")
    started = {
        r.tool_call_started.tool_call_id: r.tool_call_started for r in out.of_type("tool.call.started")
    }
    done = {
        r.tool_call_completed.tool_call_id: r.tool_call_completed for r in out.of_type("tool.call.completed")
    }
    assert sorted(s.tool_name for s in started.values()) == [
        "apply_patch",
        "docs.search",
        "shell",
        "web_search",
    ]
    assert set(started) == set(done)  # every tool completed, a file change without a start too
    shell = next(i for i, s in started.items() if s.tool_name == "shell")
    assert json_format.MessageToDict(started[shell].parameters) == {"command": "bash -lc ls"}
    assert "README.md" in done[shell].result_preview["text"] and not done[shell].error_code
    mcp = next(i for i, s in started.items() if s.tool_name == "docs.search")
    assert done[mcp].error_code == "tool.error" and "offline" in done[mcp].error_message
    assert any("non-fatal warning" in r.run_log.text for r in out.of_type("run.log"))
    assert out.types.index("tool.call.started") > out.types.index("message.completed")  # commentary first


@pytest.mark.parametrize(
    ("word", "expected"),
    [("multibyte", "héllo 👋🏽 世界 ✓"), ("dup", "Codex heard: dup (turn 1)"), ("big", "C" * 250_000)],
)
async def test_awkward_streams_give_the_exact_answer_once(
    host: HostDouble, fake: Fake, word: str, expected: str
) -> None:
    out = await run(host, fake, word)
    assert out.completed and out.text == expected
    assert len([r for r in out.of_type("message.completed") if r.message_completed.message.kind == 0]) == 1


async def test_transient_errors_are_not_failures(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "transient hiccups")
    assert out.completed and out.text.startswith("Codex heard: transient")
    assert [r.run_log.text for r in out.of_type("run.log")][:2] == [
        "Codex: Reconnecting... 1/5",
        "Codex: Reconnecting... 2/5",
    ]


@pytest.mark.parametrize(
    ("word", "code", "kind", "retryable"),
    [
        ("ratelimit", "codex.rate_limited", "rate_limited", True),
        ("turnfail", "codex.turn_failed", "turn_failed", False),
        ("nothing", "codex.process_failed", "process_failed", False),
        ("noanswer", "codex.empty_response", "empty_response", False),
        ("noturn", "codex.no_result", "no_result", False),
    ],
)
async def test_failures_are_typed(
    host: HostDouble, fake: Fake, word: str, code: str, kind: str, retryable: bool
) -> None:
    out = await run(host, fake, word)
    assert out.failure is not None, out.types
    got = (out.failure.code, _details(out)["kind"], out.failure.retryable)
    assert got == (code, kind, retryable), out.failure.message
    if word == "nothing":
        assert "status 1" in out.failure.message and "sk-proj-SECRET" not in out.failure.message
        assert "abc123abc123" not in out.failure.message and "[REDACTED]" in out.failure.message
    if word == "noanswer":
        assert out.terminal.usage.prompt_tokens == 100  # usage codex reported stays on run.failed
    if word == "ratelimit":
        assert "429" in out.failure.message


async def test_start_failures_and_bad_config(host: HostDouble, fake: Fake) -> None:
    missing = await run(host, fake, "hi", config={"command": "no-such-codex-binary"})
    assert missing.failure.code == "codex.command_not_found" and _details(missing)["kind"] == "start_failed"
    empty = await run(host, fake, "   ")
    assert empty.failure.code == "codex.empty_input" and _details(empty)["kind"] == "input_invalid"
    for bad, field in (
        ({"sandbox": "yolo"}, "sandbox"),
        ({"config-overrides-json": '{"approval_policy": "on-request"}'}, "config-overrides-json"),
        ({"mcp-servers-json": '[{"name": "langbot", "command": "x"}]'}, "mcp-servers-json"),
    ):
        out = await run(host, fake, "hi", config=bad)
        assert out.failure.code == "runner.config_invalid" and _details(out)["field"] == field, bad
    (fake.home / "config.toml").write_text('[mcp_servers.docs]\ncommand = "a"\n')
    clash = await run(host, fake, "hi", config={"mcp-servers-json": {"docs": {"command": "b"}}})
    assert clash.failure.code == "codex.config_invalid" and "docs" in clash.failure.message
    assert fake.invocations() == []


async def test_codex_home_is_private_per_conversation_and_its_config_removed(
    host: HostDouble, fake: Fake
) -> None:
    """One `CODEX_HOME` per conversation (the same path every turn, so Codex's instructions naming it do
    not change and are not sent again on a resumed thread), under `.codex/` (read-only for the model's
    commands); its `config.toml`, which names the run's bridge, is gone when the run ends."""
    mcp = {
        "mcp-servers-json": [
            {"name": "search", "url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "k-secret-1"}}
        ]
    }
    out = await run(host, fake, "context", skills=["summarize"], config=mcp)
    seen = json.loads(out.text)
    assert seen["schema"] == "langbot.agent_runner.external_harness_context.v1" and seen["md"]
    assert seen["links"] == ["auth.json", "sessions", "skills"] and seen["skills"] == ["summarize"]
    assert seen["servers"] == ["docs", "search"]  # the user's own servers are kept
    await run(host, fake, "again")
    first, second = (i["codex_home"] for i in fake.invocations())
    assert first == second and first.startswith(str(fake.root)) and first.endswith("/.codex/home")
    assert not await asyncio.to_thread(os.path.exists, f"{first}/config.toml")  # removed after the turn
    assert (fake.home / "auth.json").exists() and list((fake.home / "sessions").glob("*.json"))
    assert tomllib.loads((fake.home / "config.toml").read_text())["model"] == "gpt-fake"  # untouched


def _processes_with(text: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["status", "cwd"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and text in (p.info["cwd"] or ""):
                out.append(p)
        except psutil.Error:
            continue
    return out


async def test_timeout_kills_codex_and_its_children(host: HostDouble, fake: Fake) -> None:
    start = time.monotonic()
    out = await run(host, fake, "hang", config={"timeout": 2})
    assert (
        out.failure.code == "codex.timeout" and out.failure.retryable and _details(out)["kind"] == "timeout"
    )
    assert time.monotonic() - start < 20
    assert _processes_with(str(fake.root)) == []


async def test_cancel_mid_turn_leaves_no_process(host: HostDouble, fake: Fake) -> None:
    handle = await host.start_run(CodexRunner, "hang", config=fake.config())
    for _ in range(100):
        if len(_processes_with(str(fake.root))) >= 2:
            break
        await asyncio.sleep(0.1)
    assert len(_processes_with(str(fake.root))) >= 2  # the fake and its grandchild
    await host.cancel(handle.run_id, grace=5.0)
    out = await handle.wait(30)
    assert out.failure.code == "cancelled" and _details(out)["kind"] == "cancelled"
    assert _processes_with(str(fake.root)) == []


async def test_env_is_explicit_and_outbox_files_come_back(
    host: HostDouble, fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTRUNNER_DATABASE_URL", "postgresql://secret@db/x")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-runner-key-0123456789")
    out = await run(host, fake, "outbox", config={"env-json": '{"CODEX_EXTRA": "1"}'})
    env = fake.invocations()[0]["env"]
    assert {"CODEX_EXTRA", "CODEX_HOME", "OPENAI_API_KEY", "PATH"} <= set(env)
    assert "AGENTRUNNER_DATABASE_URL" not in env
    (upload,) = host.uploads
    assert upload.header.name == "report.txt" and upload.data == b"codex report\n" * 1000
    answer = out.of_type("message.completed")[-1].message_completed.message
    assert [a.name for a in answer.artifacts] == ["report.txt"]
