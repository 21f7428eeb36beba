"""The reference runner's documented behaviours (host tests drive the same inputs)."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format

from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2
from agentrunner_runners.reference import ReferenceRunner

pytestmark = pytest.mark.asyncio


async def test_echo_streams_reads_history_and_counts_turns(host: HostDouble) -> None:
    host.on("ListHistory", {"items": [{"content": "a"}, {"content": "b"}, {"content": "c"}]})
    out = await host.run(ReferenceRunner, "hello there", state={"conversation": {"reference.turns": 4}})
    assert out.types == ["message.delta"] * 3 + ["state.updated", "run.completed"]
    assert "".join(out.deltas) == "echo: hello there" == out.text
    update = out.of_type("state.updated")[0].state_updated
    assert (update.scope, update.key, update.value.number_value) == (
        common_pb2.STATE_SCOPE_CONVERSATION,
        "reference.turns",
        5,
    )
    assert out.metadata == {"history_items": 3, "turn": 5}
    message_meta = json_format.MessageToDict(out.terminal.run_completed.message.metadata)
    assert message_meta == {"history_items": 3, "turn": 5}
    assert len(host.calls_to("ListHistory")) == 1


async def test_echo_without_streaming_or_history(host: HostDouble) -> None:
    out = await host.run(ReferenceRunner, "hi", streaming=False, apis={"history_page": False})
    assert out.types == ["state.updated", "run.completed"]
    assert out.metadata == {"turn": 1}
    assert host.calls_to("ListHistory") == []


async def test_history_error_is_reported_not_fatal(host: HostDouble) -> None:
    host.on("ListHistory", error="UNAUTHORIZED")
    out = await host.run(ReferenceRunner, "hi")
    assert out.completed and out.metadata["history_error"] == "UNAUTHORIZED"


@pytest.mark.parametrize(
    ("text", "code"),
    [("fail", "runner.exception"), ("fail:controlled", "runner.error")],
)
async def test_failures(host: HostDouble, text: str, code: str) -> None:
    out = await host.run(ReferenceRunner, text)
    assert out.failure is not None and out.failure.code == code


async def test_slow_and_empty(host: HostDouble) -> None:
    out = await host.run(ReferenceRunner, "slow:3")
    assert out.deltas == ["tick 0 ", "tick 1 ", "tick 2 "] and out.text == "tick 0 tick 1 tick 2 "
    empty = await host.run(ReferenceRunner, "empty")
    assert empty.types == ["run.completed"] and not empty.terminal.run_completed.HasField("message")


async def test_stall_runs_into_the_deadline(host: HostDouble) -> None:
    """The runner ends a stalled run itself, `DEADLINE_MARGIN` (0.1 s) before the run deadline. The
    call's own gRPC timeout is set past the deadline: left at the deadline (the double's default, as a
    host sets it), a loaded machine delivers the runner's terminal after the transport gave up, and the
    test would see DEADLINE_EXCEEDED from gRPC instead of what the runner did."""
    out = await host.run(ReferenceRunner, "stall", deadline=0.4, call_timeout=10)
    assert out.failure is not None and out.failure.code == "deadline_exceeded"


async def test_malformed_outputs(host: HostDouble) -> None:
    big = await host.run(ReferenceRunner, "malformed:oversize")
    assert len(big.results[0].message_delta.text) > 1 << 20 and big.completed
    unknown = await host.run(ReferenceRunner, "malformed:unknown")
    assert unknown.types == [None, "run.completed"]
    assert unknown.results[0].WhichOneof("payload") is None
    assert b"\x9a\x06" in unknown.results[0].SerializeToString()  # the unknown field survived the wire
    bad_state = await host.run(ReferenceRunner, "malformed:state")
    assert bad_state.types == ["state.updated", "run.completed"]
    assert bad_state.results[0].state_updated.scope == common_pb2.STATE_SCOPE_UNSPECIFIED
    assert bad_state.text == "echo: malformed:state"


async def test_tool_call(host: HostDouble) -> None:
    host.on("CallTool", lambda req, call: {"contents": [{"text": json.dumps(dict(req.parameters))}]})
    out = await host.run(ReferenceRunner, 'tool:lookup {"q": "x"}', tools=["lookup"])
    assert out.types == ["tool.call.started", "tool.call.completed", "run.completed"]
    assert out.text == '{"q": "x"}'
    started = out.results[0].tool_call_started
    assert started.tool_name == "lookup"
    assert host.calls_to("CallTool")[0].request.tool_call_id == started.tool_call_id


async def test_tool_errors_and_unchecked_calls(host: HostDouble) -> None:
    denied = await host.run(ReferenceRunner, "tool:secret {}")  # not in resources: SDK pre-check
    assert denied.results[1].tool_call_completed.error_code == "unauthorized"
    assert denied.text.startswith("tool error: unauthorized") and host.calls_to("CallTool") == []
    host.on("CallTool", error="UNAUTHORIZED", message="host says no")
    unchecked = await host.run(ReferenceRunner, "tool!:secret {}")
    assert unchecked.text == "tool error: unauthorized: host says no"
    assert len(host.calls_to("CallTool")) == 1


async def test_steer_times_out_quietly_without_input(host: HostDouble) -> None:
    handle = await host.start_run(ReferenceRunner, "steer", deadline=2.0)
    out = await handle.wait()
    assert out.failure is not None and out.failure.code == "deadline_exceeded"
