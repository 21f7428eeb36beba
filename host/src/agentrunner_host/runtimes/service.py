"""`RuntimeService`: the gRPC side of runtimes that dial in (`Connect` sessions, `ClaimRun` slots).

Thin: the handlers authenticate (`RuntimeGate`), read and write the streams and hand everything else to
`RuntimeRegistry`. Both RPCs are coroutines that read with `context.read()` and write with
`context.write()`, so the host can end a stream with a status of its choosing while a read is pending
(a run's results are read by the run's own reader through `RuntimeCall`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import structlog

from agentrunner.errors import (
    AgentRunnerError,
    CredentialsInvalidError,
    FailedPreconditionError,
    InvalidArgumentError,
    abort_with,
    bounded,
)
from agentrunner.v1 import runtime_service_pb2
from agentrunner_host.runtimes import metrics
from agentrunner_host.runtimes.calls import Slot
from agentrunner_host.runtimes.gate import RuntimeClient, RuntimeGate
from agentrunner_host.runtimes.registry import RuntimeRegistry
from agentrunner_host.runtimes.session import Connection

log = structlog.get_logger("agentrunner_host.runtimes.service")

SERVICE_NAME = runtime_service_pb2.DESCRIPTOR.services_by_name["RuntimeService"].full_name
Context = grpc.aio.ServicerContext[Any, Any]


def _lenient(cls: Any) -> Callable[[bytes], Any]:
    """A deserializer that answers None for bytes that do not decode (the handler refuses them)."""

    def deserialize(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception:
            return None

    return deserialize


class RuntimeServicer:
    """The `RuntimeService` handlers (see the module docstring)."""

    def __init__(self, registry: RuntimeRegistry, gate: RuntimeGate) -> None:
        self.registry = registry
        self.gate = gate

    # -- Connect ---------------------------------------------------------------------------------------
    async def Connect(self, request_iterator: Any, context: Context) -> None:
        peer = context.peer()
        hello = runtime_service_pb2.RuntimeHello()
        client: RuntimeClient | None = None
        try:
            hello = await self._hello(context)
            client = self.gate.authenticate(context)
            conn = await self.registry.connect(hello, client, peer)
        except AgentRunnerError as err:
            await self._refuse(context, err, hello.runtime_id, client, peer)
        try:
            await context.write(self.registry.welcome(conn))
            await self._session(conn, context)
        finally:
            kind, reason = "disconnected", "the connection was lost"
            if conn.closing.done():
                _, reason, kind = conn.closing.result()
            await self.registry.disconnected(conn, kind, reason)

    async def _hello(self, context: Context) -> runtime_service_pb2.RuntimeHello:
        timeout = self.registry.config.hello_timeout_seconds
        try:
            first = await asyncio.wait_for(context.read(), timeout)
        except TimeoutError:
            raise InvalidArgumentError(f"no hello within {timeout:g} s", field="hello") from None
        if first is grpc.aio.EOF or first is None or first.WhichOneof("message") != "hello":
            raise InvalidArgumentError("the first message of Connect is hello", field="hello")
        hello: runtime_service_pb2.RuntimeHello = first.hello
        return hello

    async def _refuse(
        self,
        context: Context,
        err: AgentRunnerError,
        runtime_id: str,
        client: RuntimeClient | None,
        peer: str,
    ) -> None:
        client_id = client.client_id if client is not None else ""
        metrics.REFUSALS.labels(err.reason).inc()
        log.warning(
            "runtime.refused",
            runtime_id=bounded(runtime_id, 128),
            client=client_id,
            peer=peer,
            reason=err.reason,
            message=err.message,
        )
        await self.registry.store.refused(
            bounded(runtime_id, 128), client_id, peer, f"{err.reason}: {bounded(err.message, 400)}"
        )
        await abort_with(context, err)

    async def _session(self, conn: Connection, context: Context) -> None:
        """Writes the host's messages until the session ends; the runtime's are read by `_read_session`."""
        reader = asyncio.create_task(self._read_session(conn, context), name=f"runtime-{conn.runtime_id}")
        try:
            while True:
                get = asyncio.ensure_future(conn.outbox.get())
                waits: list[asyncio.Future[Any]] = [get, conn.closing]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if get.done():
                    await context.write(get.result())
                    continue
                get.cancel()
                code, details, _ = conn.closing.result()
                if code != grpc.StatusCode.OK:
                    await context.abort(code, details)
                return
        finally:
            reader.cancel()

    async def _read_session(self, conn: Connection, context: Context) -> None:
        registry = self.registry
        while True:
            try:
                message = await context.read()
            except Exception:  # the stream ended under the read (aborted, connection gone)
                conn.close(grpc.StatusCode.OK, "the connection was lost", "disconnected")
                return
            if message is grpc.aio.EOF:
                # a killed runtime's stream reads EOF too, and its handler is cancelled right after:
                # give that a moment, so the audit says which of the two it was
                await asyncio.sleep(0.25)
                conn.close(grpc.StatusCode.OK, "the runtime ended its session", "disconnected")
                return
            kind = message.WhichOneof("message") if message is not None else None
            if kind == "heartbeat":
                registry.heartbeat(conn, message.heartbeat)
            elif kind == "drain":
                registry.leave(conn, message.drain.reason or "the runtime drains itself")
            elif message is None or kind == "hello":
                conn.close(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "a Connect message that is not a heartbeat or a drain",
                    "disconnected",
                )
                return
            # (kinds this host does not know are ignored)

    # -- ClaimRun --------------------------------------------------------------------------------------
    async def ClaimRun(self, request_iterator: Any, context: Context) -> None:
        try:
            client = self.gate.authenticate(context)
            first = await context.read()
            if first is grpc.aio.EOF or first is None or first.WhichOneof("message") != "ready":
                raise InvalidArgumentError("the first message of ClaimRun is ready", field="ready")
            conn = self.registry.by_connection.get(first.ready.connection_id)
            if conn is None or not conn.alive:
                raise FailedPreconditionError(
                    "that connection is not connected (its Connect stream ended): connect again",
                    metadata={"connectionId": bounded(first.ready.connection_id, 64)},
                )
            if conn.client_id != client.client_id:
                raise CredentialsInvalidError("the connection belongs to other runtime credentials")
        except AgentRunnerError as err:
            await abort_with(context, err)
        slot = Slot(conn, context)
        if not self.registry.add_slot(conn, slot):
            return  # (the runtime takes no runs now: the slot is given back)
        try:
            call = await slot.assigned
        except asyncio.CancelledError:
            self.registry.drop_slot(conn, slot)
            placed = (
                slot.assigned.result() if slot.assigned.done() and not slot.assigned.cancelled() else None
            )
            if placed is not None:  # placed in the very turn the connection went
                placed.lost("the runtime's connection was lost")
                placed.handler_gone.set_result(None)
            raise
        if call is None:
            return
        try:
            await context.write(runtime_service_pb2.ClaimRunResponse(run=call.claimed))
            outcome = await call.ending
        except asyncio.CancelledError:
            call.lost("the runtime's connection was lost")
            raise
        except Exception as exc:
            call.lost(f"the run could not be sent to the runtime ({type(exc).__name__})")
            return
        finally:
            if not call.handler_gone.done():
                call.handler_gone.set_result(None)
        if outcome is not None:
            await context.abort(*outcome)

    # -- registration ----------------------------------------------------------------------------------
    def add_to_server(self, server: grpc.aio.Server) -> None:
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "Connect": grpc.stream_stream_rpc_method_handler(
                self.Connect,
                request_deserializer=_lenient(runtime_service_pb2.ConnectRequest),
                response_serializer=runtime_service_pb2.ConnectResponse.SerializeToString,
            ),
            "ClaimRun": grpc.stream_stream_rpc_method_handler(
                self.ClaimRun,
                request_deserializer=_lenient(runtime_service_pb2.ClaimRunRequest),
                response_serializer=runtime_service_pb2.ClaimRunResponse.SerializeToString,
            ),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
        server.add_registered_method_handlers(SERVICE_NAME, handlers)
