"""The Tbox runner against the Tbox mock: payloads that are JSON strings, interleaved lanes, uploads."""

from __future__ import annotations

import time
from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2, proxy_service_pb2
from agentrunner_runners.tbox import TboxRunner
from agentrunner_runners.testing.mock_services import MockServices
from tests.runners.services.support import Failure, assert_fails

pytestmark = pytest.mark.asyncio(loop_scope="module")
KEY = "tbox-secret-key-0001"


def config(mock: MockServices, **extra: Any) -> dict[str, Any]:
    return {"base-url": mock.url("/tbox"), "api-key": KEY, "app-id": "202501tbox", **extra}


async def test_streamed_answer_and_conversation_reuse(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(TboxRunner, "你好百宝箱 😀", config=config(mock))
    assert out.completed, out.results
    assert out.text == "Tbox heard: 你好百宝箱 😀"
    assert len([d for d in out.deltas if d]) > 2
    [state] = out.of_type("state.updated")
    conversation = state.state_updated.value.string_value
    sent = mock.of("tbox")[0]
    assert sent.headers["authorization"] == KEY and sent.headers["source"] == "AGENT_SDK"  # no "Bearer"
    assert (
        sent.body["appId"] == "202501tbox"
        and sent.body["stream"] is True
        and "conversationId" not in sent.body
    )
    again = await host.run(
        TboxRunner,
        "again",
        config=config(mock),
        state={"conversation": {"external.conversation_id": conversation}},
    )
    assert again.completed and mock.of("tbox")[1].body["conversationId"] == conversation


async def test_thinking_is_reasoning(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(TboxRunner, "mock:thinking q", config=config(mock))
    assert out.text == "Tbox heard: q"
    assert out.reasoning == "Considering the question carefully. "


async def test_interleaved_image_lane_is_content(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(TboxRunner, "mock:image draw", config=config(mock))
    assert out.text == "Tbox heard: draw"
    assert [c.image.uri for c in out.terminal.run_completed.message.contents] == [
        "https://tbox.example/img/cat.png"
    ]


async def test_non_streaming_body(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(TboxRunner, "hi", config=config(mock, streaming=False))
    assert out.types == ["message.completed", "message.completed", "state.updated", "run.completed"], (
        out.results
    )
    assert out.text == "Tbox heard: hi" and out.reasoning == "thinking it over"
    assert mock.of("tbox")[0].body["stream"] is False


async def test_a_whole_json_answer_to_a_streaming_request_succeeds(
    host: HostDouble, mock: MockServices
) -> None:
    # errorCode "0" / errorMsg "success" is an answer, not a failure, wherever it arrives
    out = await host.run(TboxRunner, "mock:whole hi", config=config(mock))
    assert out.completed, out.results
    assert out.text == "Tbox heard: hi" and mock.of("tbox")[0].body["stream"] is True


async def test_image_attachment_is_uploaded(host: HostDouble, mock: MockServices) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x01" * 100
    host.on("DownloadArtifact", [proxy_service_pb2.DownloadArtifactResponse(data=png)])
    ref = common_pb2.ArtifactRef(artifact_id="a1", mime_type="image/png", name="cat.png", size_bytes=len(png))
    out = await host.run(TboxRunner, "what?", config=config(mock), attachments=[ref])
    assert out.completed and out.text == "Tbox heard: what? (with 1 file(s))"
    upload, chat = mock.of("tbox")
    assert upload.path == "/tbox/api/file/upload" and upload.files[0]["size"] == len(png)
    assert chat.body["files"] == [{"fileId": chat.body["files"][0]["fileId"], "type": "IMAGE"}]


async def test_stale_conversation_is_retried_fresh(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(
        TboxRunner, "hi", config=config(mock), state={"conversation": {"external.conversation_id": "c-gone"}}
    )
    assert out.completed
    assert [r.body.get("conversationId") for r in mock.of("tbox")] == ["c-gone", None]


@pytest.mark.parametrize(
    "case",
    [
        Failure("x", "tbox.auth_error", False, "authorization is invalid", {"api-key": "wrong-key"}),
        Failure("mock:business x", "tbox.api_error", False, "app does not exist"),
        Failure("mock:business x", "tbox.api_error", False, "app does not exist", {"streaming": False}),
        Failure("mock:error x", "tbox.stream_error", False, "the model is busy"),
        Failure(
            "mock:sseerror x",
            "tbox.stream_error",
            False,
            "应用不存在或未发布 (app not found) (code APP_NOT_FOUND)",
        ),
        Failure("mock:ratelimited x", "tbox.rate_limited", True, "请求过于频繁"),
        Failure("mock:ratelimited x", "tbox.rate_limited", True, "请求过于频繁", {"streaming": False}),
        Failure("mock:429 x", "tbox.rate_limited", True, "retry after 6 s"),
        Failure("mock:500 x", "tbox.server_error", True, "system error"),
        Failure("mock:drop x", "tbox.connection_lost", True, "lost"),
    ],
    ids=str,
)
async def test_failures(host: HostDouble, mock: MockServices, case: Failure) -> None:
    await assert_fails(host, TboxRunner, config(mock), case)


async def test_timeout(host: HostDouble, mock: MockServices) -> None:
    started = time.monotonic()
    out = await host.run(TboxRunner, "mock:slow x", config=config(mock, timeout=1))
    assert out.failure.code == "tbox.timeout" and time.monotonic() - started < 15


async def test_bad_config(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(TboxRunner, "x", config=config(mock, **{"base-url": "api.tbox.cn"}))
    assert out.failure.code == "runner.config_invalid"
    assert json_format.MessageToDict(out.failure.details)["field"] == "base-url"
