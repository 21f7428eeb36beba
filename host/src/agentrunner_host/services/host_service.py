"""`HostService`: thin gRPC adapter over the orchestrator (all behaviour lives there)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc
import structlog
from google.protobuf import timestamp_pb2

from agentrunner.errors import AgentRunnerError, InvalidArgumentError, RuntimeFailureError, abort_with
from agentrunner.protocol import INTERACTION_SUBMITTED_EVENT
from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from agentrunner_host.context_parity import check_envelope
from agentrunner_host.delivery.interactions import InteractionService
from agentrunner_host.orchestrator import Orchestrator, Update
from agentrunner_host.registry import RunnerRegistry
from agentrunner_host.store.ledger import run_to_proto

log = structlog.get_logger("agentrunner_host.host_service")


@contextlib.asynccontextmanager
async def _status_on_error(context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
    """Typed errors raised before or while a stream is written become the call's status (streams are
    async generators: gRPC writes what they yield, one Python level less per message than
    `context.write` from a coroutine)."""
    try:
        yield
    except AgentRunnerError as err:
        await abort_with(context, err)
    except Exception:
        log.exception("host_service.stream_failed")
        await abort_with(context, RuntimeFailureError("the host failed while streaming this run"))


class HostServicer(host_service_pb2_grpc.HostServiceServicer):
    def __init__(
        self,
        orchestrator: Orchestrator,
        registry: RunnerRegistry,
        interactions: InteractionService | None = None,
    ) -> None:
        self.orchestrator = orchestrator
        self.registry = registry
        self.interactions = interactions

    async def Run(
        self, request: host_service_pb2.HostServiceRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Update | bytes]:  # type: ignore[override]
        async with _status_on_error(context):
            if request.event.event_type == INTERACTION_SUBMITTED_EVENT:
                raise InvalidArgumentError(
                    "interaction.submitted events are created by SubmitInteraction only",
                    field="event.event_type",
                )
            check_envelope(request.event)
            metadata = context.invocation_metadata() or ()
            async with contextlib.aclosing(self.orchestrator.run(request, metadata, wire=True)) as updates:
                async for update in updates:
                    yield update

    async def SubmitInteraction(
        self, request: host_service_pb2.SubmitInteractionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Update]:  # type: ignore[override]
        """Yields `Update`s: `SubmitInteractionResponse` has the same fields (`add_host_service`)."""
        async with _status_on_error(context):
            if self.interactions is None:
                raise RuntimeFailureError("interactions are not available on this host")
            metadata = context.invocation_metadata() or ()
            async with contextlib.aclosing(self.interactions.submit(request, metadata)) as updates:
                async for update in updates:
                    yield update

    async def AttachRun(
        self, request: host_service_pb2.AttachRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Update]:  # type: ignore[override]
        """Yields `Update`s: `AttachRunResponse` has the same fields (`add_host_service`)."""
        async with _status_on_error(context):
            if not request.run_id:
                raise InvalidArgumentError("run_id is required", field="run_id")
            follow = self.orchestrator.follow(request.run_id, request.after_sequence)
            async with contextlib.aclosing(follow) as updates:
                async for update in updates:
                    yield update

    async def GetRun(
        self, request: host_service_pb2.GetRunRequest, context: grpc.aio.ServicerContext
    ) -> host_service_pb2.GetRunResponse:  # type: ignore[override]
        try:
            record = await self.orchestrator.get_run(request.run_id)
        except AgentRunnerError as err:
            await abort_with(context, err)
        return host_service_pb2.GetRunResponse(run=run_to_proto(record))

    async def CancelRun(
        self, request: host_service_pb2.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> host_service_pb2.CancelRunResponse:  # type: ignore[override]
        try:
            record = await self.orchestrator.cancel_run(request.run_id, request.reason)
        except AgentRunnerError as err:
            await abort_with(context, err)
        return host_service_pb2.CancelRunResponse(run=run_to_proto(record))

    async def ListRunners(
        self, request: host_service_pb2.HostServiceListRunnersRequest, context: grpc.aio.ServicerContext
    ) -> host_service_pb2.HostServiceListRunnersResponse:  # type: ignore[override]
        out = host_service_pb2.HostServiceListRunnersResponse()
        for runner in self.registry.runners():
            endpoint = self.registry.endpoints[runner.endpoint_id]
            item = out.runners.add(
                endpoint_id=runner.endpoint_id, address=runner.address, available=endpoint.available
            )
            item.manifest.CopyFrom(runner.manifest)
            ts = timestamp_pb2.Timestamp()
            ts.FromDatetime(runner.refreshed_at)
            item.refresh_time.CopyFrom(ts)
        return out


#: streams whose response has exactly `HostServiceRunResponse`'s fields (the `Update` the orchestrator
#: yields): they send updates as they are, without a copy into their own response type per message
#: (tests/host/test_wire_result.py checks the three messages stay identical on the wire)
UPDATE_STREAMS = ("Run", "AttachRun", "SubmitInteraction")


def _serialize_update(message: Update | bytes) -> bytes:
    """The response serializer of `UPDATE_STREAMS`: an `Update`'s bytes; updates the orchestrator already
    serialized (`Run`, `wire=True`) go as they are."""
    return message if type(message) is bytes else message.SerializeToString()


class _Handlers:
    """Stands in for a server to receive the generated code's method handlers."""

    handlers: dict[str, grpc.RpcMethodHandler]

    def add_generic_rpc_handlers(self, _handlers: object) -> None:
        pass

    def add_registered_method_handlers(
        self, _service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.handlers = handlers


def add_host_service(servicer: HostServicer, server: grpc.aio.Server) -> None:
    """`add_HostServiceServicer_to_server`, with `UPDATE_STREAMS` answering through `_serialize_update`."""
    capture = _Handlers()
    host_service_pb2_grpc.add_HostServiceServicer_to_server(servicer, capture)
    handlers = dict(capture.handlers)
    for method in UPDATE_STREAMS:
        handlers[method] = handlers[method]._replace(response_serializer=_serialize_update)  # type: ignore[attr-defined]
    name = host_service_pb2.DESCRIPTOR.services_by_name["HostService"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    server.add_registered_method_handlers(name, handlers)
