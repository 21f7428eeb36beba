"""Cancellation of the Run call mid-stream and deadline expiry."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from agentrunner import Runner, results
from agentrunner.testing import HostDouble

pytestmark = pytest.mark.asyncio

cancelled_at: dict[str, float] = {}


class Ticker(Runner):
    manifest = {"id": "plugin:test/ticker/default", "label": "x", "capabilities": ["streaming"]}

    async def run(self, ctx):
        try:
            for i in range(1000):
                yield results.delta(f"{i} ")
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            cancelled_at[ctx.run_id] = time.monotonic()
            raise


class Staller(Runner):
    manifest = {"id": "plugin:test/staller/default", "label": "x"}

    async def run(self, ctx):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled_at[ctx.run_id] = time.monotonic()
            raise
        yield results.completed("never")  # pragma: no cover


async def test_cancelled_call_cancels_the_runner_task_within_a_second(host: HostDouble) -> None:
    handle = await host.start_run(Ticker)
    first = await handle.next()
    second = await handle.next()
    assert first is not None and second is not None and second.sequence == 2
    t0 = time.monotonic()
    handle.cancel()
    for _ in range(100):
        if handle.run_id in cancelled_at:
            break
        await asyncio.sleep(0.01)
    assert handle.run_id in cancelled_at
    assert cancelled_at[handle.run_id] - t0 < 1.0
    outcome = await handle.wait(check=False)
    assert outcome.code == grpc.StatusCode.CANCELLED
    assert outcome.terminal is None  # nothing more was emitted


async def test_deadline_expiry_ends_the_run_with_deadline_exceeded(host: HostDouble) -> None:
    t0 = time.monotonic()
    out = await host.run(Staller, deadline=0.6)
    elapsed = time.monotonic() - t0
    assert out.types == ["run.failed"]
    assert out.failure is not None and out.failure.code == "deadline_exceeded" and out.failure.retryable
    assert out.run_id in cancelled_at
    assert 0.3 < elapsed < 1.5


async def test_call_deadline_alone_cancels_the_runner(host: HostDouble) -> None:
    # The host's own gRPC deadline fires before the SDK's: the runner task is still cancelled.
    handle = await host.start_run(Staller, deadline=None, call_timeout=0.4)
    outcome = await handle.wait(check=False)
    assert outcome.code == grpc.StatusCode.DEADLINE_EXCEEDED
    for _ in range(100):
        if handle.run_id in cancelled_at:
            break
        await asyncio.sleep(0.01)
    assert handle.run_id in cancelled_at


async def test_deadline_already_passed_fails_without_running(host: HostDouble) -> None:
    out = await host.run(Staller, deadline=-1.0, call_timeout=5.0)
    assert out.failure is not None and out.failure.code == "deadline_exceeded"
    assert out.run_id not in cancelled_at
