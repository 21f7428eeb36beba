"""The acp runner against the scripted ACP agent (`fake_acp`): a real subprocess speaking JSON-RPC over
stdio, every line written in pieces that cut UTF-8 sequences, every client message checked (a violation
fails the run with its stderr)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner.testing import HostDouble, RunHandle
from agentrunner.v1 import common_pb2
from agentrunner_runners.acp import COST_KEY, SESSION_KEY, AcpRunner
from tests.runners.acp.conftest import Fake, processes_in, run

pytestmark = pytest.mark.asyncio


def _details(out) -> dict[str, Any]:
    return json_format.MessageToDict(out.failure.details)


def _stored(out, key: str) -> list[Any]:
    return [
        json_format.MessageToDict(r.state_updated.value)
        for r in out.of_type("state.updated")
        if r.state_updated.key == key
    ]


def _completed(out, kind: int) -> list[str]:
    return [
        r.message_completed.message.content
        for r in out.of_type("message.completed")
        if r.message_completed.message.kind == kind
    ]


def _logs(out) -> list[str]:
    return [r.run_log.text for r in out.of_type("run.log")]


def _extra(out) -> dict[str, Any]:
    return json_format.MessageToDict(out.terminal.usage.extra)


async def test_a_turn_streams_the_answer_once_and_stores_the_session_first(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "hello there")
    assert out.completed and out.text == "Fake heard: hello there (turn 1)"
    assert _completed(out, common_pb2.MESSAGE_KIND_UNSPECIFIED) == [out.text]
    deltas = [r.message_delta for r in out.of_type("message.delta") if r.message_delta.kind == 0]
    assert len(deltas) == 3 and "".join(d.text for d in deltas) == out.text
    answer = out.of_type("message.completed")[-1].message_completed.message
    assert {d.message_id for d in deltas} == {answer.message_id}
    assert _completed(out, common_pb2.MESSAGE_KIND_REASONING) == ["Thinking about it."]
    (session,) = _stored(out, SESSION_KEY)
    stored_at = next(i for i, r in enumerate(out.results) if r.state_updated.key == SESSION_KEY)
    assert stored_at < next(i for i, t in enumerate(out.types) if t.startswith("message."))
    usage = out.terminal.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (100, 20, 120)
    assert _extra(out)["cost_usd"] == pytest.approx(0.01) and _extra(out)["thought_tokens"] == 5
    (call,) = fake.invocations()
    assert call["methods"] == ["initialize", "session/new", "session/prompt"]  # custom: the agent's own mode
    assert out.terminal.metadata["session_id"] == session and out.terminal.metadata["agent"] == "fake-acp 1.0"
    assert any("ACP agent fake-acp 1.0" in line and "image=True" in line for line in _logs(out))


async def test_a_session_mode_is_set_when_the_agent_offers_it_and_warned_about_when_not(
    host: HostDouble, fake: Fake
) -> None:
    await run(host, fake, "hello", config={"session-mode": "workspace-write"})
    assert fake.invocations()[0]["methods"][2] == "session/set_mode"
    assert fake.invocations()[0]["mode"] == "workspace-write"
    out = await run(host, fake, "hello", config={"session-mode": "yolo"})
    assert out.completed and "mode" not in fake.invocations()[1]
    assert any(
        "no session mode 'yolo' (it offers default, auto, workspace-write)" in line for line in _logs(out)
    )


async def test_the_next_turn_resumes_the_session_and_costs_only_its_own(host: HostDouble, fake: Fake) -> None:
    first = await run(host, fake, "one")
    (session,) = _stored(first, SESSION_KEY)
    (cost,) = _stored(first, COST_KEY)
    second = await run(host, fake, "two", state={"conversation": {SESSION_KEY: session, COST_KEY: cost}})
    assert second.text == "Fake heard: two (turn 2)"  # the agent saw the first turn
    call = fake.invocations()[1]
    assert call["opened"] == "session/resume" and call["session"] == session
    assert _stored(second, SESSION_KEY) == []  # unchanged
    assert _extra(second)["cost_usd"] == pytest.approx(0.01) and _extra(second)["session_cost"] == 0.02


async def test_an_agent_without_resume_is_loaded_and_its_replay_is_not_output(
    host: HostDouble, fake: Fake
) -> None:
    caps = {"loadSession": True, "promptCapabilities": {}, "mcpCapabilities": {}}
    config = {"env-json": {"FAKE_ACP_CAPS": json.dumps(caps)}}
    first = await run(host, fake, "one", config=config)
    (session,) = _stored(first, SESSION_KEY)
    second = await run(host, fake, "two", config=config, state={"conversation": {SESSION_KEY: session}})
    assert fake.invocations()[1]["opened"] == "session/load"
    assert second.text == "Fake heard: two (turn 2)"
    assert "one" not in "".join(r.message_delta.text for r in second.of_type("message.delta"))


async def test_a_session_the_agent_lost_falls_back_to_a_new_one(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "hello", state={"conversation": {SESSION_KEY: "gone"}})
    assert out.completed and out.text == "Fake heard: hello (turn 1)"
    (session,) = _stored(out, SESSION_KEY)
    assert session != "gone"
    assert fake.invocations()[0]["methods"][:3] == ["initialize", "session/resume", "session/new"]
    assert any("could not resume session gone" in line for line in _logs(out))


async def test_multibyte_chunks_cut_inside_characters(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "multibyte please")
    assert out.text == "héllo 👋🏽 世界 ✓"
    assert "".join(r.message_delta.text for r in out.of_type("message.delta")) == out.text


async def test_tool_calls_commentary_and_plans_are_apart_from_the_answer(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "tools")
    assert out.text == "The workspace has a README."
    assert _completed(out, common_pb2.MESSAGE_KIND_PROGRESS)[:2] == [
        "Let me look at the workspace.",
        "Plan:\n[x] Read the files\n[~] Answer",
    ]
    started = {
        r.tool_call_started.tool_call_id: r.tool_call_started for r in out.of_type("tool.call.started")
    }
    done = {
        r.tool_call_completed.tool_call_id: r.tool_call_completed for r in out.of_type("tool.call.completed")
    }
    assert started["call-1"].tool_name == "Read" and set(done) == {"call-1", "call-2", "call-3"}
    assert dict(started["call-3"].parameters) == {"pattern": "TODO"}  # held until its input came
    assert done["call-3"].result_preview["text"] == "no match"
    assert done["call-1"].result_preview["text"] == "# readme" and not done["call-1"].error_code
    assert done["call-2"].error_code == "acp.tool_unfinished"  # the pair balances when the turn ends


async def test_the_workspace_policy_allows_edits_inside_and_rejects_the_rest(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "permit")
    assert out.text == "decisions: yes,no,no,yes"  # the last one named by its id: known from its tool call
    out = await run(host, fake, "permit", config={"permissions": "allow"})
    assert out.text == "decisions: yes,yes,yes,yes"


async def _asked(handle: RunHandle, count: int) -> list[Any]:
    asked: list[Any] = []
    async with asyncio.timeout(30):
        while len(asked) < count:
            result = await handle.next()
            if result.HasField("interaction_requested"):
                asked.append(result.interaction_requested.interaction)
    return asked


async def test_ask_forwards_each_permission_to_the_user(host: HostDouble, fake: Fake) -> None:
    handle = await host.start_run(AcpRunner, "permit", config=fake.config(permissions="ask"))
    (inside,) = await _asked(handle, 1)
    await host.steer(handle.run_id, "an unrelated follow-up")  # not an answer: kept for the next turn
    assert inside.title == "The agent asks to use edit-inside" and "outbox/a.txt" in inside.description
    await host.answer_interaction(handle.run_id, inside.interaction_id, "cancel")
    (outside,) = await _asked(handle, 1)
    await host.answer_interaction(handle.run_id, outside.interaction_id, "confirm")
    (command,) = await _asked(handle, 1)
    await host.answer_interaction(handle.run_id, command.interaction_id, "cancel")
    (known,) = await _asked(handle, 1)
    assert "b.txt" in known.description  # what the agent announced, though it asked by id alone
    await host.answer_interaction(handle.run_id, known.interaction_id, "confirm")
    out = await handle.wait(30)
    answers = _completed(out, common_pb2.MESSAGE_KIND_UNSPECIFIED)
    assert answers[0] == "decisions: no,yes,no,yes"
    # the follow-up ran as the next turn of the same session (a new agent process resumed it)
    assert answers[1] == "Fake heard: an unrelated follow-up (turn 2)"
    assert [call["opened"] for call in fake.invocations()] == ["session/new", "session/resume"]


async def test_fs_stays_inside_the_workspace_and_outbox_files_come_back(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "fs")
    assert out.text == "write: ok; read: 'nöte\\n'; outside: -32602"
    (answer,) = [
        r.message_completed.message
        for r in out.of_type("message.completed")
        if r.message_completed.message.content == out.text
    ]
    assert [a.name for a in answer.artifacts] == ["note.txt"]
    out = await run(host, fake, "fs", config={"client-fs": False})
    assert (
        out.text
        == "write: error; read: {'code': -32601, 'message': 'Method not found', 'data': {'method': 'fs (the runner does not offer file access)'}}; outside: -32601"
    )
    offered = [call.get("clientCapabilities") or {} for call in fake.invocations()]
    assert offered[0]["fs"] == {"readTextFile": True, "writeTextFile": True}
    assert not offered[1].get("fs")  # omitted: not offered (ACP: omitted means unsupported)


async def test_terminals_are_refused_unless_enabled(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "terminal")
    assert out.text == "terminal refused: -32601"
    out = await run(host, fake, "terminal", config={"client-terminal": True})
    assert out.text == "terminal: from-terminal exit 0"


async def test_attachments_map_to_blocks_by_capability_and_are_never_dropped(
    host: HostDouble, fake: Fake
) -> None:
    host.on("DownloadArtifact", [{"data": "aGVsbG8=", "offset": "0"}])  # "hello"
    image = common_pb2.ArtifactRef(
        artifact_id="a1", name="shot.png", mime_type="image/png", size_bytes=5, sha256="ab"
    )
    text = common_pb2.ArtifactRef(
        artifact_id="a2", name="notes.txt", mime_type="text/plain", size_bytes=5, sha256="cd"
    )
    link = common_pb2.ArtifactRef(
        artifact_id="a3", name="page", mime_type="text/html", uri="https://example.com/p"
    )
    out = await run(host, fake, "blocks", attachments=[image, text, link])
    assert out.completed, out.results
    seen = json.loads(out.text)["blocks"]
    assert [b["type"] for b in seen] == ["text", "image", "resource", "resource_link"]
    assert seen[2]["text"] == "hello" and seen[3]["uri"] == "https://example.com/p"
    caps: dict[str, Any] = {"promptCapabilities": {}, "sessionCapabilities": {}}
    out = await run(
        host,
        fake,
        "blocks",
        attachments=[image, text],
        config={"env-json": {"FAKE_ACP_CAPS": json.dumps(caps)}},
    )
    assert out.completed, out.failure
    assert out.text.startswith("{"), out.text
    body = json.loads(out.text)
    assert [b["type"] for b in body["blocks"]] == ["text", "resource_link", "resource_link"]
    assert "could not be sent inline" in body["text"] and "does not accept images" in body["text"]
    assert "does not accept embedded files" in body["text"]


async def test_an_agent_notice_is_logged_not_answered(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "notice")
    assert out.text == "The real answer." and "Warning" not in "".join(
        r.message_delta.text for r in out.of_type("message.delta")
    )
    assert any("the agent says: **Warning:**" in line for line in _logs(out))


@pytest.mark.parametrize(
    ("prompt", "code", "kind", "retryable"),
    [
        ("maxtokens", "acp.max_tokens", "turn_failed", False),
        ("maxturns", "acp.max_turn_requests", "max_turns", False),
        ("refusal", "acp.refusal", "turn_failed", False),
        ("autherror", "acp.auth_error", "auth_error", False),
        ("empty", "acp.empty_response", "empty_response", False),
    ],
)
async def test_stop_reasons_and_errors_map_to_typed_failures(
    host: HostDouble, fake: Fake, prompt: str, code: str, kind: str, retryable: bool
) -> None:
    out = await run(host, fake, prompt)
    assert (out.failure.code, _details(out)["kind"], out.failure.retryable) == (code, kind, retryable)
    answers = [r for r in out.of_type("message.completed") if r.message_completed.message.kind == 0]
    assert answers == []  # streamed text of a failed turn stays progress, never an answer


async def test_an_agent_that_dies_mid_turn_fails_with_its_stderr_redacted(
    host: HostDouble, fake: Fake
) -> None:
    secret = "sk-live-agent-secret-0123456789"
    out = await run(host, fake, "die", config={"env-json": {"FAKE_ACP_SECRET": secret}})
    assert out.failure.code == "acp.process_exited" and _details(out)["exit_code"] == 3
    assert "fatal: lost my key" in out.failure.message and secret not in str(out.results)
    assert _completed(out, common_pb2.MESSAGE_KIND_PROGRESS) == ["I was about to"]  # closed, not an answer
    assert processes_in(fake.root) == []


async def test_an_agent_that_never_answers_initialize_times_out(host: HostDouble, fake: Fake) -> None:
    start = time.monotonic()
    out = await run(host, fake, "hello", config={"rpc-timeout": 1, "env-json": {"FAKE_ACP_NO_INIT": "1"}})
    assert out.failure.code == "acp.rpc_timeout" and out.failure.retryable
    assert "did not answer initialize within 1 s" in out.failure.message
    assert time.monotonic() - start < 15 and processes_in(fake.root) == []


async def test_cancel_sends_session_cancel_then_stops_the_group(host: HostDouble, fake: Fake) -> None:
    handle = await host.start_run(AcpRunner, "hang", config=fake.config())
    for _ in range(100):
        if len(processes_in(fake.root)) >= 2:
            break
        await asyncio.sleep(0.1)
    assert len(processes_in(fake.root)) >= 2  # the agent and its grandchild
    await host.cancel(handle.run_id, reason="user pressed stop", grace=5.0)
    out = await handle.wait(30)
    assert out.failure.code == "cancelled" and _details(out)["agent_confirmed"] is True
    assert "session/cancel" in fake.invocations()[0]["methods"]
    assert processes_in(fake.root) == []


async def test_an_agent_that_ignores_cancel_is_killed_at_the_deadline(host: HostDouble, fake: Fake) -> None:
    start = time.monotonic()
    out = await run(host, fake, "stubborn", config={"timeout": 2})
    assert out.failure.code == "acp.timeout" and out.failure.retryable
    assert _details(out)["agent_confirmed"] is False
    assert time.monotonic() - start < 20 and processes_in(fake.root) == []


async def test_a_missing_command_is_a_typed_start_failure(host: HostDouble, fake: Fake) -> None:
    out = await run(host, fake, "hello", config={"acp-command": "no-such-acp-agent --acp"})
    assert out.failure.code == "acp.command_not_found" and _details(out)["kind"] == "start_failed"


async def test_custom_without_a_command_is_refused_with_one_line(host: HostDouble, fake: Fake) -> None:
    config = fake.config()
    del config["acp-command"]
    out = await host.run(AcpRunner, "hello", config=config, timeout=30)
    assert out.failure.code.endswith("config_invalid") and "acp-command is required" in out.failure.message


async def test_the_langbot_bridge_is_offered_over_http_with_its_token_in_a_header(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "hello", config={"enable-langbot-mcp": True})
    assert out.completed
    (server,) = fake.invocations()[0]["mcpServers"]
    assert (
        server["name"] == "langbot"
        and server["type"] == "http"
        and server["url"].startswith("http://127.0.0.1:")
    )
    assert server["headers"][0]["name"] == "Authorization"
    token = server["headers"][0]["value"].removeprefix("Bearer ")
    assert token not in str(out.results)  # redacted everywhere
    caps = {"mcpCapabilities": {"http": False}}
    await run(
        host,
        fake,
        "hello",
        config={"enable-langbot-mcp": True, "env-json": {"FAKE_ACP_CAPS": json.dumps(caps)}},
    )
    (stdio,) = fake.invocations()[1]["mcpServers"]
    assert stdio["args"] == ["-m", "agentrunner.harness.mcp_proxy"] and "type" not in stdio


async def test_remote_ssh_runs_the_agent_in_the_remote_workspace_with_its_keys_off_argv(
    host: HostDouble, fake: Fake, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrunner_runners.testing import install_fake

    ssh = install_fake(tmp_path / "bin", "ssh")
    remote_home, ssh_log = tmp_path / "remote-home", tmp_path / "ssh.log"
    remote_home.mkdir()
    monkeypatch.setenv("FAKE_SSH_HOME", str(remote_home))
    monkeypatch.setenv("FAKE_SSH_LOG", str(ssh_log))
    monkeypatch.setenv(
        "AGENTRUNNER_HARNESS_ENV_PASSTHROUGH", "FAKE_ACP_LOG,FAKE_ACP_HOME,FAKE_SSH_HOME,FAKE_SSH_LOG"
    )
    secret = "sk-remote-agent-key-0123456789abcdef"
    config = {
        "location": "remote-ssh",
        "ssh-target": "dev@remote.example",
        "ssh-port": 2222,
        "ssh-command": str(ssh),
        "env-json": {"REMOTE_AGENT_API_KEY": secret},
        "workspace": "",  # the remote default: ~/.langbot/workspaces
    }
    out = await run(host, fake, "hello over ssh", config=config)
    assert out.completed and out.text == "Fake heard: hello over ssh (turn 1)"
    argv = json.loads(ssh_log.read_text().splitlines()[-1])["argv"]
    assert argv[:6] == ["-T", "-o", "BatchMode=yes", "-p", "2222", "dev@remote.example"]
    assert secret not in " ".join(argv)  # the key travels on stdin, exported by the remote script
    (call,) = fake.invocations()
    assert "REMOTE_AGENT_API_KEY" in call["env"]
    workspace = remote_home / ".langbot" / "workspaces"
    assert any(p.name.startswith("conv-") for p in workspace.iterdir())
    assert call["mcpServers"] == []  # the loopback bridge is not offered over ssh
