"""`HostService.ListRuntimes`, `GetRuntime`, `DrainRuntime`: the operators' view of runtimes that dial in
(`docs/runtimes.md`). A mixin of `HostServicer`, so the runtime calls stay out of the run path's servicer;
a typed error becomes the call's status in `host_service._unary`, as for the other unary calls.

Reads come from the database (any host replica answers for every runtime); a drain is stored there
(kept across the runtime's reconnects) and applied at once when the runtime is connected to this
replica, else by the replica that holds it within `runtimes.registry.DRAIN_POLL_SECONDS`.
"""

from __future__ import annotations

from typing import Any

import grpc

from agentrunner.errors import InvalidArgumentError, NotFoundError, NotImplementedFeatureError
from agentrunner.v1 import host_service_pb2, runtime_pb2
from agentrunner_host.run.access import Caller
from agentrunner_host.run.records import RunRecords
from agentrunner_host.runtimes.registry import RuntimeRegistry
from agentrunner_host.runtimes.views import event_message, runtime_message
from agentrunner_host.wire.boundary import admit

Context = grpc.aio.ServicerContext[Any, Any]


class RuntimeAdmin:
    """The runtime RPCs of `HostService` (UNIMPLEMENTED on a host built without a runtime registry)."""

    #: set by `HostApp` (None: this servicer has no runtimes)
    runtimes: RuntimeRegistry | None = None
    records: RunRecords

    async def _admit(self, context: Context, method: str, operation: str) -> Caller:
        raise NotImplementedError  # (HostServicer's)

    def _registry(self) -> RuntimeRegistry:
        if self.runtimes is None:
            raise NotImplementedFeatureError("runtimes are not available on this host")
        return self.runtimes

    def _offline_after(self) -> float:
        return self._registry().config.offline_after_seconds

    async def runtime_of(self, run_id: str) -> str:
        """The runtime that ran a run ('' for a dialed endpoint's run, or a host without runtimes)."""
        registry = self.runtimes
        if registry is None:
            return ""
        return registry.runtime_of(run_id) or await registry.store.runtime_of(run_id)

    async def ListRuntimes(
        self, request: host_service_pb2.ListRuntimesRequest, context: Context
    ) -> host_service_pb2.ListRuntimesResponse:
        await self._admit(context, "ListRuntimes", "list_runtimes")
        request = admit(request)
        registry = self._registry()
        rows = await registry.store.list_runtimes(include_offline=request.include_offline)
        runtimes = [runtime_message(r, registry, self._offline_after()) for r in rows]
        if not request.include_offline:
            runtimes = [
                r for r in runtimes if r.status != runtime_pb2.RUNTIME_STATUS_OFFLINE
            ]  # (stale rows of a stopped replica)
        runtimes.sort(key=lambda r: (r.status == runtime_pb2.RUNTIME_STATUS_OFFLINE, r.runtime_id))
        return host_service_pb2.ListRuntimesResponse(runtimes=runtimes)

    async def GetRuntime(
        self, request: host_service_pb2.GetRuntimeRequest, context: Context
    ) -> host_service_pb2.GetRuntimeResponse:
        caller = await self._admit(context, "GetRuntime", "list_runtimes")
        request = admit(request)
        registry = self._registry()
        if not request.runtime_id:
            raise InvalidArgumentError("runtime_id is required", field="runtime_id")
        row = await registry.store.get(request.runtime_id)
        if row is None:
            raise NotFoundError(
                f"no runtime {request.runtime_id!r}", metadata={"runtimeId": request.runtime_id}
            )
        events = await registry.store.events(request.runtime_id)
        claims = await registry.store.claims(request.runtime_id)
        runs = await self.records.visible_runs(caller, [claim.run_id for claim in claims])
        for run in runs:
            run.runtime_id = request.runtime_id
        return host_service_pb2.GetRuntimeResponse(
            runtime=runtime_message(row, registry, self._offline_after()),
            events=[event_message(e) for e in events],
            runs=runs,
        )

    async def DrainRuntime(
        self, request: host_service_pb2.DrainRuntimeRequest, context: Context
    ) -> host_service_pb2.DrainRuntimeResponse:
        await self._admit(context, "DrainRuntime", "drain_runtime")
        request = admit(request)
        registry = self._registry()
        if not request.runtime_id:
            raise InvalidArgumentError("runtime_id is required", field="runtime_id")
        drained = not request.resume
        reason = request.reason or ("drained by an operator" if drained else "resumed by an operator")
        row = await registry.store.set_drained(request.runtime_id, drained, reason)
        if row is None:
            raise NotFoundError(
                f"no runtime {request.runtime_id!r}", metadata={"runtimeId": request.runtime_id}
            )
        registry.apply_drain(request.runtime_id, drained, reason)
        return host_service_pb2.DrainRuntimeResponse(
            runtime=runtime_message(row, registry, self._offline_after())
        )
