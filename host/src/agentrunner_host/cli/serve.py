"""`agentrunner-host serve`: the host process, with every start-up failure as one line."""

from __future__ import annotations

import asyncio
import enum
import gc
import signal
from typing import Annotated, Any

import typer

from agentrunner_host.cli.common import ConfigOpt, err_console, fail, load
from agentrunner_host.observability.lazy_metrics import enable_metrics


class LogLevel(enum.StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"
    critical = "critical"


LogLevelOpt = Annotated[
    LogLevel, typer.Option(help="Log level.", case_sensitive=False, envvar="AGENTRUNNER_LOG_LEVEL")
]

#: the collector's thresholds once the host serves (Python's default: 700, 10, 10). An open run holds
#: ~150 tracked objects; opening 10,000 runs at once triggered 13 full collections in the host, each
#: walking every open run's objects (most of the collector's time: 1.9 of 2.6 s of it opening 4,000).
#: Full collections now come 10 times less often (still only once a quarter of the tracked objects is
#: new); young ones as often as before, so short-lived cycles (a streaming run's garbage) go as soon as
#: they did: a young threshold of 10,000 cut as much CPU but raised the streaming high-water ~3 MiB.
GC_THRESHOLDS = (700, 10, 100)


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        config: ConfigOpt,
        address: Annotated[str | None, typer.Option(help="Override listen.address.")] = None,
        log_level: LogLevelOpt = LogLevel.info,
    ) -> None:
        """Serve HostService + ProxyService (+ health, reflection) until SIGINT/SIGTERM.
        Refuses to start on a database that is not migrated (run `agentrunner-host db upgrade`)."""
        from agentrunner.telemetry import TelemetryError, configure_otlp
        from agentrunner_host.config.extras import missing
        from agentrunner_host.observability.telemetry import configure_logging
        from agentrunner_host.server.managed import entry_problems

        configure_logging(log_level.value)
        cfg = load(config)
        for path, reason in entry_problems(cfg):
            fail(f"{config}: {path}: {reason}", 2)
        absent = missing(cfg)  # extras the config needs (PostgreSQL, OTLP, console, MCP) not installed
        if absent:
            from rich.markup import escape
        for line in absent:
            err_console().print(
                f"[red]refusing to serve[/red]: {escape(line)}", highlight=False, soft_wrap=True
            )
        if absent:
            raise typer.Exit(3)
        try:
            shutdown_tracing = configure_otlp(
                cfg.telemetry.service_name,
                endpoint=cfg.telemetry.otlp_endpoint,
                attributes={"service.instance.id": cfg.instance_id},
            )
        except TelemetryError as exc:
            fail(str(exc), 3)
        try:
            asyncio.run(_serve(cfg, address))
        except KeyboardInterrupt:  # a second Ctrl-C during shutdown
            raise typer.Exit(130) from None
        finally:
            if shutdown_tracing is not None:
                shutdown_tracing()  # flushes the spans still batched


async def _serve(cfg: Any, address: str | None) -> None:
    from agentrunner_host.console.auth import ConsoleAccessError
    from agentrunner_host.server.app import HostApp
    from agentrunner_host.store.leases import InstanceLeaseError
    from agentrunner_host.store.migrate import DatabaseNotMigratedError
    from agentrunner_host.wire.transport_errors import ListenError, explain_bind_failure

    try:
        host = await HostApp.open(cfg)
    except DatabaseNotMigratedError as exc:
        err_console().print(f"[red]refusing to serve[/red]: {exc}", highlight=False)
        raise typer.Exit(3) from None
    try:
        port = await host.start(address)
        if cfg.metrics.address:
            from prometheus_client import start_http_server

            enable_metrics()
            mhost, _, mport = cfg.metrics.address.rpartition(":")
            try:
                start_http_server(int(mport), addr=mhost or "127.0.0.1")
            except OSError as exc:
                raise ListenError(explain_bind_failure("metrics.address", cfg.metrics.address, exc)) from None
    except (ListenError, ConsoleAccessError, InstanceLeaseError) as exc:
        await host.stop(0)
        fail(str(exc), 3)
    except BaseException:
        await host.stop(0)
        raise
    # What is alive now (modules, descriptors, SQLAlchemy metadata, config, channels) lives as long as the
    # process: out of the collector's way, the collections that each run's garbage triggers stop walking
    # it again and again (~4% more results/s under the throughput benchmark).
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    pusher = _metrics_pusher(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # (before the ready line: a SIGTERM right after it stops
        loop.add_signal_handler(sig, stop.set)  # the host gracefully instead of killing it)
    bound_host = (address or cfg.listen.address).rsplit(":", 1)[0]
    print(f"AGENTRUNNER_HOST_LISTENING {bound_host}:{port}", flush=True)
    if host.console is not None:
        print(f"AGENTRUNNER_CONSOLE {host.console.url}", flush=True)
    await stop.wait()
    await host.stop(5.0)
    if pusher is not None:
        await pusher.stop()  # the last figures, after the runs ended


def _metrics_pusher(cfg: Any) -> Any:
    """Starts the OTLP metric export when an endpoint is configured (None otherwise)."""
    from agentrunner.telemetry import otlp_endpoint

    endpoint = otlp_endpoint(cfg.telemetry.otlp_endpoint, "metrics")
    if not endpoint:
        return None
    import os

    from opentelemetry.sdk.resources import Resource

    from agentrunner_host.observability.otlp_metrics import MetricsPusher, interval_seconds

    enable_metrics()
    name = os.environ.get("OTEL_SERVICE_NAME") or cfg.telemetry.service_name
    resource = Resource.create({"service.name": name, "service.instance.id": cfg.instance_id})
    pusher = MetricsPusher(endpoint, interval_seconds(cfg.telemetry.metrics_interval_seconds), resource)
    pusher.start()
    return pusher
