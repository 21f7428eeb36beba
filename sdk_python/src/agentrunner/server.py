"""Serving runners over gRPC: the thin RunnerService servicer, `start_server` and blocking `serve`.

The server has health checking (`grpc.health.v1`), reflection, optional TLS, 16 MiB message limits and
`so_reuseport=0` (a busy port fails loudly with `PortInUseError`). Shutdown stops admitting runs, lets
in-flight runs finish for `grace` seconds, then ends them with `run.failed` code `cancelled`.

Admission: at most `max_open_runs` runs (default `MAX_OPEN_RUNS`, env `AGENTRUNNER_MAX_OPEN_RUNS`) are
open in one server at once; a run beyond it is refused `RESOURCE_EXHAUSTED` (`RATE_LIMITED`, retryable,
with a `google.rpc.RetryInfo` delay) before the runner sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry import context as otel_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentrunner import telemetry
from agentrunner.api import close_channels
from agentrunner.engine import CANCELLED, RunExecution
from agentrunner.errors import (
    InvalidArgumentError,
    NotFoundError,
    RateLimitedError,
    RunnerUnavailableError,
    abort_with,
)
from agentrunner.reflection import enable_reflection
from agentrunner.runner import Runner
from agentrunner.v1 import runner_service_pb2, runner_service_pb2_grpc

log = structlog.get_logger("agentrunner.server")

READY_PREFIX = "AGENTRUNNER_LISTENING"
SERVICE_NAME = runner_service_pb2.DESCRIPTOR.services_by_name["RunnerService"].full_name
MAX_MESSAGE = 16 << 20
SERVER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.so_reuseport", 0),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
]
#: runs open in one server at once by default (the host's own default cap is the same)
MAX_OPEN_RUNS = 10_000
#: seconds a refused caller is told to wait (`RetryInfo.retry_delay`)
BUSY_RETRY_SECONDS = 1.0


def default_max_open_runs() -> int:
    """`AGENTRUNNER_MAX_OPEN_RUNS` when set (a positive integer), else `MAX_OPEN_RUNS`."""
    raw = os.environ.get("AGENTRUNNER_MAX_OPEN_RUNS", "").strip()
    if not raw:
        return MAX_OPEN_RUNS
    if not raw.isdigit() or int(raw) <= 0:
        raise ValueError(f"AGENTRUNNER_MAX_OPEN_RUNS must be a positive integer, got {raw!r}")
    return int(raw)


class PortInUseError(OSError):
    """The requested address could not be bound (usually: the port is in use)."""


def _instances(runners: Iterable[Runner | type[Runner]]) -> list[Runner]:
    out = [r() if isinstance(r, type) else r for r in runners]
    if not out:
        raise ValueError("serve at least one runner")
    ids = [r.get_manifest().id for r in out]  # raises ManifestError early
    if len(set(ids)) != len(ids):
        raise ValueError(f"runner ids must be unique, got {ids}")
    return out


class RunnerServicer(runner_service_pb2_grpc.RunnerServiceServicer):
    """Thin servicer: finds the runner and relays `RunExecution.results()`."""

    def __init__(
        self, runners: Sequence[Runner], *, precheck: bool = True, max_open_runs: int | None = None
    ) -> None:
        self._runners = list(runners)
        self._precheck = precheck
        self.active: set[RunExecution] = set()
        self.draining = False
        self.max_open_runs = default_max_open_runs() if max_open_runs is None else max_open_runs

    def find(self, runner_id: str, runner_name: str = "") -> Runner | None:
        """The served runner a request means: by id (or name in the id field), else by name; with a single
        runner served, an unaddressed request means it. None when nothing matches."""
        for r in self._runners:
            m = r.get_manifest()
            if (runner_id and runner_id in (m.id, m.name)) or (not runner_id and runner_name == m.name):
                return r
        if not runner_id and not runner_name and len(self._runners) == 1:
            return self._runners[0]
        return None

    async def ListRunners(
        self,
        request: runner_service_pb2.ListRunnersRequest,
        context: grpc.aio.ServicerContext[
            runner_service_pb2.ListRunnersRequest, runner_service_pb2.ListRunnersResponse
        ],
    ) -> runner_service_pb2.ListRunnersResponse:
        """The manifests of every runner this server serves (how a host discovers them)."""
        return runner_service_pb2.ListRunnersResponse(runners=[r.get_manifest() for r in self._runners])

    async def DescribeRunner(
        self,
        request: runner_service_pb2.DescribeRunnerRequest,
        context: grpc.aio.ServicerContext[
            runner_service_pb2.DescribeRunnerRequest, runner_service_pb2.DescribeRunnerResponse
        ],
    ) -> runner_service_pb2.DescribeRunnerResponse:
        """One runner's manifest; NOT_FOUND when this server does not serve it."""
        runner = self.find(request.runner_id) if request.runner_id else None
        if runner is None:
            await abort_with(context, NotFoundError(f"no runner {request.runner_id!r} is served here"))
        return runner_service_pb2.DescribeRunnerResponse(runner=runner.get_manifest())

    async def Run(
        self,
        request: runner_service_pb2.RunRequest,
        context: grpc.aio.ServicerContext[runner_service_pb2.RunRequest, runner_service_pb2.RunResponse],
    ) -> AsyncIterator[runner_service_pb2.RunResponse]:
        """Executes one run and streams its results to the host; refuses while draining (UNAVAILABLE, so the
        host retries elsewhere) and when the runner or the run id is missing."""
        if self.draining:
            await abort_with(context, RunnerUnavailableError("the runner server is shutting down"))
        if len(self.active) >= self.max_open_runs:
            await abort_with(
                context,
                RateLimitedError(
                    f"this runner runs at most {self.max_open_runs} runs at once: try again shortly",
                    retry_delay=BUSY_RETRY_SECONDS,
                    metadata={"maxOpenRuns": self.max_open_runs},
                ),
            )
        runner = self.find(request.runner_id, request.runner_name)
        if runner is None:
            await abort_with(
                context, NotFoundError(f"no runner {request.runner_id or request.runner_name!r} here")
            )
        if not request.context.run_id:
            await abort_with(
                context, InvalidArgumentError("context.run_id is required", field="context.run_id")
            )
        execution = RunExecution(
            runner, request, precheck=self._precheck, trace_context=_trace_context(context)
        )
        self.active.add(execution)
        stream = execution.results()
        try:
            async for result in stream:
                yield runner_service_pb2.RunResponse(result=result)
        finally:
            self.active.discard(execution)
            await stream.aclose()


