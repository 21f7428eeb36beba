"""The codex runner (`app-server` transport, the default) against the fake `codex app-server`: a real
subprocess speaking JSON-RPC over stdio, writing every line in pieces that cut UTF-8 sequences, and
checking every message the runner sends (a violation fails the run with its stderr)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner.testing import HostDouble, RunHandle
from agentrunner.v1 import common_pb2
from agentrunner_runners.codex import SESSION_KEY, USAGE_KEY, CodexRunner
from tests.runners.codex.conftest import Fake, run
from tests.runners.codex.test_codex_exec import _processes_with

pytestmark = pytest.mark.asyncio


def _details(out) -> dict[str, Any]:
    return json_format.MessageToDict(out.failure.details)


def _stored(out, key: str) -> list[Any]:
    return [
        json_format.MessageToDict(r.state_updated.value)
        for r in out.of_type("state.updated")
        if r.state_updated.key == key
    ]


def _answers(out) -> list[str]:
    return [
        r.message_completed.message.content
        for r in out.of_type("message.completed")
        if r.message_completed.message.kind == common_pb2.MESSAGE_KIND_UNSPECIFIED
    ]


def _progress(out) -> list[str]:
    return [
        r.message_completed.message.content
        for r in out.of_type("message.completed")
        if r.message_completed.message.kind == common_pb2.MESSAGE_KIND_PROGRESS
    ]


def _no_violation(fake: Fake) -> None:
    for call in fake.invocations():
        assert "protocol violation" not in str(call)


async def test_a_turn_streams_the_answer_once_and_stores_the_thread_first(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "hello there")
    assert out.completed and out.text == "Codex heard: hello there (turn 1)"
    assert _answers(out) == [out.text] and out.reasoning == "**Answering** the user directly."
    deltas = [r.message_delta for r in out.of_type("message.delta") if r.message_delta.kind == 0]
    assert len(deltas) == 3 and "".join(d.text for d in deltas) == out.text
    answer = out.of_type("message.completed")[-1].message_completed.message
    assert {d.message_id for d in deltas} == {answer.message_id}
    (thread,) = _stored(out, SESSION_KEY)
    stored_at = next(i for i, r in enumerate(out.results) if r.state_updated.key == SESSION_KEY)
    assert stored_at < next(i for i, t in enumerate(out.types) if t.startswith("message."))
    usage = out.terminal.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (100, 10)
    (call,) = fake.invocations()
    assert call["argv"] == ["app-server", "--listen", "stdio://"] and call["stdin"] == "hello there"
    assert call["client"] == ["initialize", "initialized", "thread/start", "turn/start"]
    assert call["thread"] == thread and call["resumed"] is None
    assert out.terminal.metadata["thread_id"] == thread


async def test_multibyte_text_split_across_deltas_and_reads(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "multibyte please")
    assert out.text == "héllo 👋🏽 世界 ✓" and _answers(out) == [out.text]
    assert (
        "".join(r.message_delta.text for r in out.of_type("message.delta") if r.message_delta.kind == 0)
        == out.text
    )


async def test_the_next_turn_resumes_the_thread_and_reports_only_its_own_usage(
    host: HostDouble, fake: Fake
) -> None:
    first = await run(host, fake, "one")
    (thread,) = _stored(first, SESSION_KEY)
    (total,) = _stored(first, USAGE_KEY)
    second = await run(host, fake, "two", state={"conversation": {SESSION_KEY: thread, USAGE_KEY: total}})
    assert second.text == "Codex heard: two (turn 2)"
    call = fake.invocations()[1]
    assert call["resumed"] == thread and call["client"][2] == "thread/resume"
    assert _stored(second, SESSION_KEY) == []
    assert (second.terminal.usage.prompt_tokens, second.terminal.usage.completion_tokens) == (100, 10)
    assert _stored(second, USAGE_KEY)[0]["input_tokens"] == 200


async def test_a_resume_codex_rejects_falls_back_to_a_new_thread_and_stores_it(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "hello", state={"conversation": {SESSION_KEY: "thr_gone"}})
    assert out.completed and out.text == "Codex heard: hello (turn 1)"
    (thread,) = _stored(out, SESSION_KEY)
    assert thread != "thr_gone"
    (call,) = fake.invocations()
    assert call["client"][2:5] == ["thread/resume", "thread/start", "turn/start"]
    assert any("could not resume thread thr_gone" in r.run_log.text for r in out.of_type("run.log"))


async def test_tools_commentary_plan_duplicates_and_unknown_notifications(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "tools")
    assert _answers(out) == ["There are two entries: README.md and src."]
    assert "I'll look at the workspace first." in _progress(out)
    assert any("[ ] List the files" in p for p in _progress(out)) and any(
        "[x] List" in p for p in _progress(out)
    )
    started = [r.tool_call_started.tool_name for r in out.of_type("tool.call.started")]
    assert started == ["shell", "apply_patch", "docs.search", "web_search"]
    done = {
        r.tool_call_completed.tool_name: r.tool_call_completed for r in out.of_type("tool.call.completed")
    }
    assert done["docs.search"].error_message == "docs server offline" and not done["shell"].error_code
    dup = await run(host, fake, "dup it")
    assert _answers(dup) == ["Codex heard: dup it (turn 1)"] and dup.completed
    _no_violation(fake)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("workspace", "command=decline, inside=accept, outside=decline"),
        ("decline", "command=decline, inside=decline, outside=decline"),
        ("accept", "command=accept, inside=accept, outside=accept"),
    ],
)
async def test_approval_requests_are_answered_once_by_policy(
    host: HostDouble, fake: Fake, policy: str, expected: str
) -> None:
    out = await run(host, fake, "approve", config={"approvals": policy})
    assert out.text == f"decisions: {expected}"
    (call,) = fake.invocations()
    assert set(call["answers"]) == {
        "item/commandExecution/requestApproval",
        "item/fileChange/requestApproval",
    }
    workspace = Path(call["cwd"])
    assert (workspace / "notes.md").exists() == (policy != "decline")


async def test_elicitation_user_input_and_unknown_requests_get_one_safe_answer(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "elicit")
    assert out.text == "elicitation=decline, input={}, unknown=-32601"


async def _approvals_asked(handle: RunHandle, count: int) -> list[Any]:
    asked: list[Any] = []
    async with asyncio.timeout(30):
        while len(asked) < count:
            result = await handle.next()
            if result.HasField("interaction_requested"):
                asked.append(result.interaction_requested.interaction)
    return asked


async def test_ask_forwards_each_approval_to_the_user_and_waits_for_the_answer(
    host: HostDouble, fake: Fake
) -> None:
    handle = await host.start_run(CodexRunner, "approve", config=fake.config(approvals="ask"))
    (command,) = await _approvals_asked(handle, 1)
    assert command.title == "Codex asks to run a command" and "rm -rf /tmp/x" in command.description
    assert [a.id for a in command.actions] == ["confirm", "cancel"]
    await host.steer(handle.run_id, "an unrelated follow-up")  # not an answer: kept for later
    await host.answer_interaction(handle.run_id, command.interaction_id, "confirm")
    (inside,) = await _approvals_asked(handle, 1)
    assert "notes.md" in inside.description
    await host.answer_interaction(handle.run_id, inside.interaction_id, "cancel")
    (outside,) = await _approvals_asked(handle, 1)
    await host.answer_interaction(handle.run_id, outside.interaction_id, "confirm")
    out = await handle.wait(30)
    assert out.completed
    assert "decisions: command=accept, inside=decline, outside=accept" in _answers(out)
    # the follow-up that arrived meanwhile ran as the next turn
    assert "Codex heard: an unrelated follow-up (turn 2)" in _answers(out)


async def test_an_unanswered_question_is_declined_after_the_approval_timeout(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "approve", config={"approvals": "ask", "approval-timeout": 1})
    assert out.text == "decisions: command=decline, inside=decline, outside=decline"
    assert len(out.of_type("interaction.requested")) == 3
    assert any("nobody answered" in r.run_log.text for r in out.of_type("run.log"))


@pytest.mark.parametrize(
    ("prompt", "code", "kind", "retryable"),
    [
        ("ratelimit", "codex.rate_limited", "rate_limited", True),
        ("turnfail", "codex.turn_failed", "turn_failed", False),
        ("interrupted", "codex.interrupted", "interrupted", False),
        ("noanswer", "codex.empty_response", "empty_response", False),
        ("noturn", "codex.process_exited", "process_failed", False),
    ],
)
async def test_turn_failures_map_to_typed_codes(
    host: HostDouble, fake: Fake, prompt: str, code: str, kind: str, retryable: bool
) -> None:
    out = await run(host, fake, prompt)
    assert (out.failure.code, _details(out)["kind"], out.failure.retryable) == (code, kind, retryable)
    if prompt != "noturn":
        assert out.terminal.usage.prompt_tokens == 100  # the usage codex reported stays on run.failed


async def test_transient_errors_are_warnings_and_the_turn_completes(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "transient")
    assert out.completed and out.text.startswith("Codex heard: transient")
    assert sum("Reconnecting" in r.run_log.text for r in out.of_type("run.log")) == 2


async def test_a_thread_that_cannot_start_fails_typed(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "hello", config={"env-json": {"FAKE_CODEX_THREAD_START": "fail"}})
    assert (
        out.failure.code == "codex.thread_start_failed"
        and "model provider unavailable" in out.failure.message
    )


async def test_an_early_exit_fails_with_redacted_stderr(host: HostDouble, fake: Fake) -> None:
    out = await run(
        host, fake, "nothing at all", config={"env-json": {"OPENAI_API_KEY": "sk-env-secret-0123456789"}}
    )
    assert out.failure.code == "codex.process_exited" and _details(out)["exit_code"] == 1
    text = str(out.results)
    for secret in ("SECRETSECRETSECRET1234", "abc123abc123abc123", "sk-env-secret-0123456789"):
        assert secret not in text
    assert "upstream said" in out.failure.message


async def test_cancel_interrupts_the_turn_then_stops_the_group(host: HostDouble, fake: Fake) -> None:
    handle = await host.start_run(CodexRunner, "hang", config=fake.config())
    for _ in range(100):
        if len(_processes_with(str(fake.root))) >= 2:
            break
        await asyncio.sleep(0.1)
    assert len(_processes_with(str(fake.root))) >= 2  # the fake and its grandchild
    await host.cancel(handle.run_id, reason="user pressed stop", grace=5.0)
    out = await handle.wait(30)
    assert out.failure.code == "cancelled" and _details(out)["kind"] == "cancelled"
    assert _details(out)["interrupted"] is True
    assert _processes_with(str(fake.root)) == []
    assert "turn/interrupt" in fake.invocations()[0]["client"]


async def test_a_server_that_ignores_interrupt_is_killed_without_orphans(
    host: HostDouble, fake: Fake
) -> None:
    start = time.monotonic()
    out = await run(host, fake, "stubborn", config={"timeout": 2})
    assert out.failure.code == "codex.timeout" and out.failure.retryable
    assert _details(out)["interrupted"] is False
    assert time.monotonic() - start < 20
    assert _processes_with(str(fake.root)) == []


async def test_image_attachments_go_to_the_first_turn_as_local_images(host: HostDouble, fake: Fake) -> None:
    host.on("DownloadArtifact", [{"data": "iVBORw0KGgo=", "offset": "0"}])
    image = common_pb2.ArtifactRef(
        artifact_id="art_1", name="shot.png", mime_type="image/png", size_bytes=8, sha256="ab"
    )
    out = await run(host, fake, "what is in the picture?", attachments=[image])
    assert out.completed
    (call,) = fake.invocations()
    assert call["inputs"] == ["text", "localImage"]


async def test_ask_without_steering_answers_by_the_workspace_policy(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "approve", config={"approvals": "ask"}, apis={"steering_pull": False})
    assert out.text == "decisions: command=decline, inside=accept, outside=decline"
    assert out.of_type("interaction.requested") == []
    assert any("needs steering" in r.run_log.text for r in out.of_type("run.log"))


async def test_a_question_shows_the_command_redacted(host: HostDouble, fake: Fake) -> None:
    handle = await host.start_run(
        CodexRunner,
        "approve",
        config=fake.config(approvals="ask", **{"approval-timeout": 1}),
    )
    out = await handle.wait(30)
    asked = [r.interaction_requested.interaction for r in out.of_type("interaction.requested")]
    assert len(asked) == 3 and "rm -rf /tmp/x" in asked[0].description
    assert all("SECRETSECRET" not in a.description + a.fallback_text for a in asked)
    assert "SECRETSECRET" not in str(out.results)  # nor in the tool call that shows the command
    assert out.completed


async def test_an_answer_after_its_turn_ended_is_acknowledged_not_a_failure(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "", interaction={"interaction_id": "int_late", "action_id": "confirm"})
    assert out.completed and "after the Codex turn that asked for it had ended" in out.text
    assert fake.invocations() == []
