"""The runner kit's host side for a runtime that dials in (`agentrunner-conformance runner --connect-listen`).

`RuntimeDouble` serves `RuntimeService` next to the kit's ProxyService (`HostDouble.start(extra=...)`), on
the address the runtime connects to (its proxy calls go there too): it welcomes the runtime
(no credentials asked), keeps its heartbeats, and holds its waiting `ClaimRun` slot streams.
`ConnectedRunner` gives the kit what it asks of a dialed runner's `RunnerService`: the manifests (from
the runtime's `hello`), `DescribeRunner` answered from them, and `Run` as a `SlotCall` that sends the
`RunRequest` down one slot stream and reads the `RunResponse`s up. Cancelling a `SlotCall` ends the
stream with CANCELLED and its timeout with DEADLINE_EXCEEDED, as a dialed call's would, so every runner
scenario of the kit means the same over both transports.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import grpc

from agentrunner.errors import NotFoundError
from agentrunner.protocol import is_terminal
from agentrunner.v1 import runner_service_pb2, runtime_service_pb2

SERVICE = "agentrunner.v1.RuntimeService"
Context = grpc.aio.ServicerContext[Any, Any]


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class SlotCall:
    """A run on one of the runtime's slot streams, with the surface of a dialed `Run` call the kit uses."""

    def __init__(
        self, context: Context, claimed: runtime_service_pb2.ClaimedRun, timeout: float | None
    ) -> None:
        loop = asyncio.get_running_loop()
        self.context = context
        self.claimed = claimed
        #: how the kit ends the stream (None: OK, after the runtime's end)
        self.ending: asyncio.Future[tuple[grpc.StatusCode, str] | None] = loop.create_future()
        self._error: BaseException | None = None
        self._cancelled = False
        self._terminal = False
        self._timer = loop.call_later(timeout, self._expire) if timeout is not None else None

    def _end(self, outcome: tuple[grpc.StatusCode, str] | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if not self.ending.done():
            self.ending.set_result(outcome)

    def _expire(self) -> None:
        if not self.ending.done():
            self._error = _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            self._end((grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))

    def cancel(self) -> bool:
        """Cancels the run on its slot stream (as `grpc.aio.Call.cancel`): False when it already ended."""
        if self.ending.done():
            return False
        self._cancelled = True
        self._end((grpc.StatusCode.CANCELLED, "the host cancelled the run"))
        return True

    def cancelled(self) -> bool:
        """Whether the run was cancelled (as `grpc.aio.Call.cancelled`)."""
        return self._cancelled

    def done(self) -> bool:
        """Whether the run's stream ended (as `grpc.aio.Call.done`)."""
        return self.ending.done()

    async def read(self) -> Any:
        """The next `RunResponse` the runtime sent up, or `grpc.aio.EOF` (as `UnaryStreamCall.read`)."""
        if self._cancelled:
            raise asyncio.CancelledError()
        if self._error is not None:
            raise self._error
        try:
            message = await self.context.read()
        except Exception:
            if self._cancelled:
                raise asyncio.CancelledError() from None
            if self._error is None:
                self._error = _rpc_error(grpc.StatusCode.UNAVAILABLE, "the runtime's slot stream broke")
                self._end(None)
            raise self._error from None
        if self._error is not None:
            raise self._error
        if message is grpc.aio.EOF:
            self._end(None)
            return grpc.aio.EOF
        if message.WhichOneof("message") != "response":
            return None
        if is_terminal(message.response.result):
            self._terminal = True
        return message.response

    def __aiter__(self) -> AsyncIterator[runner_service_pb2.RunResponse]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[runner_service_pb2.RunResponse]:
        while (message := await self.read()) is not grpc.aio.EOF:
            if message is not None:
                yield message


class RuntimeDouble:
    """A minimal `RuntimeService` for one runtime (see the module docstring)."""

    def __init__(self) -> None:
        self.hello: runtime_service_pb2.RuntimeHello | None = None
        self.connection_id = secrets.token_hex(8)
        self.heartbeats = 0
        self.connected = asyncio.Event()
        self._slots: asyncio.Queue[tuple[Context, asyncio.Future[SlotCall | None]]] = asyncio.Queue()
        #: set when the kit is done: the session ends with OK (not cancelled by the server's stop)
        self._closing = asyncio.Event()

    def handler(self) -> grpc.GenericRpcHandler:
        """`RuntimeService` for the kit's server (the same one that serves its ProxyService: a runtime
        calls the host it dialed)."""
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "Connect": grpc.stream_stream_rpc_method_handler(
                self._connect,
                request_deserializer=runtime_service_pb2.ConnectRequest.FromString,
                response_serializer=runtime_service_pb2.ConnectResponse.SerializeToString,
            ),
            "ClaimRun": grpc.stream_stream_rpc_method_handler(
                self._claim,
                request_deserializer=runtime_service_pb2.ClaimRunRequest.FromString,
                response_serializer=runtime_service_pb2.ClaimRunResponse.SerializeToString,
            ),
        }
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    def release(self) -> None:
        """Gives every waiting slot back and ends the session (the kit is done)."""
        self._closing.set()
        while not self._slots.empty():
            _, future = self._slots.get_nowait()
            if not future.done():
                future.set_result(None)

    async def _connect(self, request_iterator: Any, context: Context) -> None:
        first = await context.read()
        if first is grpc.aio.EOF or first.WhichOneof("message") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message of Connect is hello")
        self.hello = first.hello
        welcome = runtime_service_pb2.RuntimeWelcome(
            connection_id=self.connection_id, runner_ids=[m.id for m in first.hello.runners]
        )
        welcome.heartbeat_interval.FromMilliseconds(500)
        welcome.offline_after.FromSeconds(30)
        await context.write(runtime_service_pb2.ConnectResponse(welcome=welcome))
        self.connected.set()
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            while True:
                read = asyncio.ensure_future(context.read())
                await asyncio.wait({read, closing}, return_when=asyncio.FIRST_COMPLETED)
                if not read.done():
                    read.add_done_callback(lambda t: t.cancelled() or t.exception())
                    return  # (the kit is done: the session ends OK)
                message = read.result()
                if message is grpc.aio.EOF:
                    return
                if message.WhichOneof("message") == "heartbeat":
                    self.heartbeats += 1
        finally:
            closing.cancel()

    async def _claim(self, request_iterator: Any, context: Context) -> None:
        first = await context.read()
        if first is grpc.aio.EOF or first.ready.connection_id != self.connection_id:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "unknown connection")
        future: asyncio.Future[SlotCall | None] = asyncio.get_running_loop().create_future()
        await self._slots.put((context, future))
        call = await future
        if call is None:
            return
        await context.write(runtime_service_pb2.ClaimRunResponse(run=call.claimed))
        outcome = await call.ending
        if outcome is not None:
            await context.abort(*outcome)

    async def take_slot(self, limit: float) -> tuple[Context, asyncio.Future[SlotCall | None]]:
        """The next waiting slot stream (the runtime reopens one after each run)."""
        while True:
            context, future = await asyncio.wait_for(self._slots.get(), limit)
            if not future.done() and not context.done():
                return context, future


