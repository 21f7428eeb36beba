"""A run on a runtime's slot, seen by the run path as a runner call.

`RuntimeCall` is a `grpc.aio.UnaryStreamCall`: the run path (`run/runner_call.py`) reads it, cancels it
and asks whether it is done exactly as it does a dialed `RunnerService.Run` call, so validation, the
journal, followers, cancel and deadlines need no second implementation. Underneath it is one
`ClaimRun` stream the runtime opened (a `Slot`): the host writes the `ClaimedRun` on it and reads the
runtime's `RunResponse`s from it. What a dialed call's status would say comes from the stream:

- the runtime half-closes after its terminal result: EOF, the stream ends OK;
- `cancel()` (CancelRun grace, client gone): reads raise `CancelledError`, the stream ends CANCELLED;
- the deadline passes: reads raise DEADLINE_EXCEEDED, the stream ends DEADLINE_EXCEEDED;
- the connection is lost or the runtime goes offline (`lost`): reads raise UNAVAILABLE, which the run
  path reports as `runner.stream_broken` (or `runner.unavailable` before any result).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from agentrunner.protocol import is_terminal
from agentrunner.v1 import runner_service_pb2, runtime_service_pb2
from agentrunner_host.registry.endpoints import RegisteredRunner
from agentrunner_host.registry.targets import CallTarget

if TYPE_CHECKING:
    from agentrunner_host.runtimes.registry import RuntimeRegistry
    from agentrunner_host.runtimes.session import Connection

Outcome = tuple[grpc.StatusCode, str] | None
#: how long an EOF without a terminal result waits to learn whether the connection was lost (its
#: stream handler is cancelled a fraction of a millisecond after the EOF)
LOST_WAIT = 0.25


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """The error a dialed call would raise with this status."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class Slot:
    """One waiting `ClaimRun` stream of a connected runtime: a free slot."""

    __slots__ = ("alive", "assigned", "connection", "context")

    def __init__(self, connection: Connection, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self.connection = connection
        self.context = context
        #: the run placed on it (None: the host takes the slot back)
        self.assigned: asyncio.Future[RuntimeCall | None] = asyncio.get_running_loop().create_future()
        self.alive = True

    def give_back(self) -> None:
        """Ends the waiting stream with OK and no run (drain, host stop, runtime offline)."""
        self.alive = False
        if not self.assigned.done():
            self.assigned.set_result(None)


class RuntimeCall(grpc.aio.UnaryStreamCall[runner_service_pb2.RunRequest, runner_service_pb2.RunResponse]):
    """One run on a runtime's slot (see the module docstring)."""

    def __init__(
        self,
        slot: Slot,
        claimed: runtime_service_pb2.ClaimedRun,
        timeout: float,
        on_end: Callable[[RuntimeCall], None],
    ) -> None:
        loop = asyncio.get_running_loop()
        self.slot = slot
        self.connection = slot.connection
        self.claimed = claimed
        self.run_id = claimed.request.context.run_id
        self.runner_id = claimed.request.runner_id
        self.started = time.monotonic()
        self._deadline = loop.time() + timeout
        self._on_end = on_end
        #: how the host ends the slot stream: set once, read by the stream's handler
        self.ending: asyncio.Future[Outcome] = loop.create_future()
        #: the stream's handler is gone (ended or cancelled)
        self.handler_gone: asyncio.Future[None] = loop.create_future()
        self._error: BaseException | None = None
        self._code = grpc.StatusCode.OK
        self._details = ""
        self._done = False
        self._terminal = ""
        self._callbacks: list[Callable[[Any], None]] = []
        self._timer = loop.call_at(self._deadline, self._expire)

    # -- what ends it ----------------------------------------------------------------------------------
    def _end(self, code: grpc.StatusCode, details: str, error: BaseException | None) -> bool:
        if self._done:
            return False
        self._done = True
        self._code, self._details, self._error = code, details, error
        self._timer.cancel()
        if not self.ending.done():
            self.ending.set_result(None if code == grpc.StatusCode.OK else (code, details))
        self._on_end(self)
        for callback in self._callbacks:
            callback(self)
        return True

    def _expire(self) -> None:
        self._end(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "Deadline Exceeded",
            rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"),
        )

    def lost(self, reason: str) -> None:
        """The runtime's connection or session is gone: the run's stream broke."""
        self._end(grpc.StatusCode.UNAVAILABLE, reason, rpc_error(grpc.StatusCode.UNAVAILABLE, reason))

    @property
    def outcome(self) -> str:
        """How the run went on the runtime, for its audit record."""
        if self._terminal:
            return self._terminal
        return self._code.name if self._done else "running"

    # -- reading ---------------------------------------------------------------------------------------
    async def read(self) -> Any:
        if self._error is not None:
            raise self._raised()
        try:
            message = await self.slot.context.read()
        except Exception as exc:  # the stream ended under the read (aborted, connection gone)
            if self._error is None:
                self.lost(f"the runtime's run stream broke ({type(exc).__name__})")
            raise self._raised() from None
        if self._error is not None:
            raise self._raised()
        if message is grpc.aio.EOF:
            if not self._terminal:
                # a killed runtime's stream reads EOF first; its handler is cancelled right after
                await asyncio.wait({self.handler_gone}, timeout=LOST_WAIT)
                if self._error is not None:
                    raise self._raised()
            self._end(grpc.StatusCode.OK, "", None)
            return grpc.aio.EOF
        if message is None or message.WhichOneof("message") != "response":
            return None  # (undecodable, or not a result: the run path's protocol error)
        response = message.response
        if not self._terminal and is_terminal(response.result):
            self._terminal = response.result.WhichOneof("payload") or ""
            if self._terminal == "run_failed":
                self._terminal = f"run_failed:{response.result.run_failed.code}"
        return response

    def _raised(self) -> BaseException:
        """What a read raises once the call ended: a cancelled call raises `CancelledError`, as grpc's."""
        if self._code == grpc.StatusCode.CANCELLED:
            return asyncio.CancelledError()
        assert self._error is not None
        return self._error

    def __aiter__(self) -> AsyncIterator[runner_service_pb2.RunResponse]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[runner_service_pb2.RunResponse]:
        while True:
            message = await self.read()
            if message is grpc.aio.EOF:
                return
            yield message

    # -- the rest of the call's surface ----------------------------------------------------------------
    def cancel(self) -> bool:
        return self._end(
            grpc.StatusCode.CANCELLED, "Locally cancelled by application!", asyncio.CancelledError()
        )

    def cancelled(self) -> bool:
        return self._done and self._code == grpc.StatusCode.CANCELLED

    def done(self) -> bool:
        return self._done

    def time_remaining(self) -> float | None:
        return max(0.0, self._deadline - asyncio.get_running_loop().time())

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if self._done:
            callback(self)
        else:
            self._callbacks.append(callback)

    async def initial_metadata(self) -> grpc.aio.Metadata:
        return grpc.aio.Metadata()

    async def trailing_metadata(self) -> grpc.aio.Metadata:
        return grpc.aio.Metadata()

    async def code(self) -> grpc.StatusCode:
        await self.ending
        return self._code

    async def details(self) -> str:
        await self.ending
        return self._details

    async def wait_for_connection(self) -> None:
        return None


class FailedCall(RuntimeCall):
    """A call that could not be placed: its first read raises UNAVAILABLE (`runner.unavailable`)."""

    def __init__(self, reason: str) -> None:  # (no slot: nothing of the base class's stream is used)
        self._error = rpc_error(grpc.StatusCode.UNAVAILABLE, reason)
        self._code, self._details, self._done = grpc.StatusCode.UNAVAILABLE, reason, True
        self._terminal = ""
        self._callbacks = []
        self.ending = asyncio.get_running_loop().create_future()
        self.ending.set_result((grpc.StatusCode.UNAVAILABLE, reason))
        self._deadline = 0.0

    def cancel(self) -> bool:
        return False


@dataclasses.dataclass(slots=True)
class RuntimeRunner(RegisteredRunner):
    """A runner placed on a runtime when its run started (`RuntimeRegistry.place`); its call takes a slot
    of that runtime (or of another one that qualifies, should that one have lost its slots since)."""

    runtime_id: str = ""
    selector: dict[str, str] = dataclasses.field(default_factory=dict)
    registry: RuntimeRegistry | None = None

    def call_target(self) -> CallTarget | None:
        assert self.registry is not None
        return RuntimeTarget(self.registry, self)


@dataclasses.dataclass(frozen=True, slots=True)
class RuntimeTarget:
    """Where a placed run is sent: a slot of a runtime (`CallTarget` of the run path)."""

    registry: RuntimeRegistry
    runner: RuntimeRunner

    @property
    def address(self) -> str:
        return f"runtime:{self.runner.runtime_id}"

    def start_call(
        self, request: runner_service_pb2.RunRequest, *, timeout: float, metadata: Sequence[tuple[str, str]]
    ) -> RuntimeCall:
        claimed = runtime_service_pb2.ClaimedRun(request=request, metadata=dict(metadata))
        return self.registry.start_call(self.runner, claimed, timeout)
