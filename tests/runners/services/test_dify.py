"""The Dify runner against the Dify mock: what a user of a Dify app would notice."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2, proxy_service_pb2
from agentrunner_runners.dify import DifyRunner
from agentrunner_runners.testing.mock_services import MockServices

pytestmark = pytest.mark.asyncio(loop_scope="module")
KEY = "app-Secret-Dify-Key-123"


def config(mock: MockServices, **extra: Any) -> dict[str, Any]:
    return {"base-url": mock.url("/dify/v1"), "api-key": KEY, **extra}


def answer_of(out: Any) -> str:
    return out.text


def state_updates(out: Any) -> dict[str, Any]:
    return {
        r.state_updated.key: json_format.MessageToDict(r.state_updated.value)
        for r in out.of_type("state.updated")
    }


async def test_chat_streams_the_answer_with_usage_and_keeps_the_conversation(
    host: HostDouble, mock: MockServices
) -> None:
    out = await host.run(DifyRunner, "Grüße aus Köln 😀", config=config(mock))
    assert out.completed, out.results
    assert out.text == "Dify heard: Grüße aus Köln 😀"
    deltas = [d for d in out.deltas if d]
    assert len(deltas) > 2 and "".join(deltas) == out.text  # increments, streamed
    assert out.of_type("message.completed") == []  # the answer exactly once: in run.completed
    terminal = out.terminal.run_completed
    assert terminal.message.content == out.text
    usage = out.terminal.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (11, 7, 18)
    conversation = state_updates(out)["external.conversation_id"]
    uuid.UUID(conversation)
    sent = mock.of("dify")[0]
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body["response_mode"] == "streaming" and sent.body["conversation_id"] == ""
    assert sent.body["user"] == "user_user-1"
    # second turn: the stored id goes back to Dify, and is not rewritten
    again = await host.run(
        DifyRunner,
        "noch einmal",
        config=config(mock),
        state={"conversation": {"external.conversation_id": conversation}},
    )
    assert again.completed and mock.of("dify")[1].body["conversation_id"] == conversation
    assert state_updates(again) == {}


async def test_non_streaming_surface_gets_one_message_completed(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(DifyRunner, "hello", config=config(mock), streaming=False)
    assert out.types == ["message.completed", "state.updated", "run.completed"]
    assert out.of_type("message.completed")[0].message_completed.message.content == "Dify heard: hello"


async def test_non_streaming_keeps_reasoning_as_its_own_message(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(DifyRunner, "mock:think x", config=config(mock), streaming=False)
    assert out.types == ["message.completed", "message.completed", "state.updated", "run.completed"]
    assert out.text == "Dify heard: x" and out.reasoning == "Let me think about größe…"
    assert not out.terminal.run_completed.HasField("message")


async def test_agent_thoughts_are_progress_and_files_are_content(
    host: HostDouble, mock: MockServices
) -> None:
    out = await host.run(DifyRunner, "mock:agent weather", config=config(mock, **{"app-type": "agent"}))
    assert out.completed
    final = out.terminal.run_completed.message
    assert final.content == "Dify heard: weather"
    assert [c.image.uri for c in final.contents] == [mock.url("/dify/files/tools/chart.png?sign=abc")]
    assert out.progress == ["calling web_search\n"]  # a progress message, never answer text
    [started] = out.of_type("tool.call.started")
    [done] = out.of_type("tool.call.completed")
    assert started.tool_call_started.tool_name == "web_search"
    assert json_format.MessageToDict(started.tool_call_started.parameters) == {"query": "weather"}
    assert done.tool_call_completed.tool_call_id == started.tool_call_started.tool_call_id
    assert json_format.MessageToDict(done.tool_call_completed.result_preview) == {"text": "3 results"}


async def test_think_is_kept_apart_or_removed(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(DifyRunner, "mock:think x", config=config(mock))
    assert out.text == "Dify heard: x"
    assert out.reasoning == "Let me think about größe…"
    removed = await host.run(DifyRunner, "mock:think x", config=config(mock, **{"remove-think": True}))
    assert removed.text == "Dify heard: x"
    assert removed.reasoning == ""


async def test_moderation_replace_and_unknown_events(host: HostDouble, mock: MockServices) -> None:
    replaced = await host.run(DifyRunner, "mock:replace bad words", config=config(mock))
    assert replaced.text == "Replaced by moderation."
    unknown = await host.run(DifyRunner, "mock:unknown hi", config=config(mock))
    assert unknown.completed and unknown.text == "Dify heard: hi"


@pytest.mark.parametrize(
    ("text", "code", "retryable", "kind", "needle"),
    [
        ("mock:401 x", "dify.auth_error", False, "auth_error", "Access token is invalid"),
        ("mock:429 x", "dify.rate_limited", True, "rate_limited", "retry after 7 s"),
        ("mock:500 x", "dify.server_error", True, "http_error", "Internal Server Error"),
        ("mock:error x", "dify.stream_error", False, "stream_error_event", "Model quota exceeded"),
        # an error event whose status is 429 (the model behind the app was throttled): worth retrying
        ("mock:ratelimited x", "dify.rate_limited", True, "rate_limited", "Rate Limit Error"),
        ("mock:empty x", "dify.empty_response", False, "empty_response", "no answer"),
        ("mock:invalid x", "dify.response_invalid", False, "protocol_error", "not JSON"),
        ("mock:drop x", "dify.connection_lost", True, "connection_error", "lost"),
    ],
)
async def test_failures_are_typed(
    host: HostDouble, mock: MockServices, text: str, code: str, retryable: bool, kind: str, needle: str
) -> None:
    out = await host.run(DifyRunner, text, config=config(mock))
    failure = out.failure
    assert failure is not None, out.results
    assert (failure.code, failure.retryable) == (code, retryable)
    assert json_format.MessageToDict(failure.details)["kind"] == kind
    assert needle in failure.message and KEY not in failure.message
    assert out.of_type("state.updated") == []  # nothing stored after a failed turn


async def test_wrong_key_is_redacted_everywhere(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(DifyRunner, "hi", config={"base-url": mock.url("/dify/v1"), "api-key": "wrong-key"})
    assert out.failure.code == "dify.auth_error" and "wrong-key" not in str(out.results)


async def test_slow_server_hits_the_timeout(host: HostDouble, mock: MockServices) -> None:
    started = time.monotonic()
    out = await host.run(DifyRunner, "mock:slow x", config=config(mock, timeout=1))
    assert out.failure.code == "dify.timeout" and out.failure.retryable
    assert time.monotonic() - started < 15
    await asyncio.sleep(0.2)
    assert mock.of("dify")[0].disconnected  # the upstream request was closed, not left hanging


async def test_run_deadline_clips_the_timeout(host: HostDouble, mock: MockServices) -> None:
    started = time.monotonic()
    out = await host.run(DifyRunner, "mock:slow x", config=config(mock, timeout=60), deadline=2.0)
    assert (out.failure.code, out.failure.retryable) == ("dify.timeout", True), out.failure
    assert time.monotonic() - started < 15


async def test_cancel_closes_the_upstream_request(host: HostDouble, mock: MockServices) -> None:
    handle = await host.start_run(DifyRunner, "mock:slow x", config=config(mock, timeout=60))
    first = await handle.next(timeout=10)  # a delta: the stream is open
    assert first is not None
    handle.cancel()
    await asyncio.sleep(0.5)
    assert mock.of("dify")[0].disconnected


async def test_control_cancel_ends_the_run_as_cancelled(host: HostDouble, mock: MockServices) -> None:
    handle = await host.start_run(DifyRunner, "mock:slow x", config=config(mock, timeout=60))
    assert await handle.next(timeout=10) is not None
    started = time.monotonic()
    await host.cancel(handle.run_id, "user pressed stop", grace=5.0)
    out = await handle.wait(10)
    assert out.failure.code == "cancelled" and "user pressed stop" in out.failure.message
    assert time.monotonic() - started < 4  # at once, not after the grace period
    assert mock.of("dify")[0].disconnected


async def test_a_cancel_signal_and_the_call_cancel_together_still_close_the_upstream_request(
    host: HostDouble, mock: MockServices
) -> None:
    for _ in range(3):
        mock.recorder.requests.clear()
        handle = await host.start_run(DifyRunner, "mock:slow x", config=config(mock, timeout=60))
        assert await handle.next(timeout=10) is not None
        await host.cancel(handle.run_id, "stop", grace=0.0)
        handle.cancel()
        for _ in range(50):
            if mock.of("dify")[0].disconnected:
                break
            await asyncio.sleep(0.05)
        assert mock.of("dify")[0].disconnected


async def test_stale_conversation_is_dropped_and_retried_once(host: HostDouble, mock: MockServices) -> None:
    stale = str(uuid.uuid4())
    out = await host.run(
        DifyRunner, "hi", config=config(mock), state={"conversation": {"external.conversation_id": stale}}
    )
    assert out.completed and out.text == "Dify heard: hi"
    sent = [r.body["conversation_id"] for r in mock.of("dify")]
    assert sent == [stale, ""]
    new = state_updates(out)["external.conversation_id"]
    assert new != stale and uuid.UUID(new)
    # a non-UUID stored value is never sent
    await host.run(
        DifyRunner, "hi", config=config(mock), state={"conversation": {"external.conversation_id": "junk"}}
    )
    assert mock.of("dify")[-1].body["conversation_id"] == ""


async def test_workflow_streams_chunks_and_keeps_its_conversation(
    host: HostDouble, mock: MockServices
) -> None:
    out = await host.run(DifyRunner, "plan a trip", config=config(mock, **{"app-type": "workflow"}))
    assert out.completed, out.results
    conversation = state_updates(out)["external.workflow_conversation_id"]
    assert out.text == f"Workflow heard: plan a trip (conversation {conversation})"
    inputs = mock.of("dify")[0].body["inputs"]
    assert (
        inputs["langbot_user_message_text"] == "plan a trip"
        and inputs["langbot_conversation_id"] == conversation
    )
    assert mock.of("dify")[0].path == "/dify/v1/workflows/run"
    failed = await host.run(DifyRunner, "mock:fail x", config=config(mock, **{"app-type": "workflow"}))
    # the workflow's own failure, told apart from an API error; not retryable
    assert (failed.failure.code, failed.failure.retryable) == ("dify.workflow_failed", False)
    assert "the workflow failed: Node LLM run failed: LLM timeout" in failed.failure.message
    limited = await host.run(
        DifyRunner, "mock:ratelimited x", config=config(mock, **{"app-type": "workflow"})
    )
    assert (limited.failure.code, limited.failure.retryable) == ("dify.rate_limited", True)
    assert "Rate Limit Error" in limited.failure.message and limited.of_type("state.updated") == []


async def test_attachments_are_uploaded_first(host: HostDouble, mock: MockServices) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    host.on("DownloadArtifact", [proxy_service_pb2.DownloadArtifactResponse(data=png)])
    ref = common_pb2.ArtifactRef(
        artifact_id="art-1", mime_type="image/png", name="cat.png", size_bytes=len(png)
    )
    out = await host.run(DifyRunner, "what is this?", config=config(mock), attachments=[ref])
    assert out.completed and out.text == "Dify heard: what is this? (with 1 file(s))"
    upload, chat = mock.of("dify")
    assert upload.path == "/dify/v1/files/upload" and upload.files[0]["size"] == len(png)
    assert upload.files[0]["filename"] == "cat.png" and upload.body["user"] == "user_user-1"
    assert chat.body["files"][0]["transfer_method"] == "local_file"


async def test_oversized_attachment_is_an_input_error(host: HostDouble, mock: MockServices) -> None:
    ref = common_pb2.ArtifactRef(
        artifact_id="art-1", mime_type="image/png", name="huge.png", size_bytes=100 << 20
    )
    out = await host.run(DifyRunner, "x", config=config(mock), attachments=[ref])
    assert out.failure.code == "dify.input_error" and "huge.png" in out.failure.message
    assert mock.of("dify") == []


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        ({"base-url": "ftp://x"}, "base-url"),
        ({"app-type": "robot"}, "app-type"),
        ({"api-key": None}, "api-key"),
        ({"timeout": "soon"}, "timeout"),
    ],
)
async def test_bad_config_names_the_field(
    host: HostDouble, mock: MockServices, cfg: dict[str, Any], field: str
) -> None:
    merged = {k: v for k, v in {**config(mock), **cfg}.items() if v is not None}
    out = await host.run(DifyRunner, "x", config=merged)
    assert out.failure.code == "runner.config_invalid"
    assert json_format.MessageToDict(out.failure.details)["field"] == field
    assert mock.requests == []


async def test_connection_refused_is_retryable(host: HostDouble) -> None:
    out = await host.run(DifyRunner, "x", config={"base-url": "http://127.0.0.1:9/v1", "api-key": KEY})
    assert out.failure.code == "dify.connection_failed" and out.failure.retryable
