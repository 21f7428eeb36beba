"""A deadline the host moves earlier (control stream `deadline` signal) ends the run at the new time."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

import asyncio
import time

import pytest

from agentrunner import Runner, results
from agentrunner.engine import RunExecution
from agentrunner.v1 import runner_service_pb2

pytestmark = pytest.mark.asyncio


class Waits(Runner):
    manifest = {"id": "plugin:test/waits/default", "label": "x", "capabilities": ["streaming"]}

    async def run(self, ctx):
        yield results.delta("started")
        await asyncio.sleep(60)


async def test_a_deadline_moved_earlier_ends_the_run_then() -> None:
    request = runner_service_pb2.RunRequest()
    request.context.run_id = "run_moved"
    request.context.runtime.deadline_at.FromNanoseconds(int((time.time() + 60) * 1e9))
    execution = RunExecution(Waits(), request)
    stream = execution.results()
    first = await stream.__anext__()
    assert first.message_delta.text == "started"
    assert execution.ctx is not None
    began = time.monotonic()
    execution.ctx._set_deadline(time.time() + 0.3)  # as the control stream's `deadline` signal does
    terminal = await asyncio.wait_for(stream.__anext__(), 5)
    assert terminal.run_failed.code == "deadline_exceeded"
    assert time.monotonic() - began < 2  # at the moved deadline, not the first one (60 s)
    await stream.aclose()
