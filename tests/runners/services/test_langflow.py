"""The Langflow runner against the Langflow mock: streamed events and the nested result shapes."""

from __future__ import annotations

import time
from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner.testing import HostDouble
from agentrunner_runners.langflow import LangflowRunner
from agentrunner_runners.testing.mock_services import MockServices

pytestmark = pytest.mark.asyncio(loop_scope="module")


def config(mock: MockServices, **extra: Any) -> dict[str, Any]:
    return {"base-url": mock.url("/langflow"), "flow-id": "flow-1", "api-key": "lf-key-0001", **extra}


def session_of(out: Any) -> str:
    [update] = [r for r in out.of_type("state.updated") if r.state_updated.key == "external.session_id"]
    return update.state_updated.value.string_value


async def test_streamed_tokens_and_session_reuse(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(
        LangflowRunner, "Wie spät ist es? ⏰", config=config(mock, tweaks='{"Prompt-1": {"x": 1}}')
    )
    assert out.completed, out.results
    session = session_of(out)
    assert out.text == f"Langflow heard: Wie spät ist es? ⏰ ({session[:8]})"
    # Langflow sends the first chunk twice (a partial message, then its token): it is shown once, the
    # deltas add up to the answer with no rewrite (the host would log result.delta_cumulative_mismatch)
    assert len([d for d in out.deltas if d]) > 2 and "".join(out.deltas) == out.text
    assert [r for r in out.of_type("message.delta") if r.message_delta.cumulative_text] == []
    assert out.of_type("message.completed") == []
    sent = mock.of("langflow")[0]
    assert sent.query == {"stream": "true"} and sent.headers["x-api-key"] == "lf-key-0001"
    assert sent.body["tweaks"] == {"Prompt-1": {"x": 1}} and sent.body["input_type"] == "chat"
    again = await host.run(
        LangflowRunner, "again", config=config(mock), state={"conversation": {"external.session_id": session}}
    )
    assert again.completed and mock.of("langflow")[1].body["session_id"] == session
    assert again.of_type("state.updated") == []


@pytest.mark.parametrize("scenario", ["echo", "old", "messages"])
async def test_non_streaming_result_shapes(host: HostDouble, mock: MockServices, scenario: str) -> None:
    out = await host.run(LangflowRunner, f"mock:{scenario} hi", config=config(mock, streaming=False))
    assert out.types == ["message.completed", "state.updated", "run.completed"], out.results
    assert out.text.startswith("Langflow heard: hi (")
    assert mock.of("langflow")[0].query == {"stream": "false"}


@pytest.mark.parametrize("streaming", [True, False])
async def test_every_chat_output_is_kept(host: HostDouble, mock: MockServices, streaming: bool) -> None:
    out = await host.run(LangflowRunner, "mock:two hi", config=config(mock, streaming=streaming))
    assert out.completed, out.results
    texts = out.text.split("\n\n")
    if not streaming:  # the order of the result
        assert texts[0].startswith("Langflow heard: hi (") and texts[1] == "Second output: hi"
    else:  # the order they arrived in, as they were shown: never rewritten by the `end` result
        assert texts[0] == "Second output: hi" and texts[1].startswith("Langflow heard: hi (")
        assert "".join(out.deltas) == out.text
        assert [r for r in out.of_type("message.delta") if r.message_delta.cumulative_text] == []


async def test_a_surface_that_cannot_stream_gets_the_blocking_call(
    host: HostDouble, mock: MockServices
) -> None:
    out = await host.run(LangflowRunner, "hi", config=config(mock), streaming=False)
    assert out.completed and mock.of("langflow")[0].query == {"stream": "false"}


@pytest.mark.parametrize("scenario", ["notokens", "unknown"])
async def test_streams_without_tokens_or_with_unknown_events(
    host: HostDouble, mock: MockServices, scenario: str
) -> None:
    out = await host.run(LangflowRunner, f"mock:{scenario} hi", config=config(mock))
    assert out.completed and out.text.startswith("Langflow heard: hi (")


@pytest.mark.parametrize("streaming", [True, False])
@pytest.mark.parametrize(
    ("scenario", "code", "retryable", "needle"),
    [
        ("fail", "langflow.flow_failed", False, "the flow failed on purpose: käse"),
        ("ratelimited", "langflow.rate_limited", True, "Rate limit reached for gpt-4o-mini"),
    ],
)
async def test_a_failing_flow_is_classified_the_same_streamed_or_not(
    host: HostDouble,
    mock: MockServices,
    scenario: str,
    code: str,
    retryable: bool,
    needle: str,
    streaming: bool,
) -> None:
    started = time.monotonic()
    out = await host.run(LangflowRunner, f"mock:{scenario} x", config=config(mock, streaming=streaming))
    assert (out.failure.code, out.failure.retryable) == (code, retryable), out.results
    assert needle in out.failure.message and out.failure.message.startswith("the flow failed: ")
    assert out.of_type("state.updated") == []  # nothing stored for a failed turn
    # the streamed failure does not wait for Langflow, which keeps the connection open after `error`
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("text", "extra", "code", "retryable"),
    [
        ("mock:empty x", {}, "langflow.empty_response", False),
        ("mock:429 x", {}, "langflow.rate_limited", True),
        ("mock:500 x", {}, "langflow.server_error", True),
        ("mock:drop x", {}, "langflow.connection_lost", True),
        ("x", {"api-key": "wrong-key"}, "langflow.auth_error", False),
        ("x", {"flow-id": "missing"}, "langflow.not_found", False),
    ],
)
async def test_failures(
    host: HostDouble, mock: MockServices, text: str, extra: dict[str, Any], code: str, retryable: bool
) -> None:
    out = await host.run(LangflowRunner, text, config=config(mock, **extra))
    assert (out.failure.code, out.failure.retryable) == (code, retryable), out.results
    assert "wrong-key" not in out.failure.message


async def test_timeout(host: HostDouble, mock: MockServices) -> None:
    started = time.monotonic()
    out = await host.run(LangflowRunner, "mock:slow x", config=config(mock, timeout=1))
    assert out.failure.code == "langflow.timeout" and time.monotonic() - started < 15


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        ({"tweaks": "{not json"}, "tweaks"),
        ({"flow-id": "a/b"}, "flow-id"),
        ({"streaming": "yes"}, "streaming"),
    ],
)
async def test_bad_config(host: HostDouble, mock: MockServices, cfg: dict[str, Any], field: str) -> None:
    out = await host.run(LangflowRunner, "x", config=config(mock, **cfg))
    assert out.failure.code == "runner.config_invalid"
    assert json_format.MessageToDict(out.failure.details)["field"] == field
