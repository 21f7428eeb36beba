"""Replies (`SendReply`), run logs and auto-traced tool calls, over real gRPC against the host double."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentrunner import RunContext, results
from agentrunner.errors import (
    FailedPreconditionError,
    NotFoundError,
    PayloadTooLargeError,
    UnauthorizedError,
)
from agentrunner.results import RunResult
from agentrunner.testing import HostDouble
from agentrunner.v1 import result_pb2
from tests.sdk.parity_support import box, use

pytestmark = pytest.mark.asyncio


# -- replies ------------------------------------------------------------------------------------


async def test_reply_sends_one_full_reply_with_the_run_token(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        box["resp"] = await ctx.reply("Hello there", quote_origin=True)
        yield results.completed("done")

    out = await host.run(use(script), "hi")
    assert out.completed
    [(reply_id, mode, text)] = host.reply_log()
    assert (mode, text) == ("FULL", "Hello there")
    assert reply_id.startswith(out.run_id)
    assert host.replies[0].quote_origin is True
    assert box["resp"].reply_id == reply_id and box["resp"].delivered
    call = host.calls_to("SendReply")[0]
    assert call.metadata["x-agentrunner-run-token"] == host.tokens[out.run_id]


async def test_reply_stream_updates_with_full_text_then_finishes(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        text = ""
        async with ctx.reply_stream() as stream:
            for piece in ["Hel", "lo ", "world"]:
                text += piece
                await stream.update(text)
        box["closed"] = stream.closed
        yield results.completed()

    out = await host.run(use(script), "hi")
    assert out.completed
    log = host.reply_log()
    assert [(m, t) for _, m, t in log] == [
        ("UPDATE", "Hel"),
        ("UPDATE", "Hello "),
        ("UPDATE", "Hello world"),
        ("FINISH", ""),
    ]
    assert len({rid for rid, _, _ in log}) == 1, "one reply id for the whole stream"
    assert box["closed"]


async def test_reply_stream_aborts_when_the_block_raises(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        async with ctx.reply_stream() as stream:
            await stream.update("partial answ")
            raise ValueError("model went away")
        yield results.completed()  # type: ignore[unreachable]  # pragma: no cover - never reached (the yield makes this an async generator)

    out = await host.run(use(script), "hi")
    assert out.failure is not None and out.failure.code == "runner.exception"
    assert "model went away" in out.failure.message
    assert [m for _, m, _ in host.reply_log()] == ["UPDATE", "ABORT"]


async def test_two_replies_get_distinct_ids_and_finish_can_set_final_text(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        await ctx.reply("first")
        async with ctx.reply_stream() as stream:
            await stream.update("draft")
            await stream.finish("final text")
            with pytest.raises(RuntimeError, match="closed"):
                await stream.update("late")
        yield results.completed()

    out = await host.run(use(script), "hi")
    assert out.completed
    log = host.reply_log()
    assert [(m, t) for _, m, t in log] == [("FULL", "first"), ("UPDATE", "draft"), ("FINISH", "final text")]
    assert log[0][0] != log[1][0] == log[2][0]


async def test_reply_is_refused_locally_without_the_reply_api(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        with pytest.raises(UnauthorizedError, match="SendReply"):
            await ctx.reply("nope")
        with pytest.raises(UnauthorizedError):
            async with ctx.reply_stream() as stream:
                await stream.update("nope")
        yield results.completed()

    out = await host.run(use(script), "hi", apis={"reply": False})
    assert out.completed
    assert host.calls_to("SendReply") == []


async def test_oversized_reply_fails_before_any_call(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        with pytest.raises(PayloadTooLargeError, match="200000"):
            await ctx.reply("x" * 200_001)
        yield results.completed()

    out = await host.run(use(script), "hi")
    assert out.completed and host.calls_to("SendReply") == []


async def test_host_refusal_of_a_reply_is_a_typed_error(host: HostDouble) -> None:
    host.on("SendReply", error="FAILED_PRECONDITION", message="reply already finished")

    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        with pytest.raises(FailedPreconditionError, match="already finished"):
            await ctx.reply("again")
        yield results.completed()

    out = await host.run(use(script), "hi")
    assert out.completed


# -- run logs -----------------------------------------------------------------------------------


async def test_log_lines_are_results_in_order_with_sequence_numbers(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        yield results.delta("a")
        await ctx.log("looked something up")
        yield results.delta("b")
        await ctx.log("slow provider", level="warning", latency_ms=1200)
        ctx.log.info("local only")  # a structlog line, not a result
        yield results.completed()

    out = await host.run(use(script), "hi")  # the double checks the grammar (sequence 1..n)
    assert out.types == ["message.delta", "run.log", "message.delta", "run.log", "run.completed"]
    assert [r.sequence for r in out.results] == [1, 2, 3, 4, 5]
    first, second = (r.run_log for r in out.of_type("run.log"))
    assert (first.level, first.text) == (result_pb2.RUN_LOG_LEVEL_INFO, "looked something up")
    assert second.level == result_pb2.RUN_LOG_LEVEL_WARNING
    assert second.fields["latency_ms"] == 1200


async def test_log_rejects_an_unknown_level(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        with pytest.raises(ValueError, match="unknown log level"):
            await ctx.log("x", level="loud")
        yield results.completed()

    out = await host.run(use(script), "hi")
    assert out.types == ["run.completed"]


async def test_log_from_a_task_the_runner_awaits_is_streamed(host: HostDouble) -> None:
    async def worker(ctx: RunContext, i: int) -> None:
        await ctx.log(f"worker {i}")

    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        await asyncio.gather(*(worker(ctx, i) for i in range(3)))
        yield results.completed()

    out = await host.run(use(script), "hi")
    assert sorted(r.run_log.text for r in out.of_type("run.log")) == ["worker 0", "worker 1", "worker 2"]
    assert out.types[-1] == "run.completed"


# -- tool calls ---------------------------------------------------------------------------------


async def test_call_tool_emits_started_before_the_host_call_and_completed_after(host: HostDouble) -> None:
    release, arrived = asyncio.Event(), asyncio.Event()

    async def slow_tool(req: Any, call: Any) -> dict[str, Any]:
        arrived.set()
        await release.wait()
        return {"contents": [{"text": f"sum={int(req.parameters['a']) + 1}"}]}

    host.on("CallTool", slow_tool)

    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        box["tools"] = await ctx.get_available_tools()
        resp = await ctx.call_tool("calc", {"a": 1})
        yield results.completed(resp.contents[0].text)

    handle = await host.start_run(use(script), "hi", tools=["calc"])
    started = await handle.next()
    assert started is not None and started.WhichOneof("payload") == "tool_call_started"
    assert started.tool_call_started.tool_name == "calc"
    assert started.tool_call_started.parameters["a"] == 1
    # `started` is out while the host call cannot have finished (it waits for `release`).
    await asyncio.wait_for(arrived.wait(), 5)
    release.set()
    out = await handle.wait()
    assert out.types == ["tool.call.started", "tool.call.completed", "run.completed"]
    completed = out.results[1].tool_call_completed
    call_id = started.tool_call_started.tool_call_id
    assert completed.tool_call_id == call_id == host.calls_to("CallTool")[0].request.tool_call_id
    assert completed.error_code == "" and completed.result_preview["text"] == "sum=2"
    assert out.text == "sum=2"
    assert box["tools"] == [
        {"name": "calc", "description": "", "parameters": {}, "type": "native", "operations": []}
    ]


async def test_call_tool_failure_completes_the_pair_with_the_error_and_raises(host: HostDouble) -> None:
    host.on("CallTool", error="NOT_FOUND", message="tool vanished")

    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        with pytest.raises(NotFoundError):
            await ctx.call_tool("calc", {})
        yield results.completed("recovered")

    out = await host.run(use(script), "hi", tools=["calc"])
    assert out.types == ["tool.call.started", "tool.call.completed", "run.completed"]
    done = out.results[1].tool_call_completed
    assert done.error_code == "not_found" and "tool vanished" in done.error_message


async def test_a_tool_reported_error_is_marked_on_completed(host: HostDouble) -> None:
    host.on("CallTool", {"contents": [{"text": "division by zero"}], "is_error": True})

    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        resp = await ctx.call_tool("calc", {"a": 0})
        yield results.completed(f"error={resp.is_error}")

    out = await host.run(use(script), "hi", tools=["calc"])
    done = out.of_type("tool.call.completed")[0].tool_call_completed
    assert done.error_code == "tool.error" and done.error_message == "division by zero"


async def test_call_tool_outside_the_grant_pairs_an_unauthorized_completion(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        with pytest.raises(UnauthorizedError):
            await ctx.call_tool("rm_rf", {})
        yield results.completed("ok")

    out = await host.run(use(script), "hi", tools=["calc"])
    assert out.types == ["tool.call.started", "tool.call.completed", "run.completed"]
    assert out.results[1].tool_call_completed.error_code == "unauthorized"
    assert host.calls_to("CallTool") == []


async def test_a_run_cut_during_a_tool_call_still_closes_the_pair(host: HostDouble) -> None:
    async def never(req: Any, call: Any) -> None:
        await asyncio.sleep(30)

    host.on("CallTool", never)

    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        await ctx.call_tool("calc", {})
        yield results.completed()  # pragma: no cover - the deadline cuts the run first

    out = await host.run(use(script), "hi", tools=["calc"], deadline=1.0)
    assert out.types[0] == "tool.call.started" and out.types[-1] == "run.failed"
    assert out.of_type("tool.call.completed"), "the open tool call was closed"
