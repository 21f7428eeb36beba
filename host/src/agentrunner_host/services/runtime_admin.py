"""`HostService.ListRuntimes`, `GetRuntime`, `DrainRuntime`: the operators' view of runtimes that dial in
(`docs/runtimes.md`). A mixin of `HostServicer`, so the runtime calls stay out of the run path's servicer."""

from __future__ import annotations

from typing import Any

import grpc

from agentrunner.errors import NotImplementedFeatureError, abort_with
from agentrunner.v1 import host_service_pb2


class RuntimeAdmin:
    """The runtime RPCs of `HostService` (answered UNIMPLEMENTED until the host has a runtime registry)."""

    async def ListRuntimes(
        self,
        request: host_service_pb2.ListRuntimesRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> host_service_pb2.ListRuntimesResponse:
        await abort_with(context, NotImplementedFeatureError("runtimes are not available on this host"))

    async def GetRuntime(
        self,
        request: host_service_pb2.GetRuntimeRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> host_service_pb2.GetRuntimeResponse:
        await abort_with(context, NotImplementedFeatureError("runtimes are not available on this host"))

    async def DrainRuntime(
        self,
        request: host_service_pb2.DrainRuntimeRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> host_service_pb2.DrainRuntimeResponse:
        await abort_with(context, NotImplementedFeatureError("runtimes are not available on this host"))
