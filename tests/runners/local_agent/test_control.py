"""Cooperative cancel and steering through the control stream, and serving the runner as a real process."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from agentrunner.testing import HostDouble
from agentrunner_runners.local_agent import LocalAgentRunner
from tests.runners.local_agent.conftest import answer, context, texts

pytestmark = pytest.mark.asyncio
R = LocalAgentRunner


async def test_cancel_stops_a_model_call_cooperatively(host: HostDouble) -> None:
    entered = asyncio.Event()

    async def slow(req, call):
        entered.set()
        await asyncio.sleep(10)
        return answer("too late")

    host.on("InvokeModel", slow)
    handle = await host.start_run(R, context=context("hi"))
    await asyncio.wait_for(entered.wait(), 5)
    started = asyncio.get_running_loop().time()
    await host.cancel(handle.run_id, "user pressed stop", grace=5.0)
    out = await handle.wait(10)
    assert out.failure.code == "cancelled"
    assert "user pressed stop" in out.failure.message
    # the runner ended it itself (its metadata is there), well before the SDK's 5 s grace
    assert out.metadata["model_calls"] == 0
    assert asyncio.get_running_loop().time() - started < 2.0
    assert not out.of_type("message.completed")


async def test_cancel_during_parallel_tools(host: HostDouble) -> None:
    entered = asyncio.Event()

    async def slow_tool(req, call):
        entered.set()
        await asyncio.sleep(10)
        return {"contents": [{"text": "late"}]}

    host.on("InvokeModel", answer(calls=[("a", {}), ("b", {})]))
    host.on("CallTool", slow_tool)
    handle = await host.start_run(R, context=context("hi", tools=["a", "b"]))
    await asyncio.wait_for(entered.wait(), 5)
    await host.cancel(handle.run_id, "stop", grace=5.0)
    out = await handle.wait(10)  # grammar checked: every started tool call is completed
    assert out.failure.code == "cancelled"
    assert len(host.calls_to("InvokeModel")) == 1


async def test_steering_is_taken_at_the_next_turn_boundary(host: HostDouble) -> None:
    run_ids: list[str] = []

    async def tool(req, call):
        await host.steer(run_ids[0], "also mention PINEAPPLE")
        return {"contents": [{"text": "tool-output"}]}

    host.on("InvokeModel", answer(calls=[("t", {})], call_ids=["c1"]))
    host.on("InvokeModel", answer("tool-output and PINEAPPLE"))
    host.on("CallTool", tool)
    ctx = context("use the tool", tools=["t"])
    run_ids.append(ctx.run_id)
    out = await host.run(R, context=ctx)
    assert out.text == "tool-output and PINEAPPLE"
    second = host.calls_to("InvokeModel")[1].request.messages
    assert [(m.role, texts(m)) for m in second[-3:]] == [
        ("assistant", ""),
        ("tool", "tool-output"),
        ("user", "also mention PINEAPPLE"),
    ]
    assert "PINEAPPLE" not in "".join(texts(m) for m in host.calls_to("InvokeModel")[0].request.messages)
    assert out.metadata["steering"] == 1


async def test_steering_after_an_answer_gets_its_own_answer(host: HostDouble) -> None:
    run_ids: list[str] = []
    answers = iter(["first answer", "second answer"])

    async def invoke(req, call):
        if len(host.calls_to("InvokeModel")) == 1:
            await host.steer(run_ids[0], "and one more thing")
        return answer(next(answers))

    host.on("InvokeModel", invoke)
    ctx = context("question")
    run_ids.append(ctx.run_id)
    out = await host.run(R, context=ctx)
    assert out.types == ["message.completed", "message.completed", "run.completed"]
    assert [r.message_completed.message.content for r in out.of_type("message.completed")] == [
        "first answer",
        "second answer",
    ]
    second = host.calls_to("InvokeModel")[1].request.messages
    assert [(m.role, texts(m)) for m in second[-3:]] == [
        ("user", "question"),
        ("assistant", "first answer"),
        ("user", "and one more thing"),
    ]


async def test_steering_is_pulled_when_the_host_has_no_control_stream() -> None:
    async with HostDouble(control=False) as host:
        host.on("PullSteering", {"items": [{"steering_id": "s1", "input": {"text": "PULLED-INPUT"}}]})
        host.on("PullSteering", {})
        host.on("InvokeModel", answer("ok"))
        out = await host.run(R, context=context("hi"))
        assert out.completed
        first = host.calls_to("InvokeModel")[0].request.messages
        assert texts(first[-1]) == "PULLED-INPUT" and texts(first[-2]) == "hi"
        assert host.calls_to("PullSteering")[0].request.limit == 0


async def test_served_as_a_process(host: HostDouble) -> None:
    """`python -m agentrunner serve agentrunner_runners.local_agent:LocalAgentRunner --port 0`."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentrunner",
        "serve",
        "agentrunner_runners.local_agent:LocalAgentRunner",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ},
    )
    try:
        address = ""
        async with asyncio.timeout(20):
            while not address:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    break
                if line.startswith("AGENTRUNNER_LISTENING "):
                    address = line.split()[1]
        assert address, "the runner process never announced its address"
        host.on("InvokeModel", answer("from a real process"))
        ctx = context("hi")
        out = await host.run(address, context=ctx, runner_id="plugin:langbot/local-agent/default")
        assert out.text == "from a real process"
        assert host.calls_to("InvokeModel")[0].metadata["x-agentrunner-run-id"] == ctx.run_id
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)
