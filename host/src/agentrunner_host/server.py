"""One grpc.aio server per host: HostService + ProxyService + health + reflection, optional TLS.

`HostApp` wires the parts from a `HostConfig`. Stores default to the in-memory implementations; pass
SQL-backed ones (or let `agentrunner_host.store.open_stores` provide them once it exists).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from agentrunner_host.config import HostConfig, HostEnv
from agentrunner_host.context_builder import FactHooks
from agentrunner_host.control import ControlHub
from agentrunner_host.memory import InMemoryRunLedger, InMemorySessionRegistry
from agentrunner_host.observability import configure_tracing
from agentrunner_host.orchestrator import Orchestrator
from agentrunner_host.ports import RunLedger, SessionRegistry
from agentrunner_host.proxy import platform
from agentrunner_host.proxy.api import AuditSink, HandlerTable
from agentrunner_host.proxy.audit import LoggingAuditSink
from agentrunner_host.proxy.servicer import SERVICE_NAME as PROXY_SERVICE_NAME
from agentrunner_host.proxy.servicer import ProxyServicer
from agentrunner_host.registry import RunnerRegistry
from agentrunner_host.services.host_service import HostServicer

log = structlog.get_logger("agentrunner_host.server")

HOST_SERVICE_NAME = host_service_pb2.DESCRIPTOR.services_by_name["HostService"].full_name
SERVER_OPTIONS = [
    ("grpc.so_reuseport", 0),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5000),
]


@dataclasses.dataclass(slots=True)
class Stores:
    ledger: RunLedger
    sessions: SessionRegistry
    audit: AuditSink
    hooks: FactHooks = dataclasses.field(default_factory=FactHooks)
    handlers: dict[str, Any] = dataclasses.field(default_factory=dict)


def memory_stores() -> Stores:
    return Stores(InMemoryRunLedger(), InMemorySessionRegistry(), LoggingAuditSink())


def _server_credentials(config: HostConfig) -> grpc.ServerCredentials | None:
    tls = config.listen.tls
    if tls is None or tls.cert_file is None or tls.key_file is None:
        return None
    client_ca = tls.client_ca_file.read_bytes() if tls.client_ca_file else None
    return grpc.ssl_server_credentials(
        [(tls.key_file.read_bytes(), tls.cert_file.read_bytes())],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )


def _optional_handlers(module: str) -> HandlerTable:
    """Module-level `HANDLERS` tables of the families built by others, when present."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return {}
    table = getattr(mod, "HANDLERS", None)
    return table if isinstance(table, dict) else {}


class HostApp:
    def __init__(self, config: HostConfig, stores: Stores | None = None, env: HostEnv | None = None) -> None:
        configure_tracing()
        self.config = config
        self.stores = stores or memory_stores()
        self.registry = RunnerRegistry(config, env)
        self.hub = ControlHub()
        self.proxy_address = ""
        self.orchestrator = Orchestrator(
            config,
            self.registry,
            self.stores.ledger,
            self.stores.sessions,
            self.hub,
            self.stores.hooks,
            proxy_endpoint=lambda: self.proxy_address,
        )
        self.proxy = ProxyServicer(
            self.stores.sessions,
            self.stores.audit,
            self.hub,
            heartbeat_interval=config.limits.heartbeat_interval_seconds,
        )
        self.proxy.register(platform.HANDLERS)
        for module in ("agentrunner_host.proxy.capabilities", "agentrunner_host.proxy.facts"):
            self.proxy.register(_optional_handlers(module))
        self.proxy.register(self.stores.handlers)
        self.health = health.aio.HealthServicer()
        self.server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self, address: str | None = None) -> int:
        """Binds, starts serving and probes the runner endpoints. Returns the bound port."""
        address = address or self.config.listen.address
        server = grpc.aio.server(options=SERVER_OPTIONS)
        host_service_pb2_grpc.add_HostServiceServicer_to_server(
            HostServicer(self.orchestrator, self.registry), server
        )
        server.add_generic_rpc_handlers((self.proxy.generic_handler(),))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (
                HOST_SERVICE_NAME,
                PROXY_SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
        creds = _server_credentials(self.config)
        port = server.add_secure_port(address, creds) if creds else server.add_insecure_port(address)
        if port == 0:
            raise RuntimeError(f"could not bind {address}")
        self.port = port
        host = address.rsplit(":", 1)[0]
        if host in ("0.0.0.0", "[::]", ""):
            host = "127.0.0.1"
        self.proxy_address = self.config.listen.advertise_address or f"{host}:{port}"
        await server.start()
        self.server = server
        interrupted = await self.stores.ledger.mark_interrupted()
        if interrupted:
            log.warning("host.interrupted_runs", count=interrupted)
        await self.registry.start()
        for name in ("", HOST_SERVICE_NAME, PROXY_SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "host.started", address=address, port=port, runners=[r.runner_id for r in self.registry.runners()]
        )
        return port

    async def stop(self, grace: float = 5.0) -> None:
        """Stops accepting work, lets open runs finish for up to `grace`, then cancels the rest."""
        await self.health.enter_graceful_shutdown()
        loop = asyncio.get_running_loop()
        until = loop.time() + grace
        while self.orchestrator.open_runs and loop.time() < until:  # noqa: ASYNC110 - a counter, not an event
            await asyncio.sleep(0.05)
        if self.server is not None:
            await self.server.stop(0.5)
        await self.registry.close()

    async def wait(self) -> None:
        assert self.server is not None
        await self.server.wait_for_termination()
