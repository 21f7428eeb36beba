"""The DashScope runner against the DashScope mock: incremental vs cumulative text, thoughts,
references, workflow messages and errors."""

from __future__ import annotations

import time
from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner.results import is_answer
from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2
from agentrunner_runners.dashscope import DashScopeRunner
from agentrunner_runners.dashscope.runner import RefRenderer
from agentrunner_runners.testing.mock_services import MockServices
from tests.runners.services.support import Failure, assert_fails

pytestmark = pytest.mark.asyncio(loop_scope="module")
KEY = "sk-dashscope-secret-01"


def config(mock: MockServices, **extra: Any) -> dict[str, Any]:
    return {"base-url": mock.url("/dashscope/api/v1"), "api-key": KEY, "app-id": "app0001", **extra}


@pytest.mark.parametrize("incremental", [True, False])
async def test_incremental_and_cumulative_give_the_same_answer(
    host: HostDouble, mock: MockServices, incremental: bool
) -> None:
    out = await host.run(
        DashScopeRunner, "退货政策是什么？", config=config(mock, **{"incremental-output": incremental})
    )
    assert out.completed, out.results
    [state] = out.of_type("state.updated")
    session = state.state_updated.value.string_value
    assert out.text == f"百炼 heard: 退货政策是什么？ (session {session[:6]})"
    answer = [r.message_delta.text for r in out.of_type("message.delta") if is_answer(r.message_delta)]
    assert "".join(answer) == out.text and len(answer) > 2
    sent = mock.of("dashscope")[0]
    assert sent.headers["x-dashscope-sse"] == "enable" and sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body["parameters"]["incremental_output"] is incremental
    assert sent.path == "/dashscope/api/v1/apps/app0001/completion"
    usage = out.terminal.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (25, 9, 34)
    again = await host.run(
        DashScopeRunner,
        "再问一次",
        config=config(mock),
        state={"conversation": {"external.conversation_id": session}},
    )
    assert again.completed and mock.of("dashscope")[1].body["input"]["session_id"] == session


async def test_thoughts_are_progress_once(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(DashScopeRunner, "mock:thoughts q", config=config(mock))
    assert out.text.startswith("百炼 heard: q")
    assert out.progress == ["The user asks a question; I will search the knowledge base.\n"]


@pytest.mark.parametrize("incremental", [True, False])
async def test_references_render_as_citations(
    host: HostDouble, mock: MockServices, incremental: bool
) -> None:
    cfg = config(mock, **{"incremental-output": incremental})
    out = await host.run(DashScopeRunner, "mock:refs returns?", config=cfg)
    assert out.text == (
        "Returns are free within 30 days[1], refunds take 5 days[2].\n\n参考资料来自:\n[1] 售后手册.pdf\n[2] 财务 FAQ.docx"
    )
    assert "<ref>" not in "".join(out.deltas)
    refs = json_format.MessageToDict(out.terminal.metadata)["references"]
    assert [r["index"] for r in refs] == ["1", "2"]


async def test_workflow_messages(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(DashScopeRunner, "mock:workflow go", config=config(mock, **{"app-type": "workflow"}))
    assert out.completed and out.text.startswith("百炼 heard: go")
    assert mock.of("dashscope")[0].body["parameters"]["flow_stream_mode"] == "message_format"


async def test_biz_params_and_image_urls(host: HostDouble, mock: MockServices) -> None:
    ref = common_pb2.ArtifactRef(uri="https://img.example/cat.png", mime_type="image/png", name="cat.png")
    ctx_extra: dict[str, Any] = {"attachments": [ref]}
    out = await host.run(DashScopeRunner, "look", config=config(mock), **ctx_extra)
    assert out.text.endswith("(with 1 image(s))")
    assert mock.of("dashscope")[0].body["input"]["image_list"] == ["https://img.example/cat.png"]
    stored = common_pb2.ArtifactRef(artifact_id="a1", mime_type="image/png", name="local.png", size_bytes=10)
    refused = await host.run(DashScopeRunner, "look", config=config(mock), attachments=[stored])
    assert refused.failure.code == "dashscope.input_error" and "by URL" in refused.failure.message


@pytest.mark.parametrize(
    "case",
    [
        Failure("x", "dashscope.auth_error", False, "Invalid API-key", {"api-key": "wrong-key"}),
        Failure("mock:business x", "dashscope.api_error", False, "App is not published"),
        Failure("mock:error x", "dashscope.stream_error", False, "Model inference failed"),
        # a request limit hit mid-stream or answered as a JSON body: retryable, either way
        Failure("mock:limited x", "dashscope.rate_limited", True, "exceeded your current requests list"),
        Failure("mock:limitedbody x", "dashscope.rate_limited", True, "(LimitRequests)"),
        Failure("mock:429 x", "dashscope.rate_limited", True, "retry after 5 s"),
        Failure("mock:500 x", "dashscope.server_error", True, "internal error"),
        Failure("mock:drop x", "dashscope.connection_lost", True, "lost"),
    ],
    ids=str,
)
async def test_failures(host: HostDouble, mock: MockServices, case: Failure) -> None:
    await assert_fails(host, DashScopeRunner, config(mock), case)


async def test_timeout(host: HostDouble, mock: MockServices) -> None:
    started = time.monotonic()
    out = await host.run(DashScopeRunner, "mock:slow x", config=config(mock, timeout=1))
    assert out.failure.code == "dashscope.timeout" and time.monotonic() - started < 15


async def test_ref_renderer_any_split() -> None:
    text = "a<ref>[1]</ref>b <ref>[2][3]</ref>c <re not a ref"
    for cut in range(len(text) + 1):
        renderer = RefRenderer()
        assert (
            renderer.feed(text[:cut]) + renderer.feed(text[cut:]) + renderer.close()
            == "a[1]b [2][3]c <re not a ref"
        )
