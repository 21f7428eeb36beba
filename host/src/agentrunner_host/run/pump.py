"""The pump stage of one run: the run's outbox in arrival order, one loop dispatched by item kind.

`RunExecution.stream` runs it between the call (`RunExecution._call`) and the conclusion. Items are,
in arrival order: an update delivered meanwhile (a reply or interaction: passed on as it is), a result
appended on the open run (`AppendRunResult`), a runner message, or the end of the runner's stream. Each
result is checked by the run's validator; a delta is queued in the journal (the host-wide batcher
writes it) and shown at once, any other result goes through `RunExecution.take` (recorded first, the
terminal decided there). Deltas take no coroutine of their own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Protocol

import grpc
import structlog

from agentrunner.v1 import host_service_pb2, result_pb2, runner_service_pb2
from agentrunner_host.delivery.channel import AppendedResult, RunChannel
from agentrunner_host.delivery.interactions import deliver_requested
from agentrunner_host.observability.telemetry import TIME_TO_FIRST_RESULT
from agentrunner_host.run import outcomes
from agentrunner_host.run.followers import Followers
from agentrunner_host.run.host import RunHost
from agentrunner_host.run.journal import RunJournal
from agentrunner_host.run.runner_call import RunnerCall
from agentrunner_host.run.validation import ResultValidator

log = structlog.get_logger("agentrunner_host.run")

Update = host_service_pb2.HostServiceRunResponse


class PumpedRun(Protocol):
    """What the pump reads and writes of its run (`run/execution.py:RunExecution`; a protocol, so the
    two modules do not import each other)."""

    host: RunHost
    validator: ResultValidator | None
    journal: RunJournal
    followers: Followers
    channel: RunChannel | None
    terminal: result_pb2.RunResult | None
    received_any: bool
    pump_failure: result_pb2.RunResult | None

    @property
    def run_id(self) -> str: ...

    async def take(self, result: result_pb2.RunResult) -> result_pb2.RunResult | None: ...


async def pump(run: PumpedRun, call: RunnerCall) -> AsyncGenerator[Update, None]:
    """The run's updates until the runner's stream ends or, after the terminal, the drain time runs
    out. A message grpc.aio could not deserialize ends it with `run.pump_failure`."""
    started, loop = time.monotonic(), asyncio.get_running_loop()
    outbox, validator, journal, followers = call.outbox, run.validator, run.journal, run.followers
    host = run.host
    assert validator is not None
    drain_until: float | None = None
    first = True
    while True:
        if drain_until is None:  # items waiting already (usual while streaming): no coroutine
            item = call.take(outbox.get_nowait() if len(outbox) else await outbox.get())
        else:
            left = drain_until - loop.time()
            if left <= 0:
                return
            try:
                item = call.take(await asyncio.wait_for(outbox.get(), left))
            except TimeoutError:
                return
        if item is grpc.aio.EOF:
            return
        if isinstance(item, Update):  # a reply / interaction delivered meanwhile
            yield item
            continue
        appended = item if isinstance(item, AppendedResult) else None
        if appended is not None:  # AppendRunResult on this open run
            item = runner_service_pb2.RunResponse(result=appended.result)
        if not isinstance(item, runner_service_pb2.RunResponse):
            # grpc.aio hands back None for a message it could not deserialize
            if run.terminal is None:
                run.pump_failure = outcomes.failed(run.run_id, "runner.protocol_error")
            log.warning("run.undecodable_message")
            return
        run.received_any = True
        result = validator.accept(item.result)
        if result is None:
            if appended is not None:
                appended.future.set_result(None)
            continue
        if validator.kind == "message_delta" and not journal.failed:  # most results
            due = journal.add_delta(result)
            if followers:
                followers.publish(Update(result=result))
            if due:
                await journal.write_deltas()
        else:
            taken = await run.take(result)
            if taken is None:
                continue
            result = taken
        if first:
            first = False
            TIME_TO_FIRST_RESULT.observe(time.monotonic() - started)
        yield Update(result=result)
        if appended is not None:
            appended.future.set_result(result)
        if validator.kind == "interaction_requested":
            interaction_id = result.interaction_requested.interaction.interaction_id
            await deliver_requested(
                run.channel, host.interaction_store, interaction_id, host.stores.transcript
            )
        if run.terminal is not None and drain_until is None:
            drain_until = loop.time() + host.config.limits.post_terminal_drain_seconds
