"""One grpc.aio server per host: HostService + ProxyService + health + reflection, optional TLS.

`HostApp.open(config)` is the wiring: it opens the database (refusing an un-migrated one), the fact
stores, the model / tool / knowledge backends, registers every proxy handler family (facts,
capabilities, platform) and builds the run service (`run/`). `stop()` closes all of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from agentrunner.reflection import enable_reflection
from agentrunner.v1 import host_service_pb2, result_pb2
from agentrunner_host.auth.clients import ClientGate
from agentrunner_host.capabilities.knowledge import KnowledgeService
from agentrunner_host.capabilities.models import ModelRegistry
from agentrunner_host.capabilities.tools import ToolRegistry
from agentrunner_host.config.model import HostConfig, HostEnv
from agentrunner_host.console.auth import ConsoleAccessError
from agentrunner_host.delivery.adapters import AdapterRegistry, GrpcDeliveryAdapter
from agentrunner_host.delivery.channel import DeliveryHub
from agentrunner_host.delivery.interactions import InteractionService
from agentrunner_host.delivery.store import DeliveryStore, InteractionStore
from agentrunner_host.fleet.bus import FleetBus
from agentrunner_host.fleet.replicas import Replicas
from agentrunner_host.fleet.routing import Fleet
from agentrunner_host.observability.memory import trimmer
from agentrunner_host.observability.telemetry import configure_tracing
from agentrunner_host.proxy.capabilities import Backends
from agentrunner_host.proxy.control import ControlHub
from agentrunner_host.proxy.servicer import SERVICE_NAME as PROXY_SERVICE_NAME
from agentrunner_host.proxy.servicer import ProxyServicer
from agentrunner_host.registry.check import (
    Problem,
    check_against_registry,
    check_bindings,
    check_runtimes,
    registry_view,
)
from agentrunner_host.registry.endpoints import RunnerRegistry
from agentrunner_host.run import outcomes
from agentrunner_host.run.access import RunAccess
from agentrunner_host.run.records import RunRecords
from agentrunner_host.run.service import RunService
from agentrunner_host.runtimes.gate import RuntimeGate
from agentrunner_host.runtimes.registry import RuntimeRegistry
from agentrunner_host.runtimes.service import SERVICE_NAME as RUNTIME_SERVICE_NAME
from agentrunner_host.runtimes.service import RuntimeServicer
from agentrunner_host.server.handlers import artifact_for_model, register_proxy_handlers
from agentrunner_host.server.listener import check_listener, server_credentials, server_options
from agentrunner_host.server.managed import ManagedRunners
from agentrunner_host.services.host_service import HostServicer, add_host_service
from agentrunner_host.store.db import Database
from agentrunner_host.store.fact_stores import FactStores, FactStoreSettings
from agentrunner_host.store.leases import InstanceLease
from agentrunner_host.store.migrate import ensure_current, upgrade
from agentrunner_host.store.runtimes import RuntimeStore
from agentrunner_host.wire.transport_errors import ListenError, explain_bind_failure

if TYPE_CHECKING:  # the console's web stack (uvicorn, starlette) is imported when one is configured
    from agentrunner_host.console.server import ConsoleServer

log = structlog.get_logger("agentrunner_host.server.app")

#: on stop, a run whose runner has been silent this long is cancelled instead of drained
IDLE_CANCEL_SECONDS = 0.5
HOST_SERVICE_NAME = host_service_pb2.DESCRIPTOR.services_by_name["HostService"].full_name


class HostApp:
    """Everything one host process serves. Build it with `await HostApp.open(config)`."""

    def __init__(
        self,
        config: HostConfig,
        *,
        db: Database,
        stores: FactStores,
        models: ModelRegistry,
        tools: ToolRegistry,
        knowledge: KnowledgeService,
        env: HostEnv | None = None,
        managed: ManagedRunners | None = None,
    ) -> None:
        configure_tracing()
        #: runner processes this host started (`runners[].kind: langbot-plugins`), stopped with it
        self.managed = managed
        self.config = config
        self.db = db
        self.stores = stores
        self.models = models
        self.tools = tools
        self.knowledge = knowledge
        self.backends = Backends(models, tools, knowledge)
        self.registry = RunnerRegistry(config, env)
        self.hub = ControlHub()
        self.proxy_address = ""
        self.runs = RunService(
            config,
            self.registry,
            stores,
            self.hub,
            DeliveryHub(DeliveryStore(db)),
            InteractionStore(db),
            self.backends,
            proxy_endpoint=lambda: self.proxy_address,
        )
        self.proxy = ProxyServicer(
            stores.sessions,
            stores.events,
            self.hub,
            heartbeat_interval=config.limits.heartbeat_interval_seconds,
            refuses=self.runs.refuses,
        )
        self.lease = InstanceLease(db, config.instance_id, seconds=config.fleet.lease_seconds)
        #: the other replicas on this database (PostgreSQL only; None on SQLite, a single host)
        self.fleet = None if db.is_sqlite else self._fleet(config, db, stores)
        if self.fleet is not None:
            self.runs.attach_fleet(self.fleet)
            self.hub.attach_fleet(self.fleet, stores.ledger)
        # delivery adapters: this host's own gRPC surface (replies, `send_message` to host conversations)
        self.adapters = AdapterRegistry(
            [GrpcDeliveryAdapter(self.runs.deliveries, stores.transcript, self.fleet)]
        )
        self.runs.contexts.adapter_actions = self.adapters.actions()
        self.interactions = InteractionService(self.runs, self.runs.interaction_store, stores.artifacts)
        register_proxy_handlers(self)
        self.health = health.aio.HealthServicer()
        self.server: grpc.aio.Server | None = None
        self.console: ConsoleServer | None = None
        #: who may call HostService (built with the server; the console's sign-in checks keys with it)
        self.gate: ClientGate | None = None
        #: runtimes that dial in (built with the server: the gate needs the listen address)
        self.runtime_store = RuntimeStore(db)
        self.runtimes: RuntimeRegistry | None = None
        self.port = 0
        self._tasks: list[asyncio.Task[Any]] = []

    # -- wiring ----------------------------------------------------------------------------------------
    @classmethod
    async def open(
        cls, config: HostConfig, env: HostEnv | None = None, *, auto_upgrade: bool = False
    ) -> HostApp:
        """Opens the database and every backend from `config`. Raises `DatabaseNotMigratedError` (with
        the `agentrunner-host db upgrade` hint) for an un-migrated database unless `auto_upgrade`."""
        url = config.database.url
        if auto_upgrade:
            await asyncio.to_thread(upgrade, url)
        else:
            await asyncio.to_thread(ensure_current, url)
        db = Database(url)
        opened: list[Any] = []
        try:
            stores = await FactStores.open(
                db,
                FactStoreSettings(
                    artifact_dir=config.database.artifact_dir,
                    owner=config.instance_id,
                    state_value_cap_bytes=config.limits.state_value_max_bytes,
                    maintenance_interval=config.database.maintenance_interval_seconds,
                ),
            )

            async def resolve_artifact(run_id: str, artifact_id: str) -> tuple[bytes, str]:
                return await artifact_for_model(stores, run_id, artifact_id)

            models = ModelRegistry(config.models, usage_sink=stores, artifact_resolver=resolve_artifact)
            opened.append(models)
            tools = ToolRegistry(config.tools, artifact_sink=stores)
            knowledge = KnowledgeService(db.engine, config.knowledge_bases, embedder_for=models.embedder)
        except BaseException:
            for item in opened:
                with contextlib.suppress(Exception):
                    await item.aclose()
            await db.dispose()
            raise
        # before the registry is built: a started runner's entry gets the address it listens on
        managed = (
            await ManagedRunners.start(config) if any(r.kind != "grpc" for r in config.runners) else None
        )
        return cls(
            config,
            db=db,
            stores=stores,
            models=models,
            tools=tools,
            knowledge=knowledge,
            env=env,
            managed=managed,
        )

    def _fleet(self, config: HostConfig, db: Database, stores: FactStores) -> Fleet:
        """The fleet machinery of a replica on PostgreSQL (`fleet/`): the bus, the live replicas."""
        fleet = config.fleet
        bus = FleetBus(db, config.instance_id, poll_seconds=fleet.poll_seconds,
                       call_timeout=fleet.call_timeout_seconds)  # fmt: skip
        me = config.instance_id

        def ending_for(lost: str) -> result_pb2.RunResult:
            return outcomes.failed(
                "", "host.restarted",
                f"host replica {lost!r} stopped while the run was open; replica {me!r} ended it when "
                "that replica's lease expired", replica=lost,
            )  # fmt: skip

        replicas = Replicas(stores, self.lease, bus, ending_for, sweep_seconds=fleet.sweep_seconds)
        return Fleet(bus, replicas)

    async def _lease_lost(self) -> None:
        """Another replica took this one's runs over (its lease expired: the database was out of reach
        for longer than the lease): the runs still open here stop at once, their ledger already ended."""
        cancelled = self.runs.cancel_idle(0.0, reason="host.lease_lost")
        log.error("host.runs_taken_over", cancelled=cancelled)

    # -- lifecycle -------------------------------------------------------------------------------------
    async def start(self, address: str | None = None) -> int:
        """Recovers crashed runs, binds, starts serving and probes the runner endpoints and tool
        sources. Returns the bound port."""
        address = address or self.config.listen.address
        creds = server_credentials(self.config)
        check_listener(self.config, address, tls=creds is not None)
        server = self._build_server(address)
        try:  # bind first: a busy port fails before anything is recovered or started
            port = server.add_secure_port(address, creds) if creds else server.add_insecure_port(address)
        except RuntimeError:
            port = 0
        if port == 0:
            raise ListenError(explain_bind_failure("listen.address", address))
        if self.config.console.address:
            try:  # (Starlette and uvicorn: the console extra)
                from agentrunner_host.console.server import ConsoleServer
            except ImportError as exc:
                raise ConsoleAccessError(
                    f"console.address is set but the console is not installed ({exc.name} is missing): "
                    "pip install 'langbot-agentrunner-host[console]'"
                ) from exc
            self.console = ConsoleServer(self.config)  # (refuses an exposed console: console/auth.py)
            self.console.bind()
            server.add_insecure_port(self.console.host_target)
        await self.lease.acquire()  # (another live host with this instance_id: InstanceLeaseError)
        self._tasks.append(
            asyncio.create_task(self.lease.run_heartbeat(self._lease_lost), name="instance-lease")
        )
        if self.fleet is not None:
            self.fleet.bus.start()
            self._tasks.append(asyncio.create_task(self.fleet.replicas.run(), name="fleet-replicas"))
        restarted = outcomes.failed("", "host.restarted")  # (the failure table's code, message, status)
        interrupted = await self.stores.mark_interrupted(restarted, outcomes.status_of(restarted)[0])
        if interrupted:
            log.warning("host.interrupted_runs", count=interrupted)
        self._tasks.append(asyncio.create_task(self.stores.run_maintenance(), name="fact-maintenance"))
        self._tasks.append(
            asyncio.create_task(self.stores.transcript.run_indexer(), name="transcript-indexer")
        )
        self._tasks.append(asyncio.create_task(self.db.run_checkpointer(), name="wal-checkpointer"))
        self._tasks.append(asyncio.create_task(self.interactions.sweep(), name="interaction-expiry"))
        self._tasks.append(asyncio.create_task(trimmer().run(), name="memory-trimmer"))
        await self.tools.start()
        self.port = port
        host = address.rsplit(":", 1)[0]
        if host in ("0.0.0.0", "[::]", ""):
            host = "127.0.0.1"
        self.proxy_address = self.config.listen.advertise_address or f"{host}:{port}"
        assert self.runtimes is not None
        await self.runtimes.start()  # (runtimes this instance held before it stopped are offline)
        await server.start()
        self.server = server
        await self.registry.start()
        if self.console is not None:
            await self.console.start(audit=self.stores.events.run_audit, gate=self.gate)
        self.report_config_problems()
        for name in ("", HOST_SERVICE_NAME, PROXY_SERVICE_NAME, RUNTIME_SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "host.started",
            address=address,
            port=port,
            instance_id=self.config.instance_id,
            runners=[r.runner_id for r in self.registry.runners()],
            tools=[t.name for t in self.tools.list_tools()],
        )
        return port

    def report_config_problems(self) -> list[Problem]:
        """`config check` at start-up, against what the registry found: each problem as a warning log
        line (runners may come up or be updated later, so none refuses to start)."""
        manifests, endpoints = registry_view(self.registry)
        problems = check_bindings(self.config) + check_runtimes(self.config)
        problems += check_against_registry(self.config, manifests, endpoints)
        for problem in problems:
            log.warning(
                "config.problem", severity=problem.severity, path=problem.path, problem=problem.message
            )
        return problems

    def _build_server(self, address: str) -> grpc.aio.Server:
        server = grpc.aio.server(options=server_options(self.config.limits))
        gate = self.gate = ClientGate(self.config, self.stores.events, listen_address=address)
        runtime_gate = RuntimeGate(self.config, listen_address=address)
        self.runtimes = RuntimeRegistry(self.config, self.runtime_store, runtime_gate, self.registry)
        self.registry.runtimes = self.runtimes
        access = RunAccess(self.runs, self.runs.resolver, self.interactions.store)
        records = RunRecords(
            access,
            self.runs,
            ledger=self.stores.ledger,
            artifacts=self.stores.artifacts,
            page_max_bytes=self.stores.settings.page_max_bytes,
        )
        host_servicer = HostServicer(
            self.runs, self.registry, self.interactions, gate, access=access, records=records
        )
        host_servicer.runtimes = self.runtimes
        add_host_service(host_servicer, server)
        RuntimeServicer(self.runtimes, runtime_gate).add_to_server(server)
        server.add_generic_rpc_handlers((self.proxy.generic_handler(),))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        enable_reflection(
            server,
            (
                HOST_SERVICE_NAME,
                PROXY_SERVICE_NAME,
                RUNTIME_SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            ),
        )
        return server

    async def stop(self, grace: float = 5.0) -> None:
        """Stops accepting work, lets open runs finish for up to `grace`, cancels the rest, then closes
        the backends and the database. Stop time follows the work left: runs whose runner has been
        silent for `IDLE_CANCEL_SECONDS` (stalled, waiting on a user) are cancelled at once; only runs
        still producing results get the whole grace."""
        await self.health.enter_graceful_shutdown()
        if self.runtimes is not None:
            self.runtimes.stop_placing()
        loop = asyncio.get_running_loop()
        until = loop.time() + grace
        idle = min(grace, IDLE_CANCEL_SECONDS)
        while self.runs.open_runs and loop.time() < until:
            self.runs.cancel_idle(idle)
            await asyncio.sleep(0.05)
        if self.console is not None:
            await self.console.stop()
        if self.runtimes is not None:
            await self.runtimes.close()
        if self.server is not None:
            await self.server.stop(0.5)
        await self.registry.close()
        if self.managed is not None:
            await self.managed.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self.fleet is not None:
            await self.fleet.bus.close()
        await self.runs.close()
        try:
            await self.lease.release()
        except Exception:
            log.warning("host.lease_release_failed", exc_info=True)
        await self.close_backends()

    async def close_backends(self) -> None:
        for close in (self.tools.close, self.models.aclose, self.db.dispose):
            try:
                await close()
            except Exception:
                log.warning("host.close_failed", part=getattr(close, "__qualname__", "?"), exc_info=True)

    async def wait(self) -> None:
        assert self.server is not None
        await self.server.wait_for_termination()