class ConnectedRunner:
    """What the runner kit asks of a runner, answered by a runtime connected to `RuntimeDouble`."""

    def __init__(self, double: RuntimeDouble) -> None:
        self.double = double

    def manifests(self) -> runner_service_pb2.ListRunnersResponse:
        """The manifests the runtime registered in its hello (what `ListRunners` answers when dialed)."""
        hello = self.double.hello
        return runner_service_pb2.ListRunnersResponse(
            runners=list(hello.runners) if hello is not None else []
        )

    def describe(self, runner_id: str) -> runner_service_pb2.DescribeRunnerResponse:
        """One registered manifest by id or name (what `DescribeRunner` answers when dialed)."""
        for manifest in self.manifests().runners:
            if runner_id in (manifest.id, manifest.name):
                return runner_service_pb2.DescribeRunnerResponse(runner=manifest)
        raise NotFoundError(f"no runner {runner_id!r} on this runtime")

    async def run(self, request: runner_service_pb2.RunRequest, call_timeout: float | None) -> SlotCall:
        """Places the request on a waiting slot (waiting up to 10 s for one) and returns its call."""
        context, future = await self.double.take_slot(10.0)
        call = SlotCall(context, runtime_service_pb2.ClaimedRun(request=request), call_timeout)
        future.set_result(call)
        return call
