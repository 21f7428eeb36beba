"""What an ended run leaves behind (issue 37): its objects are freed when the run ends, not at the next
full collection of the cyclic garbage collector, which comes rarely (the young-generation collections
do not reach objects that lived as long as a run)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from agentrunner_host.run.execution import RunExecution
from tests.host.conftest import Host

pytestmark = pytest.mark.asyncio(loop_scope="session")


def executions(run_id: str) -> list[RunExecution]:
    return [o for o in gc.get_objects() if isinstance(o, RunExecution) and o.run_id == run_id]


async def test_an_ended_runs_objects_are_freed_without_a_cyclic_collection(host: Host) -> None:
    gc.collect()
    gc.disable()  # only reference counting frees anything now
    try:
        updates = await host.run("echo hello")
        run_id = updates[0].accepted.run_id
        assert updates[-1].HasField("finished")
        for _ in range(50):  # the run's tasks wind down after `finished` went out
            await asyncio.sleep(0.02)
            if not executions(run_id):
                break
        # (before: the run and its delivery channel held each other, and with them its runner call,
        # tasks, journal and validator, until a full collection)
        assert executions(run_id) == []
    finally:
        gc.enable()
