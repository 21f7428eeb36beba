"""The pump stage of one run: the run's outbox in arrival order, one loop dispatched by item kind.

`RunExecution.stream` runs it between the call (`RunExecution._call`) and the conclusion. Items are,
in arrival order: an update delivered meanwhile (a reply or interaction: passed on as it is), a result
appended on the open run (`AppendRunResult`), a runner message, or the end of the runner's stream. Each
result is checked by the run's validator; a delta is queued in the journal (the host-wide batcher
writes it) and shown at once, any other result goes through `RunExecution.take` (recorded first, the
terminal decided there). Deltas take no coroutine of their own. Once the run's terminal is out, the
pump drains (`_drain`): what is delivered within the drain time still goes out, results are dropped.
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

    async def take(self, result: result_pb2.RunResult, kind: str) -> bool: ...


async def pump(run: PumpedRun, call: RunnerCall) -> AsyncGenerator[Update, None]:
    """The run's updates until the runner's stream ends or, after the terminal, the drain time runs
    out (`_drain`). A message grpc.aio could not deserialize ends it with `run.pump_failure`. Each item
    of the outbox goes through named steps: a delivered update is passed on as it is; a result is
    unwrapped (`_unwrap`), checked (`_accept`), recorded (`_queue_delta` for a delta, else
    `RunExecution.take`), shown, and settled (`_settle`)."""
    started = time.monotonic()
    outbox, validator, journal = call.outbox, run.validator, run.journal
    assert validator is not None
    first = True
    while True:
        # items waiting already (usual while streaming): no coroutine
        item = call.take(outbox.get_nowait() if len(outbox) else await outbox.get())
        if isinstance(item, Update):  # a reply / interaction delivered meanwhile
            yield item
            continue
        unwrapped = _unwrap(run, item)
        if unwrapped is None:  # the runner's stream ended
            return
        result, appended = unwrapped
        kind = _accept(run, validator, result, appended)
        if kind == "message_delta" and not journal.failed:  # most results
            if _queue_delta(run, result):
                await journal.write_deltas()
        elif kind is None or not await run.take(result, kind):  # dropped, or refused by the run
            continue
        first = first and _first_result(started)  # (False from then on)
        yield Update(result=result)
        if (appended is not None or kind != "message_delta") and await _settle(run, result, kind, appended):
            break
    async for update in _drain(run, call):
        yield update


async def _drain(run: PumpedRun, call: RunnerCall) -> AsyncGenerator[Update, None]:
    """After the terminal: what is delivered within `limits.post_terminal_drain_seconds` (replies and
    interactions sent right after it); results are dropped (`after_terminal`). Ends at the runner's EOF."""
    loop = asyncio.get_running_loop()
    until = loop.time() + run.host.config.limits.post_terminal_drain_seconds
    validator = run.validator
    assert validator is not None
    while True:
        left = until - loop.time()
        if left <= 0:
            return
        try:
            item = call.take(await asyncio.wait_for(call.outbox.get(), left))
        except TimeoutError:
            return
        if isinstance(item, Update):
            yield item
            continue
        unwrapped = _unwrap(run, item)
        if unwrapped is None:
            return
        _accept(run, validator, *unwrapped)  # (dropped: the run has its terminal)


def _unwrap(run: PumpedRun, item: object) -> tuple[result_pb2.RunResult, AppendedResult | None] | None:
    """The result a runner message or an `AppendRunResult` on this open run carries, with the latter's
    answer; None when the runner's stream ended: EOF, or a message grpc.aio could not deserialize (it
    hands back None), which fails the run `runner.protocol_error` unless it has its terminal."""
    if isinstance(item, runner_service_pb2.RunResponse):
        run.received_any = True
        return item.result, None
    if isinstance(item, AppendedResult):
        run.received_any = True
        return item.result, item
    if item is grpc.aio.EOF:
        return None
    if run.terminal is None:
        run.pump_failure = outcomes.failed(run.run_id, "runner.protocol_error")
    log.warning("run.undecodable_message")
    return None


def _accept(
    run: PumpedRun, validator: ResultValidator, result: result_pb2.RunResult, appended: AppendedResult | None
) -> str | None:
    """The kind the validator accepted the result as; None when it is dropped (after the run's terminal,
    or by the validator), which answers an appended result with None."""
    if run.terminal is not None:
        validator.reject("after_terminal", result)
        kind = None
    else:
        kind = validator.accept(result)
    if kind is None and appended is not None:
        appended.future.set_result(None)
    return kind


def _queue_delta(run: PumpedRun, result: result_pb2.RunResult) -> bool:
    """Queues a delta in the run's journal (the host-wide batcher writes it) and shows it to followers at
    once; True when the journal's batch is due to be written now (no await: the per-delta path)."""
    due = run.journal.add_delta(result)
    if run.followers:
        run.followers.publish(Update(result=result))
    return due


def _first_result(started: float) -> bool:
    """The run's first result is out: its time since the pump started (`TIME_TO_FIRST_RESULT`)."""
    TIME_TO_FIRST_RESULT.observe(time.monotonic() - started)
    return False


async def _settle(
    run: PumpedRun, result: result_pb2.RunResult, kind: str, appended: AppendedResult | None
) -> bool:
    """After a result other than a plain delta went out: an appended result's caller gets it, a requested
    interaction is delivered (`delivery/interactions.py:deliver_requested`). True once the run has its
    terminal: the pump then drains."""
    if appended is not None:
        appended.future.set_result(result)
    if kind == "interaction_requested":
        host = run.host
        interaction_id = result.interaction_requested.interaction.interaction_id
        await deliver_requested(run.channel, host.interaction_store, interaction_id, host.stores.transcript)
    return run.terminal is not None