def _trace_context(context: grpc.aio.ServicerContext[Any, Any]) -> otel_context.Context:
    """The caller's W3C trace context from the call's metadata (the host sends `traceparent`)."""
    carrier = {
        k: v if isinstance(v, str) else v.decode(errors="replace")
        for k, v in context.invocation_metadata() or ()
        if k in ("traceparent", "tracestate")
    }
    return TraceContextTextMapPropagator().extract(carrier)


async def _wait_finished(executions: set[RunExecution], limit: float) -> None:
    waiters = [asyncio.create_task(e.finished.wait()) for e in list(executions)]
    if not waiters:
        return
    _, pending = await asyncio.wait(waiters, timeout=limit)
    for w in pending:
        w.cancel()
    await asyncio.sleep(0.05)  # the handlers write the last result after `finished`


class RunnerServer(int):
    """The bound port (an `int`), with the handle to stop the server."""

    server: grpc.aio.Server
    servicer: RunnerServicer
    health: health.aio.HealthServicer
    host: str

    @property
    def port(self) -> int:
        """The bound port (the same as `int(self)`; 0 in a request picks a free one, this is the one picked)."""
        return int(self)

    @property
    def address(self) -> str:
        """`host:port` the server listens on, ready to give a host as the runner's endpoint."""
        return f"{self.host}:{int(self)}"

    async def stop(self, grace: float = 5.0) -> None:
        """Graceful shutdown: refuse new runs, let in-flight runs end within `grace`, then cancel them."""
        servicer = self.servicer
        servicer.draining = True
        await self.health.enter_graceful_shutdown()
        await _wait_finished(servicer.active, grace)
        for execution in list(servicer.active):
            execution.stop(CANCELLED, "the runner server is shutting down")
        await _wait_finished(servicer.active, 1.0)  # let the `run.failed` results reach the host
        await self.server.stop(0.5)
        await close_channels()
        services = sys.modules.get("agentrunner.services.http")  # only when a service runner used it
        if services is not None:
            await services.close_http_clients()

    async def wait_for_termination(self) -> None:
        """Blocks until the server stops (the foreground of `serve`)."""
        await self.server.wait_for_termination()


