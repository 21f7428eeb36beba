"""The Coze runner against the Coze mock: the v3 chat SSE, its repeats, reasoning and business errors."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner.results import is_answer, kind_name
from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2, proxy_service_pb2
from agentrunner_runners.coze import CozeRunner
from agentrunner_runners.testing.mock_services import MockServices
from tests.runners.services.support import Failure, assert_fails

pytestmark = pytest.mark.asyncio(loop_scope="module")
KEY = "pat_coze_secret_0001"


def config(mock: MockServices, **extra: Any) -> dict[str, Any]:
    return {"api-base": mock.url("/coze"), "api-key": KEY, "bot-id": "7350000000000001", **extra}


async def test_answer_once_with_usage_follow_ups_and_conversation(
    host: HostDouble, mock: MockServices
) -> None:
    out = await host.run(CozeRunner, "你好，Coze！😀", config=config(mock))
    assert out.completed, out.results
    assert out.text == "Coze heard: 你好，Coze！😀"
    answer_deltas = [r.message_delta.text for r in out.of_type("message.delta") if is_answer(r.message_delta)]
    assert "".join(answer_deltas) == out.text  # the completed message's repeat was not sent again
    usage = out.terminal.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (18, 12, 30)
    assert json_format.MessageToDict(out.terminal.metadata)["follow_up"] == ["Tell me more", "What else?"]
    [state] = out.of_type("state.updated")
    conversation = state.state_updated.value.string_value
    sent = mock.of("coze")[0]
    assert sent.body["stream"] is True and sent.body["auto_save_history"] is True
    assert sent.body["additional_messages"] == [
        {"role": "user", "content": "你好，Coze！😀", "content_type": "text"}
    ]
    assert sent.query == {} and sent.headers["authorization"] == f"Bearer {KEY}"
    again = await host.run(
        CozeRunner,
        "again",
        config=config(mock),
        state={"conversation": {"external.conversation_id": conversation}},
    )
    assert again.completed and mock.of("coze")[1].query == {"conversation_id": conversation}


async def test_reasoning_comes_before_and_apart_from_the_answer(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(CozeRunner, "mock:reasoning why?", config=config(mock))
    assert out.text == "Coze heard: why?"
    assert out.reasoning == "Let me think about the question first. "
    kinds = [kind_name(r.message_delta.kind) for r in out.of_type("message.delta")]
    assert kinds.index("reasoning") < kinds.index("answer")  # reasoning first, never in the answer


async def test_function_call_messages_are_progress_not_answer(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(CozeRunner, "mock:function weather", config=config(mock))
    assert out.text == "Coze heard: weather"
    assert out.progress == ["calling weather\ntool result received\n"]


async def test_non_streaming_surface(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(CozeRunner, "hi", config=config(mock), streaming=False)
    assert out.types == ["message.completed", "state.updated", "run.completed"]
    assert out.text == "Coze heard: hi"


async def test_images_are_uploaded_and_sent_as_object_string(host: HostDouble, mock: MockServices) -> None:
    jpg = b"\xff\xd8\xff\xe0" + b"\x10" * 300
    host.on("DownloadArtifact", [proxy_service_pb2.DownloadArtifactResponse(data=jpg)])
    ref = common_pb2.ArtifactRef(
        artifact_id="a1", mime_type="image/jpeg", name="cat.jpg", size_bytes=len(jpg)
    )
    out = await host.run(CozeRunner, "what is it?", config=config(mock), attachments=[ref])
    assert out.completed and out.text == "Coze heard: what is it? (with 1 image(s))"
    upload, chat = mock.of("coze")
    assert upload.path == "/coze/v1/files/upload" and upload.files[0]["size"] == len(jpg)
    message = chat.body["additional_messages"][0]
    parts = json.loads(message["content"])
    assert message["content_type"] == "object_string"
    assert parts[0] == {"type": "text", "text": "what is it?"} and parts[1]["type"] == "image"


async def test_stale_conversation_is_retried_fresh(host: HostDouble, mock: MockServices) -> None:
    stale = {"conversation": {"external.conversation_id": "7349999999999999999"}}
    out = await host.run(CozeRunner, "hi", config=config(mock), state=stale)
    assert out.completed, out.results
    assert [r.query for r in mock.of("coze")] == [{"conversation_id": "7349999999999999999"}, {}]
    assert out.of_type("state.updated")[0].state_updated.value.string_value != "7349999999999999999"


@pytest.mark.parametrize(
    "case",
    [
        Failure("x", "coze.auth_error", False, "token you entered is incorrect", {"api-key": "wrong-key"}),
        Failure("mock:business x", "coze.api_error", False, "not published"),
        Failure("mock:failed x", "coze.chat_failed", False, "the chat failed: The model is overloaded"),
        Failure(
            "mock:ratelimited x", "coze.rate_limited", True, "the chat failed: Your request rate is too high"
        ),
        Failure("mock:error x", "coze.stream_error", False, "Insufficient quota"),
        Failure("mock:action x", "coze.api_error", False, "requires_action"),
        Failure("mock:429 x", "coze.rate_limited", True, "retry after 4 s"),
        Failure("mock:500 x", "coze.server_error", True, "Internal server error"),
        Failure("mock:drop x", "coze.connection_lost", True, "lost"),
    ],
    ids=str,
)
async def test_failures(host: HostDouble, mock: MockServices, case: Failure) -> None:
    await assert_fails(host, CozeRunner, config(mock), case)


async def test_timeout(host: HostDouble, mock: MockServices) -> None:
    started = time.monotonic()
    out = await host.run(CozeRunner, "mock:slow x", config=config(mock, timeout=1))
    assert out.failure.code == "coze.timeout" and time.monotonic() - started < 15


@pytest.mark.parametrize(
    ("cfg", "field"), [({"bot-id": ""}, "bot-id"), ({"api-base": "coze.cn"}, "api-base")]
)
async def test_bad_config(host: HostDouble, mock: MockServices, cfg: dict[str, Any], field: str) -> None:
    out = await host.run(CozeRunner, "x", config=config(mock, **cfg))
    assert out.failure.code == "runner.config_invalid"
    assert json_format.MessageToDict(out.failure.details)["field"] == field
