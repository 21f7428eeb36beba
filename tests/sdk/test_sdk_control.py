"""The control stream: hello/welcome, acks, heartbeats, cancel with grace, steering, UNIMPLEMENTED hosts."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

import asyncio
import time

import pytest

from agentrunner import Runner, results
from agentrunner.testing import HostDouble
from agentrunner_runners.reference import ReferenceRunner

pytestmark = pytest.mark.asyncio

observed: dict[str, object] = {}


class Patient(Runner):
    """Waits for cancellation and notes when the SDK cancelled its task."""

    manifest = {"id": "plugin:test/patient/default", "label": "x", "capabilities": ["interrupt"]}

    async def run(self, ctx):
        try:
            await ctx.cancelled.wait()
            observed["flag_at"] = time.monotonic()
            observed["reason"] = ctx.cancel_reason
            await asyncio.sleep(3600)  # ignores the cancel: the SDK must end it after the grace
        except asyncio.CancelledError:
            observed["task_cancelled_at"] = time.monotonic()
            raise
        yield results.completed("never")  # pragma: no cover


class Plain(Runner):
    manifest = {"id": "plugin:test/plain/default", "label": "x"}

    async def run(self, ctx):
        yield results.completed("plain")


async def test_cancel_sets_the_flag_then_cancels_the_task_after_grace(host: HostDouble) -> None:
    observed.clear()
    handle = await host.start_run(Patient)
    session = await host.wait_control(handle.run_id)
    assert session.hello is not None and session.hello.run_token == host.tokens[handle.run_id]
    assert "cancel" in session.hello.accepts
    t0 = time.monotonic()
    signal_id = await host.cancel(handle.run_id, "user pressed stop", grace=0.3)
    out = await handle.wait()
    assert out.types == ["run.failed"]
    assert out.failure is not None and out.failure.code == "cancelled"
    assert "user pressed stop" in out.failure.message
    assert observed["reason"] == "user pressed stop"
    assert float(observed["flag_at"]) - t0 < 0.3  # type: ignore[arg-type]
    assert 0.25 < float(observed["task_cancelled_at"]) - t0 < 1.0  # type: ignore[arg-type]
    assert [(a.signal_id, a.accepted) for a in session.acks] == [(signal_id, True)]


async def test_cooperative_cancel_in_the_reference_runner(host: HostDouble) -> None:
    handle = await host.start_run(ReferenceRunner, "slow:50")
    assert await handle.next() is not None
    await host.cancel(handle.run_id, "stop", grace=5.0)
    t0 = time.monotonic()
    out = await handle.wait()
    assert time.monotonic() - t0 < 1.0  # the runner stopped itself, well before the grace
    assert out.failure is not None and out.failure.code == "cancelled"
    assert "ticks" in out.failure.message


async def test_steering_and_heartbeats(host: HostDouble) -> None:
    handle = await host.start_run(ReferenceRunner, "steer")
    session = await host.wait_control(handle.run_id)
    await asyncio.sleep(0.25)
    signal_id = await host.steer(handle.run_id, "turn left")
    out = await handle.wait()
    assert out.text == "steered: turn left"
    assert any(a.signal_id == signal_id and a.accepted for a in session.acks)
    assert session.heartbeats >= 1
    await asyncio.wait_for(session.closed.wait(), 2.0)  # the SDK closes the stream when the run ends


async def test_runner_without_interrupt_or_steering_opens_no_control_stream(host: HostDouble) -> None:
    out = await host.run(Plain)
    assert out.text == "plain"
    assert host.calls_to("Control") == []


async def test_host_without_control_stream_runs_continue() -> None:
    async with HostDouble(control=False) as host:
        out = await host.run(ReferenceRunner, "hello")
        assert out.text == "echo: hello"
        # Without the stream, steering falls back to PullSteering.
        host.on("PullSteering", {"items": []})
        host.on("PullSteering", {"items": [{"steering_id": "s1", "input": {"text": "via pull"}}]})
        host.on("PullSteering", {"items": []})
        out = await host.run(ReferenceRunner, "steer")
        assert out.text == "steered: via pull"
        assert len(host.calls_to("PullSteering")) >= 2
