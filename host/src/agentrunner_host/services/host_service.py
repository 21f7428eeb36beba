"""`HostService`: the gRPC adapter over transport-neutral services (all behaviour lives there).

Each call is admitted first: its request passed the boundary rules in the deserializer
(`boundary.request_deserializer`), its client is authenticated and its operation checked
(`ClientGate`); then a service does the work: `RunService` (runs), `RunAccess` (what the client may
reach), `RunRecords` (run records, cancels, pages of runs, artifact bodies), `InteractionService`
(answers), the registry's listing. A method answers its response (unary) or the stream it opened
(server streaming); `add_host_service` serves each through one of two wrappers, `_unary` and
`_stream`, where a typed error becomes the call's status with its `google.rpc.ErrorInfo`
(`agentrunner.errors.abort_with`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog
from google.protobuf import message_factory

from agentrunner.errors import AgentRunnerError, RuntimeFailureError, abort_with
from agentrunner.v1 import host_service_pb2
from agentrunner_host.auth.clients import ClientGate
from agentrunner_host.delivery.interactions import InteractionService
from agentrunner_host.ports import UpdateStream
from agentrunner_host.registry.endpoints import RunnerRegistry
from agentrunner_host.registry.listing import list_runners
from agentrunner_host.run.access import TRUSTED, Caller, RunAccess
from agentrunner_host.run.records import RunRecords
from agentrunner_host.run.service import RunService, Update
from agentrunner_host.services.wire import UPDATE_STREAMS, serialize_update
from agentrunner_host.wire.boundary import admit, request_deserializer

log = structlog.get_logger("agentrunner_host.host_service")

RequestT = TypeVar("RequestT")
ResponseT = TypeVar("ResponseT")
Context = grpc.aio.ServicerContext[Any, Any]


def _unary(
    method: Callable[[RequestT, Context], Awaitable[ResponseT]],
) -> Callable[[RequestT, Context], Awaitable[ResponseT]]:
    """A unary method as gRPC serves it: a typed error becomes the call's status."""

    async def handler(request: RequestT, context: Context) -> ResponseT:
        try:
            return await method(request, context)
        except AgentRunnerError as err:
            await abort_with(context, err)

    return handler


def _stream(
    method: Callable[[RequestT, Context], Awaitable[UpdateStream[ResponseT]]],
) -> Callable[[RequestT, Context], AsyncGenerator[ResponseT, None]]:
    """A streaming method as gRPC serves it: the stream it opened, yielded as it is (gRPC writes what
    an async generator yields: one Python level per message, no `context.write`) and closed on every
    path; a typed error raised before or while it streams becomes the call's status, any other error
    INTERNAL (`RuntimeFailureError`, logged)."""

    async def handler(request: RequestT, context: Context) -> AsyncGenerator[ResponseT, None]:
        try:
            stream = await method(request, context)
            async with contextlib.aclosing(stream) as items:
                async for item in items:
                    yield item
        except AgentRunnerError as err:
            await abort_with(context, err)
        except Exception:
            log.exception("host_service.stream_failed")
            await abort_with(context, RuntimeFailureError("the host failed while streaming this run"))

    return handler


