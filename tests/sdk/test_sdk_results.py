"""Every result builder, carried over real gRPC, plus the envelope the SDK fills."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

import time

import pytest
from google.protobuf import json_format

from agentrunner import Runner, results
from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2, result_pb2


class AllTypes(Runner):
    manifest = {"id": "plugin:test/all/default", "label": "All", "capabilities": ["streaming"]}

    async def run(self, ctx):
        yield results.delta("he", message_id="m1", metadata={"k": "v"})
        yield results.delta("", cumulative_text="hello", message_id="m1")
        yield results.message("hello", message_id="m1", usage=results.usage(3, 4))
        yield results.tool_started("c1", "search", {"q": "x"})
        yield results.tool_completed("c1", "search", {"hits": 2})
        yield results.artifact(content=b"\x00\x01", mime_type="application/octet-stream", name="blob.bin")
        yield results.state("conversation", "count", {"n": 1})
        yield results.action("message.edit", target={"id": "m0"}, payload={"text": "x"}, idempotency_key="k1")
        raw = result_pb2.RunResult(run_id="someone-else", sequence=99)
        raw.message_delta.text = "!"
        yield raw
        yield results.completed("hello!", finish_reason="stop", usage=results.usage(prompt_tokens=10))


class FailedBuilder(Runner):
    manifest = {"id": "plugin:test/failed/default", "label": "Failed"}

    async def run(self, ctx):
        yield results.failed("runner.error", "nope", retryable=True, details={"field": "x"})


@pytest.mark.asyncio
async def test_every_builder_round_trips(host: HostDouble) -> None:
    before = time.time()
    out = await host.run(AllTypes, "hi")
    assert out.types == [
        "message.delta",
        "message.delta",
        "message.completed",
        "tool.call.started",
        "tool.call.completed",
        "artifact.created",
        "state.updated",
        "action.requested",
        "message.delta",
        "run.completed",
    ]
    r = out.results
    assert [x.sequence for x in r] == list(range(1, 11))
    assert {x.run_id for x in r} == {out.run_id}
    assert all(x.timestamp.ToNanoseconds() / 1e9 >= before - 1 for x in r)
    assert r[0].message_delta.text == "he" and r[0].message_delta.message_id == "m1"
    assert json_format.MessageToDict(r[0].metadata) == {"k": "v"}
    assert r[1].message_delta.cumulative_text == "hello" and r[1].message_delta.HasField("cumulative_text")
    assert r[2].message_completed.message.content == "hello"
    assert r[2].usage.prompt_tokens == 3 and r[2].usage.total_tokens == 7
    assert r[3].tool_call_started.tool_name == "search"
    assert json_format.MessageToDict(r[3].tool_call_started.parameters) == {"q": "x"}
    assert json_format.MessageToDict(r[4].tool_call_completed.result_preview) == {"hits": 2}
    assert r[4].tool_call_completed.error_code == ""
    assert r[5].artifact_created.content == b"\x00\x01" and r[5].artifact_created.artifact.size_bytes == 2
    assert r[6].state_updated.scope == common_pb2.STATE_SCOPE_CONVERSATION
    assert json_format.MessageToDict(r[6].state_updated.value) == {"n": 1}
    assert r[7].action_requested.action == "message.edit" and r[7].action_requested.idempotency_key == "k1"
    assert r[8].message_delta.text == "!" and r[8].sequence == 9  # raw result: SDK re-sealed it
    assert r[9].run_completed.message.content == "hello!"
    assert r[9].usage.prompt_tokens == 10 and not r[9].usage.HasField("completion_tokens")


@pytest.mark.asyncio
async def test_failed_builder(host: HostDouble) -> None:
    out = await host.run(FailedBuilder)
    assert out.failure is not None
    assert (out.failure.code, out.failure.message, out.failure.retryable) == ("runner.error", "nope", True)
    assert json_format.MessageToDict(out.failure.details) == {"field": "x"}


def test_builders_refuse_bad_arguments() -> None:
    with pytest.raises(ValueError):
        results.state("nowhere", "k", 1)
    with pytest.raises(ValueError):
        results.state(common_pb2.STATE_SCOPE_UNSPECIFIED, "k", 1)
    with pytest.raises(ValueError):
        results.state("conversation", "k" * 257, 1)
    with pytest.raises(ValueError):
        results.tool_started("", "x")
    with pytest.raises(ValueError):
        results.artifact()
    with pytest.raises(ValueError):
        results.failed("", "x")
    assert results.state("runner", "k", None).state_updated.value.WhichOneof("kind") == "null_value"
    err = results.tool_completed("c", "t", error=RuntimeError("boom")).tool_call_completed
    assert (err.error_code, err.error_message) == ("runtime_error", "boom")
