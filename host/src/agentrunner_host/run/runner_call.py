"""The call to the runner: `RunnerService.Run` with the run's deadline and trace metadata, and the run's
one reader task.

The reader puts runner messages into the run's outbox (`delivery.channel.Outbox`), the same queue
`SendReply` and `AppendRunResult` use, so the run's pump waits on one queue and items keep their arrival
order. At most `READ_AHEAD` messages wait there unread (gRPC flow control pushes back on the runner
beyond that). A gRPC read is never cancelled midway except when the run is released.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time
from typing import TYPE_CHECKING

import grpc
import structlog
from opentelemetry import trace

from agentrunner.v1 import result_pb2, runner_service_pb2
from agentrunner_host.delivery.channel import AppendedResult, Outbox, Update
from agentrunner_host.observability.telemetry import inject_metadata, start_span
from agentrunner_host.ports import utcnow
from agentrunner_host.run import outcomes

if TYPE_CHECKING:
    from agentrunner_host.registry.endpoints import RunnerRegistry
    from agentrunner_host.registry.targets import CallTarget
    from agentrunner_host.run.start import RunStart

log = structlog.get_logger("agentrunner_host.run")

#: runner messages read ahead of the run's pump (at most)
READ_AHEAD = 32

Call = grpc.aio.UnaryStreamCall[runner_service_pb2.RunRequest, runner_service_pb2.RunResponse]


class ReadRoom:
    """How many more runner messages the reader may queue unread (`READ_AHEAD` at most): a counter and
    at most one waiter (the reader), lighter than a semaphore on the per-delta path."""

    __slots__ = ("free", "waiter")

    def __init__(self, size: int) -> None:
        self.free = size
        self.waiter: asyncio.Future[None] | None = None

    async def take(self) -> None:
        while not self.free:
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        self.free -= 1

    def give(self) -> None:
        self.free += 1
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


@dataclasses.dataclass(slots=True)
class ReadFailed:
    """The runner read ended with an error (or our own `call.cancel()`); re-raised by the pump."""

    error: BaseException


class RunnerCall:
    """One run's `RunnerService.Run` call and its reader."""

    def __init__(self, call: Call, outbox: Outbox) -> None:
        self.call = call
        self.outbox = outbox
        self.room = ReadRoom(READ_AHEAD)
        self._reader: asyncio.Task[None] | None = None
        #: monotonic time of the runner's last message (host stop cancels runs idle for a while first)
        self.last_activity = time.monotonic()
        #: the call's client span (`send`); it ends with the reader, on every path
        self.span: trace.Span | None = None

    @classmethod
    def send(
        cls,
        endpoint: CallTarget,
        request: runner_service_pb2.RunRequest,
        deadline_at: dt.datetime,
        span: trace.Span,
        outbox: Outbox,
    ) -> RunnerCall:
        """Starts the call (grpc.aio sends the request from a task of its own, at the next yield) in a
        client span of the run's span, which the runner's spans are children of; it ends with the call."""
        call_span = start_span(
            "agentrunner.runner/Run",
            trace.set_span_in_context(span),
            trace.SpanKind.CLIENT,
            {
                "rpc.system": "grpc",
                "rpc.service": "agentrunner.v1.RunnerService",
                "rpc.method": "Run",
                "server.address": endpoint.address,
            },
        )
        metadata = tuple(inject_metadata(trace.set_span_in_context(call_span)))
        timeout = max(0.001, (deadline_at - utcnow()).total_seconds())
        runner_call = cls(endpoint.start_call(request, timeout=timeout, metadata=metadata), outbox)
        runner_call.span = call_span
        return runner_call

    def start_reading(self, name: str) -> None:
        self.last_activity = time.monotonic()
        self._reader = asyncio.create_task(self._read(), name=name)

    def done(self) -> bool:
        return self.call.done()

    def cancel(self) -> None:
        """Cancels the call (its read then ends with `ReadFailed(CancelledError)`); a no-op once done."""
        if not self.call.done():
            if self.span is not None and self.span.is_recording():
                self.span.set_status(trace.Status(trace.StatusCode.ERROR, "CANCELLED"))
            self.call.cancel()

    def stop_reading(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()

    def take(self, item: object) -> object:
        """An outbox item as the pump handles it: what the reader put there (a runner message, EOF, an
        undecodable message as None) frees a read-ahead slot, and a failed read raises its error;
        replies and appended results pass as they are."""
        if type(item) is not runner_service_pb2.RunResponse and isinstance(item, Update | AppendedResult):
            return item
        self.room.give()
        self.last_activity = time.monotonic()
        if isinstance(item, ReadFailed):
            raise item.error
        return item

    async def _read(self) -> None:
        try:
            await self._read_all()
        finally:
            self._end_span()

    def _end_span(self) -> None:
        span, self.span = self.span, None
        if span is None:
            return
        span.end()

    async def _read_all(self) -> None:
        room = self.room
        first = True
        while True:
            if room.free:
                room.free -= 1
            else:
                await room.take()
            try:
                message = await self.call.read()
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the run was released
                self.outbox.put_nowait(
                    ReadFailed(exc)
                )  # the call was cancelled (CancelRun grace, client gone)
                return
            except Exception as exc:
                if self.span is not None and self.span.is_recording():
                    code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else grpc.StatusCode.UNKNOWN
                    self.span.set_status(trace.Status(trace.StatusCode.ERROR, code.name))
                self.outbox.put_nowait(ReadFailed(exc))
                return
            self.outbox.put_nowait(message)
            if message is grpc.aio.EOF:
                return
            if first:  # the pump takes the first result before the next read is started (latency)
                first = False
                await asyncio.sleep(0)


def call_failure(
    exc: grpc.aio.AioRpcError,
    start: RunStart,
    registry: RunnerRegistry,
    received_any: bool,
    cancel_reason: str,
) -> result_pb2.RunResult:
    """The terminal failure of a runner call that ended with a gRPC error before its terminal result
    (`outcomes.from_call_error`); a runner that could not be reached at all is marked unreachable."""
    runner, run_id = start.runner, start.record.run_id
    assert runner is not None
    code = exc.code()
    log.warning("run.runner_call_failed", code=code.name, received_any=received_any)
    if code == grpc.StatusCode.UNAVAILABLE and not received_any:
        registry.mark_unreachable(runner, f"UNAVAILABLE: {exc.details()}")
    return outcomes.from_call_error(
        run_id,
        runner.runner_id,
        code,
        exc.details() or "",
        received_any=received_any,
        cancel_reason=cancel_reason,
    )
