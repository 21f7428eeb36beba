"""The local agent's tool loop: parallel vs serial execution, the iteration cap, result truncation and
tool errors, over real gRPC."""

from __future__ import annotations

import asyncio
import time

import pytest
from google.protobuf import json_format

from agentrunner.errors import NotFoundError
from agentrunner.testing import HostDouble
from agentrunner_runners.local_agent import LocalAgentRunner
from agentrunner_runners.local_agent.runner import CAP_NOTE
from tests.runners.local_agent.conftest import answer, context

pytestmark = pytest.mark.asyncio
R = LocalAgentRunner
DELAYS = {"slow": 0.4, "fast": 0.05}


def _timed_tools(host: HostDouble, spans: dict[str, tuple[float, float]]) -> None:
    async def call_tool(req, call):
        start = time.monotonic()
        await asyncio.sleep(DELAYS[req.tool_name])
        spans[req.tool_name] = (start, time.monotonic())
        return {"contents": [{"text": f"{req.tool_name}-result"}]}

    host.on("CallTool", call_tool)
    host.on("InvokeModel", answer(calls=[("slow", {"n": 1}), ("fast", {"n": 2})], call_ids=["a", "b"]))
    host.on("InvokeModel", answer("both done"))


async def test_parallel_mode_runs_tool_calls_concurrently(host: HostDouble) -> None:
    spans: dict[str, tuple[float, float]] = {}
    _timed_tools(host, spans)
    out = await host.run(R, context=context("go", tools=["slow", "fast"]))
    assert out.text == "both done"
    # both started before either completed, and the fast one completed first
    kinds = [
        (t, r.tool_call_started.tool_name or r.tool_call_completed.tool_name)
        for t, r in zip(out.types, out.results, strict=True)
        if t and t.startswith("tool")
    ]
    assert kinds == [
        ("tool.call.started", "slow"),
        ("tool.call.started", "fast"),
        ("tool.call.completed", "fast"),
        ("tool.call.completed", "slow"),
    ]
    assert spans["fast"][0] < spans["slow"][1]  # overlapping
    # the model reads the results in call order whatever the completion order
    tool_msgs = [m for m in host.calls_to("InvokeModel")[1].request.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in tool_msgs] == [("a", "slow-result"), ("b", "fast-result")]


async def test_serial_mode_runs_one_tool_at_a_time(host: HostDouble) -> None:
    spans: dict[str, tuple[float, float]] = {}
    _timed_tools(host, spans)
    out = await host.run(
        R, context=context("go", tools=["slow", "fast"], config={"tool-execution-mode": "serial"})
    )
    assert out.text == "both done"
    assert [t for t in out.types if t and t.startswith("tool")] == [
        "tool.call.started",
        "tool.call.completed",
        "tool.call.started",
        "tool.call.completed",
    ]
    assert spans["slow"][1] <= spans["fast"][0]  # no overlap
    assert [c.request.tool_name for c in host.calls_to("CallTool")] == ["slow", "fast"]


async def test_iteration_cap_stops_calling_tools_and_forces_an_answer(host: HostDouble) -> None:
    def invoke(req, call):
        if req.tools:
            return answer(
                calls=[("loop", {"i": len(host.calls_to("CallTool"))})],
                call_ids=[f"id{len(host.calls_to('InvokeModel'))}"],
            )
        return answer("gave up looping")

    host.on("InvokeModel", invoke)
    host.on("CallTool", {"contents": [{"text": "again"}]})
    out = await host.run(
        R, context=context("loop forever", tools=["loop"], config={"max-tool-iterations": 2})
    )
    assert out.text == "gave up looping"
    assert len(host.calls_to("CallTool")) == 2
    invokes = [c.request for c in host.calls_to("InvokeModel")]
    assert [len(r.tools) for r in invokes] == [1, 1, 0]
    assert invokes[-1].messages[-1].content == CAP_NOTE
    assert out.metadata["tool_iterations_capped"] is True and out.metadata["tool_iterations"] == 2


async def test_long_tool_results_are_truncated_for_the_model(host: HostDouble) -> None:
    host.on("InvokeModel", answer(calls=[("dump", {})]))
    host.on("InvokeModel", answer("summarized"))
    host.on("CallTool", {"contents": [{"text": "x" * 1000 + "TAIL-MARKER"}]})
    out = await host.run(R, context=context("dump it", tools=["dump"], config={"max-tool-result-chars": 200}))
    assert out.completed
    tool_msg = host.calls_to("InvokeModel")[1].request.messages[-1]
    assert tool_msg.content.startswith("x" * 200)
    assert "TAIL-MARKER" not in tool_msg.content and "truncated 811 characters" in tool_msg.content
    preview = json_format.MessageToDict(
        out.of_type("tool.call.completed")[0].tool_call_completed.result_preview
    )
    assert preview["truncated"] is True


async def test_tool_failures_are_reported_to_the_model_and_telemetry(host: HostDouble) -> None:
    host.on("InvokeModel", answer(calls=[("gone", {}), ("broken", {})]))
    host.on("InvokeModel", answer("sorry, tools failed"))

    def call_tool(req, call):
        if req.tool_name == "gone":
            raise NotFoundError("tool gone vanished")
        return {"contents": [{"text": "disk full"}], "is_error": True}

    host.on("CallTool", call_tool)
    out = await host.run(R, context=context("go", tools=["gone", "broken"]))
    assert out.text == "sorry, tools failed"
    codes = {
        r.tool_call_completed.tool_name: r.tool_call_completed.error_code
        for r in out.of_type("tool.call.completed")
    }
    assert codes == {"gone": "not_found", "broken": "tool_error"}
    tool_msgs = [m.content for m in host.calls_to("InvokeModel")[1].request.messages if m.role == "tool"]
    assert tool_msgs == ["error: not_found: tool gone vanished", "error: disk full"]


async def test_invalid_tool_arguments_are_not_sent_to_the_host(host: HostDouble) -> None:
    bad = {
        "message": {"role": "assistant", "tool_calls": [{"id": "z", "name": "t", "arguments_json": "{oops"}]}
    }
    host.on("InvokeModel", bad)
    host.on("InvokeModel", answer("fixed"))
    out = await host.run(R, context=context("go", tools=["t"]))
    assert out.completed and not host.calls_to("CallTool")
    done = out.of_type("tool.call.completed")[0].tool_call_completed
    assert done.error_code == "invalid_argument"