class HostServicer:
    """The methods of `HostService`, served by `add_host_service` (not by the generated
    `add_HostServiceServicer_to_server`: a streaming method here answers the stream it opened)."""

    def __init__(
        self,
        runs: RunService,
        registry: RunnerRegistry,
        interactions: InteractionService | None = None,
        gate: ClientGate | None = None,
        access: RunAccess | None = None,
        records: RunRecords | None = None,
    ) -> None:
        self.runs = runs
        self.registry = registry
        self.interactions = interactions
        #: None: every caller is trusted (in-process use and tests of the run path)
        self.gate = gate
        self.access = access or RunAccess(runs, runs.resolver, interactions.store if interactions else None)
        #: (without the host's stores: no run listing, no artifacts)
        self.records = records or RunRecords(self.access, runs)

    async def _admit(self, context: Context, method: str, operation: str) -> Caller:
        """The call's client, authenticated and allowed `operation`, with its audited refusal."""
        gate = self.gate
        if gate is None:
            return TRUSTED
        principal = await gate.admit(context, method, operation)

        async def refuse(message: str, *, resource: str, run_id: str = "") -> None:
            await gate.refuse(context, principal, method, message, resource=resource, run_id=run_id)

        return Caller(principal, refuse)

    # -- streams: `Run`, `SubmitInteraction` and `AttachRun` answer with `Update`s (`add_host_service`)
    async def Run(
        self, request: host_service_pb2.HostServiceRunRequest, context: Context
    ) -> UpdateStream[Update]:
        caller = await self._admit(context, "Run", "run")
        request = admit(request)
        resolution = await self.access.admit_event(caller, request)
        return await self.runs.open(request, context.invocation_metadata() or (), resolution)

    async def SubmitInteraction(
        self, request: host_service_pb2.SubmitInteractionRequest, context: Context
    ) -> AsyncGenerator[Update, None]:
        caller = await self._admit(context, "SubmitInteraction", "interact")
        request = admit(request)
        if self.interactions is None:
            raise RuntimeFailureError("interactions are not available on this host")
        await self.access.answerable_interaction(caller, request.interaction_id)
        return self.interactions.submit(request, context.invocation_metadata() or ())

    async def AttachRun(
        self, request: host_service_pb2.AttachRunRequest, context: Context
    ) -> AsyncGenerator[Update, None]:
        caller = await self._admit(context, "AttachRun", "attach")
        request = admit(request)
        await self.access.visible_run(caller, request.run_id)
        return self.runs.follow(request.run_id, request.after_sequence)

    async def DownloadArtifact(
        self, request: host_service_pb2.HostServiceDownloadArtifactRequest, context: Context
    ) -> AsyncGenerator[host_service_pb2.HostServiceDownloadArtifactResponse, None]:
        """The artifact's reference first, then its body in chunks (a client fetching a file a runner
        attached to an answer). A client needs the `get` operation and must see the artifact's run (an
        artifact of no run: a client that sees every run)."""
        caller = await self._admit(context, "DownloadArtifact", "get")
        request = admit(request)
        return await self.records.download_artifact(caller, request.artifact_id)

    # -- unary -----------------------------------------------------------------------------------------
    async def GetRun(
        self, request: host_service_pb2.GetRunRequest, context: Context
    ) -> host_service_pb2.GetRunResponse:
        caller = await self._admit(context, "GetRun", "get")
        return await self.records.get_run(caller, admit(request).run_id)

    async def CancelRun(
        self, request: host_service_pb2.CancelRunRequest, context: Context
    ) -> host_service_pb2.CancelRunResponse:
        caller = await self._admit(context, "CancelRun", "cancel")
        request = admit(request)
        return await self.records.cancel_run(caller, request.run_id, request.reason)

    async def ListRuns(
        self, request: host_service_pb2.ListRunsRequest, context: Context
    ) -> host_service_pb2.ListRunsResponse:
        caller = await self._admit(context, "ListRuns", "list_runs")
        return await self.records.list_runs(caller, admit(request))

    async def ListRunners(
        self, request: host_service_pb2.HostServiceListRunnersRequest, context: Context
    ) -> host_service_pb2.HostServiceListRunnersResponse:
        await self._admit(context, "ListRunners", "list_runners")
        admit(request)
        return list_runners(self.registry)


def add_host_service(servicer: HostServicer, server: grpc.aio.Server) -> None:
    """What `add_HostServiceServicer_to_server` would register: one handler per method of the service,
    by its streaming kind, each method served through `_unary` or `_stream`, and `UPDATE_STREAMS`
    answering through `serialize_update`."""
    service = host_service_pb2.DESCRIPTOR.services_by_name["HostService"]
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        request_type = message_factory.GetMessageClass(method.input_type)
        response_type = message_factory.GetMessageClass(method.output_type)
        serializer = serialize_update if method.name in UPDATE_STREAMS else response_type.SerializeToString
        implementation = getattr(servicer, method.name)
        make: Any = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            _stream(implementation) if method.server_streaming else _unary(implementation),
            # requests that break the boundary rules arrive as `Refused` (answered by `admit`)
            request_deserializer=request_deserializer(request_type),
            response_serializer=serializer,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)
