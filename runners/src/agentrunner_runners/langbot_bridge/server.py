"""The bridge's gRPC server: the SDK's RunnerService servicer over a catalog that changes.

The SDK's servicer serves a fixed list of runners; the bridge's list follows discovery (plugins register
after the server started, workers restart), so `find` and `ListRunners` read the catalog at each call.
Runs go through the SDK's engine unchanged, without its local pre-checks (`precheck=False`): every API
call a plugin makes reaches the host, which authorizes and audits it. Health, reflection, message
limits, TLS and graceful shutdown are the SDK server's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from agentrunner.reflection import enable_reflection
from agentrunner.runner import Runner
from agentrunner.server import SERVER_OPTIONS, SERVICE_NAME, PortInUseError, RunnerServer, RunnerServicer
from agentrunner.v1 import runner_service_pb2, runner_service_pb2_grpc


class CatalogServicer(RunnerServicer):
    """`RunnerServicer` whose runners are whatever `catalog()` answers now."""

    def __init__(self, catalog: Callable[[], Sequence[Runner]]) -> None:
        super().__init__([], precheck=False)
        self._catalog = catalog

    def find(self, runner_id: str, runner_name: str = "") -> Runner | None:
        for runner in self._catalog():
            manifest = runner.get_manifest()
            if (runner_id and runner_id in (manifest.id, manifest.name)) or (
                not runner_id and runner_name == manifest.name
            ):
                return runner
        return None

    async def ListRunners(
        self,
        request: runner_service_pb2.ListRunnersRequest,
        context: grpc.aio.ServicerContext[
            runner_service_pb2.ListRunnersRequest, runner_service_pb2.ListRunnersResponse
        ],
    ) -> runner_service_pb2.ListRunnersResponse:
        return runner_service_pb2.ListRunnersResponse(runners=[r.get_manifest() for r in self._catalog()])


async def start_server(
    catalog: Callable[[], Sequence[Runner]],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> RunnerServer:
    """Serves the catalog; returns the SDK's server handle (its `stop(grace)` drains the runs)."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    servicer = CatalogServicer(catalog)
    runner_service_pb2_grpc.add_RunnerServiceServicer_to_server(servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    enable_reflection(server, [SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name])
    address = f"{host}:{port}"
    try:
        if tls_cert or tls_key:
            if not (tls_cert and tls_key):
                raise ValueError("TLS needs both a certificate and a key")
            key, chain = await asyncio.gather(
                asyncio.to_thread(tls_key.read_bytes), asyncio.to_thread(tls_cert.read_bytes)
            )
            bound = server.add_secure_port(address, grpc.ssl_server_credentials([(key, chain)]))
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if not bound:
        raise PortInUseError(f"cannot listen on {address} (is the port already in use?)")
    await server.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    await health_servicer.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
    handle = RunnerServer(bound)
    handle.server = server
    handle.servicer = servicer
    handle.health = health_servicer
    handle.host = host
    return handle