async def start_server(
    runners: Iterable[Runner | type[Runner]],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    precheck: bool = True,
    max_open_runs: int | None = None,
) -> RunnerServer:
    """Starts a RunnerService server in the running loop; returns the bound port (`RunnerServer`).
    `max_open_runs`: the admission cap (None: `AGENTRUNNER_MAX_OPEN_RUNS` or `MAX_OPEN_RUNS`)."""
    instances = _instances(runners)
    servicer = RunnerServicer(instances, precheck=precheck, max_open_runs=max_open_runs)
    server = grpc.aio.server(options=SERVER_OPTIONS)
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
                asyncio.to_thread(Path(tls_key).read_bytes), asyncio.to_thread(Path(tls_cert).read_bytes)
            )
            creds = grpc.ssl_server_credentials([(key, chain)])
            bound = server.add_secure_port(address, creds)
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError:
        raise PortInUseError(f"cannot listen on {address}: address already in use or unavailable") from None
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
    log.info(
        "runner server listening", address=handle.address, runners=[r.get_manifest().id for r in instances]
    )
    return handle


async def serve_async(
    runners: Iterable[Runner | type[Runner]],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    grace: float = 5.0,
    announce: bool = True,
) -> None:
    """Serves until SIGTERM/SIGINT, then shuts down gracefully. Prints the ready line when `announce`."""
    telemetry.configure_logging()  # stdout carries the ready line (and nothing else): logs go to stderr
    shutdown_tracing = telemetry.configure_otlp("agentrunner-runner")
    try:
        await _serve_until_stopped(runners, host, port, tls_cert, tls_key, grace, announce)
    finally:
        if shutdown_tracing is not None:
            await asyncio.to_thread(shutdown_tracing)  # flushes the spans still batched


#: the collector's thresholds once the server serves (Python's default: 700, 10, 10): an open run
#: holds ~100 tracked objects, and with thousands open the default's full collections (each walking
#: every open run) took most of the CPU of opening them. Full collections 10 times less often, young
#: ones as before (the host does the same).
GC_THRESHOLDS = (700, 10, 100)


async def _serve_until_stopped(
    runners: Iterable[Runner | type[Runner]],
    host: str,
    port: int,
    tls_cert: str | Path | None,
    tls_key: str | Path | None,
    grace: float,
    announce: bool,
) -> None:
    handle = await start_server(runners, host=host, port=port, tls_cert=tls_cert, tls_key=tls_key)
    # What start-up made (modules, descriptors, manifests) lives as long as the process: frozen out of
    # the collector's way, as the host does, so the collections each run's garbage triggers skip it.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if announce:
        sys.stdout.write(f"{READY_PREFIX} {host}:{int(handle)}\n")
        sys.stdout.flush()
    await stop.wait()
    log.info("shutting down", grace=grace, active=len(handle.servicer.active))
    await handle.stop(grace)


def serve(
    runners: Iterable[Runner | type[Runner]],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    grace: float = 5.0,
) -> None:
    """Blocking entry point: serves the runners until SIGTERM (prints `AGENTRUNNER_LISTENING host:port`)."""
    asyncio.run(serve_async(runners, host=host, port=port, tls_cert=tls_cert, tls_key=tls_key, grace=grace))
