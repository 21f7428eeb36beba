"""A runtime's run slots: one `ClaimRun` stream per free slot, and the run the host places on it.

A claimed run is executed by the same engine as a dialed `RunnerService.Run` (`engine.RunExecution`),
with the same request: the host's `RunRequest`, with `host_api_endpoint` replaced by the address the
runtime dialed (proxy calls, the Control stream and a harness's MCP bridge go there). What a dialed
runner learns from its call, a runtime learns from the slot stream: the host ending it (CANCELLED,
DEADLINE_EXCEEDED, the connection lost) stops the run at once and nothing more is sent, as when a
dialed `Run` call is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import grpc
import structlog
from google.protobuf import timestamp_pb2
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentrunner import results
from agentrunner.engine import RunExecution
from agentrunner.failures import FailureKind
from agentrunner.runner import Runner
from agentrunner.v1 import result_pb2, runner_service_pb2, runtime_service_pb2

log = structlog.get_logger("agentrunner.runtime")

CLAIM_METHOD = "/agentrunner.v1.RuntimeService/ClaimRun"
#: pause before a slot stream the host gave back (drain, host stop) is opened again
REOPEN_PAUSE = 0.05
#: how long a finished run waits for the host's end of its stream
END_WAIT = 5.0

ClaimCall = grpc.aio.StreamStreamCall[
    runtime_service_pb2.ClaimRunRequest, runtime_service_pb2.ClaimRunResponse
]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _serialize(message: runtime_service_pb2.ClaimRunRequest | result_pb2.RunResult) -> bytes:
    """A `ClaimRunRequest`, or a bare `RunResult` written as `ClaimRunRequest{response: RunResponse{result}}`:
    the two length-delimited frames around the result's own bytes (field 2 of the request, field 1 of the
    response), so a result is not copied into two wrapper messages on its way out."""
    if isinstance(message, result_pb2.RunResult):
        result = message.SerializeToString()
        response = b"\x0a" + _varint(len(result)) + result
        return b"\x12" + _varint(len(response)) + response
    return message.SerializeToString()


def claim_stub(channel: grpc.aio.Channel) -> Any:
    """The `RuntimeService.ClaimRun` method on `channel` (requests serialized by `_serialize`)."""
    return channel.stream_stream(
        CLAIM_METHOD,
        request_serializer=_serialize,
        response_deserializer=runtime_service_pb2.ClaimRunResponse.FromString,
    )


def _unserved(request: runner_service_pb2.RunRequest) -> result_pb2.RunResult:
    """The terminal result of a run this runtime has no runner for (the host routes only announced ids)."""
    result = results.failed(
        "runner.unavailable",
        f"this runtime serves no runner {request.runner_id or request.runner_name!r}",
        retryable=True,
        kind=FailureKind.CONNECTION_ERROR,
    )
    result.run_id = request.context.run_id
    result.sequence = 1
    ts = timestamp_pb2.Timestamp()
    ts.GetCurrentTime()
    result.timestamp.CopyFrom(ts)
    return result


class SlotRunner:
    """Executes claimed runs (see the module docstring)."""

    def __init__(
        self,
        find: Callable[[str, str], Runner | None],
        address: str,
        metadata: tuple[tuple[str, str], ...],
        *,
        precheck: bool = True,
    ) -> None:
        self.find = find
        self.address = address
        self.metadata = metadata
        self.precheck = precheck
        self.active: set[RunExecution] = set()
        #: run ids executing now (heartbeats report them)
        self.run_ids: set[str] = set()
        #: set while no run executes
        self.idle = asyncio.Event()
        self.idle.set()

    async def serve_slot(
        self, channel: grpc.aio.Channel, connection_id: str, may_open: Callable[[], bool]
    ) -> None:
        """Opens one slot stream after the other while `may_open()`; returns when the host no longer
        knows the connection (the session is over)."""
        stub = claim_stub(channel)
        while may_open():
            call: ClaimCall = stub(metadata=self.metadata)
            try:
                await call.write(
                    runtime_service_pb2.ClaimRunRequest(
                        ready=runtime_service_pb2.ClaimReady(connection_id=connection_id)
                    )
                )
                first = await call.read()
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAUTHENTICATED):
                    return
                await asyncio.sleep(REOPEN_PAUSE * 4)
                continue
            except (grpc.aio.UsageError, asyncio.InvalidStateError):  # the stream ended under the write
                await asyncio.sleep(REOPEN_PAUSE * 4)
                continue
            except asyncio.CancelledError:
                call.cancel()
                raise
            if (
                first is grpc.aio.EOF
                or not isinstance(first, runtime_service_pb2.ClaimRunResponse)
                or (first.WhichOneof("message") != "run")
            ):
                await asyncio.sleep(REOPEN_PAUSE)  # (the host gave the slot back)
                continue
            await self.execute(call, first.run)

    async def execute(self, call: ClaimCall, claimed: runtime_service_pb2.ClaimedRun) -> None:
        """One claimed run, from its request to the host's end of the stream."""
        request = runner_service_pb2.RunRequest()
        request.CopyFrom(claimed.request)
        request.host_api_endpoint = self.address
        runner = self.find(request.runner_id, request.runner_name)
        if runner is None or not request.context.run_id:
            await self._answer(call, _unserved(request))
            return
        execution = RunExecution(
            runner,
            request,
            precheck=self.precheck,
            trace_context=TraceContextTextMapPropagator().extract(dict(claimed.metadata)),
        )
        run_id = request.context.run_id
        self.active.add(execution)
        self.run_ids.add(run_id)
        self.idle.clear()
        pump = asyncio.create_task(self._pump(call, execution), name=f"runtime-run:{run_id}")
        watch = asyncio.ensure_future(call.read())
        try:
            await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not pump.done():  # the host ended the stream first: cancelled, deadline, connection lost
                pump.cancel()
                log.info("runtime.run_stopped", run_id=run_id, by=_status_of(watch))
            with contextlib.suppress(BaseException):
                await pump
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(watch, END_WAIT)
        except asyncio.CancelledError:
            pump.cancel()
            watch.cancel()
            call.cancel()
            with contextlib.suppress(BaseException):
                await pump
            raise
        finally:
            self.active.discard(execution)
            self.run_ids.discard(run_id)
            if not self.active:
                self.idle.set()

    async def _pump(self, call: ClaimCall, execution: RunExecution) -> None:
        stream = execution.results()
        try:
            async for result in stream:
                await call.write(
                    runtime_service_pb2.ClaimRunRequest(
                        response=runner_service_pb2.RunResponse(result=result)
                    )
                )
            await call.done_writing()
        finally:
            await stream.aclose()

    async def _answer(self, call: ClaimCall, result: result_pb2.RunResult) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError):
            await call.write(
                runtime_service_pb2.ClaimRunRequest(response=runner_service_pb2.RunResponse(result=result))
            )
            await call.done_writing()
            await asyncio.wait_for(call.read(), END_WAIT)


def _status_of(watch: asyncio.Future[Any]) -> str:
    if watch.cancelled():
        return "cancelled"
    exc = watch.exception()
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code().name
    return "ended"
