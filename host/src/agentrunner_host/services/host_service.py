"""`HostService`: thin gRPC adapter over `run.RunService` (all behaviour lives there).

Each call is admitted first: its request passed the boundary rules in the deserializer
(`boundary.request_deserializer`), its client is authenticated and its scopes checked (`ClientGate`);
then `RunService` does the work.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc
import structlog
from google.protobuf import message_factory

from agentrunner.errors import (
    AgentRunnerError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    RuntimeFailureError,
    abort_with,
)
from agentrunner.protocol import INTERACTION_SUBMITTED_EVENT
from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from agentrunner_host.auth.clients import ClientGate, Principal
from agentrunner_host.delivery.interactions import InteractionService
from agentrunner_host.ports import TERMINAL_STATUSES, RunRecord, utcnow
from agentrunner_host.registry.bindings import EventKey, Resolution
from agentrunner_host.registry.endpoints import RunnerRegistry
from agentrunner_host.run.context_parity import check_envelope
from agentrunner_host.run.service import RunService, Update
from agentrunner_host.services.runtime_admin import RuntimeAdmin
from agentrunner_host.services.wire import UPDATE_STREAMS, serialize_update
from agentrunner_host.store.artifacts import ArtifactStore
from agentrunner_host.store.ledger import SqlRunLedger
from agentrunner_host.store.ledger_reads import RunQuery
from agentrunner_host.store.ledger_rows import run_to_proto
from agentrunner_host.wire.boundary import admit, request_deserializer

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


class HostServicer(RuntimeAdmin, host_service_pb2_grpc.HostServiceServicer):
    def __init__(
        self,
        runs: RunService,
        registry: RunnerRegistry,
        interactions: InteractionService | None = None,
        gate: ClientGate | None = None,
        ledger: SqlRunLedger | None = None,
        artifacts: ArtifactStore | None = None,
        page_max_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.runs = runs
        #: byte cap of one `ListRuns` page (sent in the response, so clients know why a page ended)
        self.page_max_bytes = page_max_bytes
        self.registry = registry
        self.interactions = interactions
        self.ledger = ledger
        #: None: every caller is trusted (in-process use and tests of the run path)
        self.gate = gate
        self.artifacts = artifacts

    # -- admission -------------------------------------------------------------------------------------
    async def _admit(
        self, context: grpc.aio.ServicerContext[Any, Any], method: str, operation: str, run_id: str = ""
    ) -> Principal | None:
        if self.gate is None:
            return None
        return await self.gate.admit(context, method, operation, run_id=run_id)

    async def _visible_run(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        principal: Principal | None,
        method: str,
        run_id: str,
    ) -> RunRecord:
        """The run, when the caller may see it. A run it may not see is refused like one that does
        not exist would be for it (PERMISSION_DENIED either way: existence is not disclosed)."""
        if not run_id:
            raise InvalidArgumentError("run_id is required", field="run_id")
        if principal is None or self.gate is None:
            return await self.runs.get_run(run_id)
        record: RunRecord | None
        try:
            record = await self.runs.get_run(run_id)
        except NotFoundError:
            if principal.bots == "*" and principal.agents == "*":
                raise  # a client that may see every run learns nothing from NOT_FOUND
            record = None
        if record is None or not principal.sees(record):
            await self.gate.refuse(
                context,
                principal,
                method,
                f"client {principal.client_id!r} may not see run {run_id!r}",
                resource=f"run:{run_id}",
                run_id=run_id,
            )
        assert record is not None
        return record

    async def _authorize_event(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        principal: Principal | None,
        request: host_service_pb2.HostServiceRunRequest,
    ) -> Resolution | None:
        """The bot and the agent the event would reach must be ones the client may use (the binding is
        resolved here for the check and handed to `RunService.open`, which resolves it itself when there
        is no gate). None: no gate."""
        if principal is None or self.gate is None:
            return None
        event = request.event
        conv = event.conversation
        key = EventKey(
            event.event_type or "message.received",
            bot_id=event.bot_id or conv.bot_id,
            workspace_id=event.workspace_id or conv.workspace_id,
            conversation_id=conv.conversation_id,
        )
        resolution = self.runs.resolver.resolve(key, request.agent_id)
        agent = resolution.agent
        agent_id = agent.id if agent is not None else None
        if not principal.may_use(key.bot_id, agent_id):
            target = f"bot:{key.bot_id}" if agent_id is None else f"bot:{key.bot_id}/agent:{agent_id}"
            await self.gate.refuse(
                context,
                principal,
                "Run",
                f"client {principal.client_id!r} may not send events of bot {key.bot_id!r}"
                + (f" to agent {agent_id!r}" if agent_id else ""),
                resource=target,
            )
        return resolution

    # -- RPCs ------------------------------------------------------------------------------------------
    # `SubmitInteraction` and `AttachRun` answer with `Update`s: their response types have exactly
    # `Update`'s fields and `add_host_service` serializes them as they are, which the generated base
    # class's signatures cannot say (hence the `override` ignores).
    async def Run(
        self,
        request: host_service_pb2.HostServiceRunRequest,
        context: grpc.aio.ServicerContext[host_service_pb2.HostServiceRunRequest, Update],
    ) -> AsyncGenerator[Update, None]:
        async with _status_on_error(context):
            principal = await self._admit(context, "Run", "run")
            request = admit(request)
            if request.event.event_type == INTERACTION_SUBMITTED_EVENT:
                raise InvalidArgumentError(
                    "interaction.submitted events are created by SubmitInteraction only",
                    field="event.event_type",
                )
            check_envelope(request.event)
            resolution = await self._authorize_event(context, principal, request)
            metadata = context.invocation_metadata() or ()
            async with contextlib.aclosing(await self.runs.open(request, metadata, resolution)) as updates:
                async for update in updates:
                    yield update

    async def SubmitInteraction(  # type: ignore[override]
        self,
        request: host_service_pb2.SubmitInteractionRequest,
        context: grpc.aio.ServicerContext[host_service_pb2.SubmitInteractionRequest, Update],
    ) -> AsyncGenerator[Update, None]:
        """Yields `Update`s: `SubmitInteractionResponse` has the same fields (`add_host_service`)."""
        async with _status_on_error(context):
            principal = await self._admit(context, "SubmitInteraction", "interact")
            request = admit(request)
            if self.interactions is None:
                raise RuntimeFailureError("interactions are not available on this host")
            if principal is not None and request.interaction_id:
                row = await self.interactions.store.get(request.interaction_id)
                if row is not None:  # (an unknown id is NOT_FOUND below, as for everyone)
                    await self._visible_run(context, principal, "SubmitInteraction", row.run_id)
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
            principal = await self._admit(context, "AttachRun", "attach")
            request = admit(request)
            await self._visible_run(context, principal, "AttachRun", request.run_id)
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
            principal = await self._admit(context, "GetRun", "get")
            request = admit(request)
            record = await self._visible_run(context, principal, "GetRun", request.run_id)
        except AgentRunnerError as err:
            await abort_with(context, err)
        run = run_to_proto(record)
        run.runtime_id = await self.runtime_of(record.run_id)
        return host_service_pb2.GetRunResponse(run=run)

    async def CancelRun(
        self,
        request: host_service_pb2.CancelRunRequest,
        context: grpc.aio.ServicerContext[
            host_service_pb2.CancelRunRequest, host_service_pb2.CancelRunResponse
        ],
    ) -> host_service_pb2.CancelRunResponse:
        try:
            principal = await self._admit(context, "CancelRun", "cancel")
            request = admit(request)
            record = await self._visible_run(context, principal, "CancelRun", request.run_id)
            if record.status not in TERMINAL_STATUSES and not self.runs.is_open(record.run_id):
                # another replica runs it: until replicas relay cancels, refuse rather than claim it
                raise FailedPreconditionError(
                    f"run {record.run_id!r} is not open on this host replica: cancel it on the replica "
                    "that runs it",
                    metadata={"runId": record.run_id},
                )
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
            principal = await self._admit(context, "ListRuns", "list_runs")
            request = admit(request)
            if self.ledger is None:
                raise RuntimeFailureError("run listing is not available on this host")
            query = RunQuery(
                statuses=tuple(request.statuses),
                agent_id=request.agent_id,
                runner_id=request.runner_id,
                conversation_id=request.conversation_id,
                binding_id=request.binding_id,
                # a scoped client lists only the runs it may see
                bot_ids=None if principal is None or principal.bots == "*" else tuple(principal.bots),
                agent_ids=None if principal is None or principal.agents == "*" else tuple(principal.agents),
            )
            records, token = await self.ledger.search_runs(
                query, request.page_token, request.page_size, max_bytes=self.page_max_bytes
            )
        except AgentRunnerError as err:
            await abort_with(context, err)
        return host_service_pb2.ListRunsResponse(
            runs=[run_to_proto(r) for r in records],
            next_page_token=token,
            max_page_bytes=self.page_max_bytes,
        )

    async def DownloadArtifact(
        self,
        request: host_service_pb2.HostServiceDownloadArtifactRequest,
        context: grpc.aio.ServicerContext[
            host_service_pb2.HostServiceDownloadArtifactRequest,
            host_service_pb2.HostServiceDownloadArtifactResponse,
        ],
    ) -> AsyncIterator[host_service_pb2.HostServiceDownloadArtifactResponse]:
        """The artifact's reference first, then its body in chunks (a client fetching a file a runner
        attached to an answer). A client needs the `get` operation and must see the artifact's run (an
        artifact of no run: a client that sees every run)."""
        async with _status_on_error(context):
            principal = await self._admit(context, "DownloadArtifact", "get")
            request = admit(request)
            if not request.artifact_id:
                raise InvalidArgumentError("artifact_id is required", field="artifact_id")
            if self.artifacts is None:
                raise RuntimeFailureError("artifacts are not available on this host")
            row = await self.artifacts.get(request.artifact_id)
            if row is None or (row.expires_at is not None and row.expires_at <= utcnow()):
                raise NotFoundError("artifact not found", metadata={"artifactId": request.artifact_id})
            if principal is not None and self.gate is not None:
                if row.run_id:
                    await self._visible_run(context, principal, "DownloadArtifact", row.run_id)
                elif not (principal.bots == "*" and principal.agents == "*"):
                    await self.gate.refuse(
                        context,
                        principal,
                        "DownloadArtifact",
                        f"client {principal.client_id!r} may not read artifact {request.artifact_id!r}",
                        resource=f"artifact:{request.artifact_id}",
                    )
            ref = self.artifacts.to_ref(row)
            first = True
            async for offset, chunk in self.artifacts.iter_chunks(row):
                out = host_service_pb2.HostServiceDownloadArtifactResponse(data=chunk, offset=offset)
                if first:
                    out.artifact.CopyFrom(ref)
                    first = False
                yield out
            if first:  # an empty body: the reference alone
                yield host_service_pb2.HostServiceDownloadArtifactResponse(artifact=ref)

    async def ListRunners(
        self,
        request: host_service_pb2.HostServiceListRunnersRequest,
        context: grpc.aio.ServicerContext[
            host_service_pb2.HostServiceListRunnersRequest, host_service_pb2.HostServiceListRunnersResponse
        ],
    ) -> host_service_pb2.HostServiceListRunnersResponse:
        try:
            await self._admit(context, "ListRunners", "list_runners")
            admit(request)
        except AgentRunnerError as err:
            await abort_with(context, err)
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
            # requests that break the boundary rules arrive as `Refused` (answered by `admit`)
            request_deserializer=request_deserializer(request_type),
            response_serializer=serializer,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)
