"""`agentrunner-host serve`'s body and its argument parsing, without typer (issue 37: the CLI toolkit
is ~1.4 MiB of every served host). `agentrunner_host.cli.main` runs a `serve` command line here when
`parse_serve_args` reads all of it; anything else (`--help`, a usage error, a form it does not read)
goes to typer, whose `serve` command (`serve.py`) runs the same `serve_host`, so options, help, usage
errors and exit codes are typer's."""

from __future__ import annotations

import asyncio
import gc
import os
import pathlib
import signal
from typing import Any

from agentrunner_host.cli.output import err_console, exit_with, fail, load
from agentrunner_host.observability.lazy_metrics import enable_metrics

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
_OPTIONS = {"--config": "config", "-c": "config", "--address": "address", "--log-level": "log_level"}

#: the collector's thresholds once the host serves (Python's default: 700, 10, 10). An open run holds
#: ~150 tracked objects; opening 10,000 runs at once triggered 13 full collections in the host, each
#: walking every open run's objects (most of the collector's time: 1.9 of 2.6 s of it opening 4,000).
#: Full collections now come 10 times less often (still only once a quarter of the tracked objects is
#: new); young ones as often as before, so short-lived cycles (a streaming run's garbage) go as soon as
#: they did: a young threshold of 10,000 cut as much CPU but raised the streaming high-water ~3 MiB.
GC_THRESHOLDS = (700, 10, 100)


def parse_serve_args(args: list[str]) -> dict[str, Any] | None:
    """`serve`'s options as typer reads them (`--config/-c PATH`, `--address ADDR`, `--log-level LEVEL`
    in any case, default `AGENTRUNNER_LOG_LEVEL` or info; `--opt=value` too; the last of a repeated
    option wins), or None for anything else, which typer then parses and answers."""
    found: dict[str, str] = {}
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        key = _OPTIONS.get(name)
        if key is None or (eq and name == "-c"):
            return None
        if not eq:
            if i + 1 >= len(args) or args[i + 1].startswith("-"):
                return None
            i += 1
            value = args[i]
        found[key] = value
        i += 1
    level = found.get("log_level", os.environ.get("AGENTRUNNER_LOG_LEVEL", "info")).lower()
    if "config" not in found or level not in LOG_LEVELS:
        return None
    return {"config": pathlib.Path(found["config"]), "address": found.get("address"), "log_level": level}


def serve_host(config: pathlib.Path, address: str | None, log_level: str) -> None:
    """Serve HostService + ProxyService (+ health, reflection) until SIGINT/SIGTERM; every start-up
    failure is one line and an exit code (2: the config, 3: the environment, 130: a second Ctrl-C)."""
    from agentrunner.telemetry import TelemetryError, configure_otlp
    from agentrunner_host.config.extras import missing
    from agentrunner_host.observability.telemetry import configure_logging
    from agentrunner_host.server.managed import entry_problems

    configure_logging(log_level)
    cfg = load(config)
    for path, reason in entry_problems(cfg):
        fail(f"{config}: {path}: {reason}", 2)
    absent = missing(cfg)  # extras the config needs (PostgreSQL, OTLP, console, MCP) not installed
    if absent:
        from rich.markup import escape
    for line in absent:
        err_console().print(f"[red]refusing to serve[/red]: {escape(line)}", highlight=False, soft_wrap=True)
    if absent:
        exit_with(3)
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
        exit_with(130)
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
        exit_with(3)
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
