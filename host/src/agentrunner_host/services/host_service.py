"""`HostService`: thin gRPC adapter over `run.RunService` (all behaviour lives there)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc
import structlog
from google.protobuf import message_factory

from agentrunner.errors import AgentRunnerError, InvalidArgumentError, RuntimeFailureError, abort_with
from agentrunner.protocol import INTERACTION_SUBMITTED_EVENT
from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from agentrunner_host.context_parity import check_envelope
from agentrunner_host.delivery.interactions import InteractionService
from agentrunner_host.registry import RunnerRegistry
from agentrunner_host.run.service import RunService, Update
from agentrunner_host.services.wire import UPDATE_STREAMS, serialize_update
from agentrunner_host.store.ledger import RunQuery, SqlRunLedger, run_to_proto

log = structlog.get_logger("agentrunner_host.host_service")


@contextlib.asynccontextmanager
async def _status_on_error(context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[None]:
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
        runs: RunService,
        registry: RunnerRegistry,
        interactions: InteractionService | None = None,
        ledger: SqlRunLedger | None = None,
    ) -> None:
        self.runs = runs
        self.registry = registry
        self.interactions = interactions
        self.ledger = ledger

    # `SubmitInteraction` and `AttachRun` answer with `Update`s: their response types have exactly
    # `Update`'s fields and `add_host_service` serializes them as they are, which the generated base
    # class's signatures cannot say (hence the `override` ignores).
    async def Run(
        self,
        request: host_service_pb2.HostServiceRunRequest,
        context: grpc.aio.ServicerContext[host_service_pb2.HostServiceRunRequest, Update],
    ) -> AsyncGenerator[Update, None]:
        async with _status_on_error(context):
            if request.event.event_type == INTERACTION_SUBMITTED_EVENT:
                raise InvalidArgumentError(
                    "interaction.submitted events are created by SubmitInteraction only",
                    field="event.event_type",
                )
            check_envelope(request.event)
            metadata = context.invocation_metadata() or ()
            async with contextlib.aclosing(await self.runs.open(request, metadata)) as updates:
                async for update in updates:
                    yield update

    async def SubmitInteraction(  # type: ignore[override]
        self,
        request: host_service_pb2.SubmitInteractionRequest,
        context: grpc.aio.ServicerContext[host_service_pb2.SubmitInteractionRequest, Update],
    ) -> AsyncGenerator[Update, None]:
        """Yields `Update`s: `SubmitInteractionResponse` has the same fields (`add_host_service`)."""
        async with _status_on_error(context):
            if self.interactions is None:
                raise RuntimeFailureError("interactions are not available on this host")
            metadata = context.invocation_metadata() or ()
            async with contextlib.aclosing(self.interactions.submit(request, metadata)) as updates:
                async for update in updates:
                    yield update

    async def AttachRun(  # type: ignore[override]
        self,
        request: host_service_pb2.AttachRunRequest,
        context: grpc.aio.ServicerContext[host_service_pb2.AttachRunRequest, Update],
    ) -> AsyncGenerator[Update, None]:
        """Yields `Update`s: `AttachRunResponse` has the same fields (`add_host_service`)."""
        async with _status_on_error(context):
            if not request.run_id:
                raise InvalidArgumentError("run_id is required", field="run_id")
            follow = self.runs.follow(request.run_id, request.after_sequence)
            async with contextlib.aclosing(follow) as updates:
                async for update in updates:
                    yield update

    async def GetRun(
        self,
        request: host_service_pb2.GetRunRequest,
        context: grpc.aio.ServicerContext[host_service_pb2.GetRunRequest, host_service_pb2.GetRunResponse],
    ) -> host_service_pb2.GetRunResponse:
        try:
            record = await self.runs.get_run(request.run_id)
        except AgentRunnerError as err:
            await abort_with(context, err)
        return host_service_pb2.GetRunResponse(run=run_to_proto(record))

    async def CancelRun(
        self,
        request: host_service_pb2.CancelRunRequest,
        context: grpc.aio.ServicerContext[
            host_service_pb2.CancelRunRequest, host_service_pb2.CancelRunResponse
        ],
    ) -> host_service_pb2.CancelRunResponse:
        try:
            record = await self.runs.cancel_run(request.run_id, request.reason)
        except AgentRunnerError as err:
            await abort_with(context, err)
        return host_service_pb2.CancelRunResponse(run=run_to_proto(record))

    async def ListRuns(
        self,
        request: host_service_pb2.ListRunsRequest,
        context: grpc.aio.ServicerContext[
            host_service_pb2.ListRunsRequest, host_service_pb2.ListRunsResponse
        ],
    ) -> host_service_pb2.ListRunsResponse:
        try:
            if self.ledger is None:
                raise RuntimeFailureError("run listing is not available on this host")
            query = RunQuery(
                statuses=tuple(request.statuses),
                agent_id=request.agent_id,
                runner_id=request.runner_id,
                conversation_id=request.conversation_id,
                binding_id=request.binding_id,
            )
            records, token = await self.ledger.search_runs(query, request.page_token, request.page_size)
        except AgentRunnerError as err:
            await abort_with(context, err)
        return host_service_pb2.ListRunsResponse(
            runs=[run_to_proto(r) for r in records], next_page_token=token
        )

    async def ListRunners(
        self,
        request: host_service_pb2.HostServiceListRunnersRequest,
        context: grpc.aio.ServicerContext[
            host_service_pb2.HostServiceListRunnersRequest, host_service_pb2.HostServiceListRunnersResponse
        ],
    ) -> host_service_pb2.HostServiceListRunnersResponse:
        out = host_service_pb2.HostServiceListRunnersResponse()
        for runner in self.registry.runners():
            endpoint = self.registry.endpoints[runner.endpoint_id]
            item = out.runners.add(
                endpoint_id=runner.endpoint_id, address=runner.address, available=endpoint.available
            )
            item.manifest.CopyFrom(runner.manifest)
            item.refresh_time.FromDatetime(runner.refreshed_at)
        for endpoint_id, endpoint in sorted(self.registry.endpoints.items()):
            status = out.endpoints.add(
                endpoint_id=endpoint_id,
                address=endpoint.config.address,
                available=endpoint.available,
                last_error=endpoint.last_error,
                runner_ids=endpoint.runner_ids if endpoint.available else [],
            )
            if endpoint.checked_at is not None:
                status.check_time.FromDatetime(endpoint.checked_at)
            if endpoint.succeeded_at is not None:
                status.success_time.FromDatetime(endpoint.succeeded_at)
        return out


def add_host_service(servicer: HostServicer, server: grpc.aio.Server) -> None:
    """What `add_HostServiceServicer_to_server` registers, with `UPDATE_STREAMS` answering through
    `serialize_update`: one handler per method of the service, by its streaming kind."""
    service = host_service_pb2.DESCRIPTOR.services_by_name["HostService"]
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        request_type = message_factory.GetMessageClass(method.input_type)
        response_type = message_factory.GetMessageClass(method.output_type)
        serializer = serialize_update if method.name in UPDATE_STREAMS else response_type.SerializeToString
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=request_type.FromString,
            response_serializer=serializer,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)
