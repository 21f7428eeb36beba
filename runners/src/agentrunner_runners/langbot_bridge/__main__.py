"""`python -m agentrunner_runners.langbot_bridge --plugins DIR`: LangBot Runner plugins as gRPC runners.

Prints `AGENTRUNNER_LISTENING host:port` on stdout once the plugins found registered and their runners
were discovered (or the start-up timeout passed); logs go to stderr. SIGTERM / SIGINT: in-flight runs
get `--grace` seconds, then the runtime and its plugin workers are stopped. `--watch-stdin` also stops
the bridge when its stdin closes (the host that started it passes a pipe, so the bridge and the plugin
processes under it never outlive the host). Exit codes: 1 bad arguments or start-up failure, 2 busy
port or the `langbot` extra not installed.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import asyncio
import contextlib
import importlib.util
import signal
import sys
from pathlib import Path
from typing import Annotated

import structlog
import typer

from agentrunner import telemetry
from agentrunner.api import HostTls, close_channels, configure_host_tls
from agentrunner.server import READY_PREFIX, PortInUseError
from agentrunner_runners.langbot_bridge.bridge import Bridge
from agentrunner_runners.langbot_bridge.plugins import PluginsError, load_plugin_config
from agentrunner_runners.langbot_bridge.runtime import MAX_IN_FLIGHT
from agentrunner_runners.langbot_bridge.server import start_server

log = structlog.get_logger("agentrunner_runners.langbot_bridge")
app = typer.Typer(add_completion=False, help="Serve LangBot Runner plugins as AgentRunner gRPC runners.")


async def _stdin_closed() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass


async def _serve(
    bridge: Bridge,
    host: str,
    port: int,
    tls: tuple[Path | None, Path | None],
    options: dict[str, float | bool],
) -> None:
    telemetry.configure_logging()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    watcher = asyncio.create_task(_stdin_closed()) if options["watch_stdin"] else None
    if watcher is not None:
        watcher.add_done_callback(lambda _t: stop.set())
    try:
        await bridge.start(float(options["startup_timeout"]))
        handle = await start_server(bridge.catalog, host=host, port=port, tls_cert=tls[0], tls_key=tls[1])
        try:
            sys.stdout.write(f"{READY_PREFIX} {host}:{int(handle)}\n")
            sys.stdout.flush()
            log.info(
                "langbot.bridge_listening",
                address=handle.address,
                runners=[r.get_manifest().id for r in bridge.catalog()],
            )
            await stop.wait()
            await handle.stop(float(options["grace"]))
        finally:
            await handle.server.stop(0)
    finally:
        if watcher is not None:
            watcher.cancel()
        await bridge.close()
        await close_channels()


@app.command()
def main(
    plugins: Annotated[
        Path, typer.Option(help="Directory of LangBot plugins (directories or .lbpkg files).")
    ],
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind; 0 picks a free port.")] = 0,
    work_dir: Annotated[
        Path | None, typer.Option(help="The runtime's working directory (default: a temporary one).")
    ] = None,
    plugin_config: Annotated[
        Path | None, typer.Option(help="YAML/JSON: 'author/name' -> plugin settings.")
    ] = None,
    skip_deps_check: Annotated[bool, typer.Option(help="Do not install plugins' requirements.txt.")] = False,
    startup_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for the plugins to register.")
    ] = 60.0,
    max_in_flight: Annotated[
        int, typer.Option(help="Runs sent to the runtime at once (it refuses over 128).")
    ] = MAX_IN_FLIGHT,
    grace: Annotated[float, typer.Option(help="Seconds in-flight runs get on SIGTERM.")] = 5.0,
    watch_stdin: Annotated[bool, typer.Option(help="Stop when stdin closes (for a parent process).")] = False,
    tls_cert: Annotated[Path | None, typer.Option(help="PEM certificate chain for TLS.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key for TLS.")] = None,
    host_ca: Annotated[
        Path | None, typer.Option(help="CA bundle verifying the host's TLS proxy endpoint.")
    ] = None,
    host_cert: Annotated[
        Path | None, typer.Option(help="Client certificate for mutual TLS to the host.")
    ] = None,
    host_key: Annotated[Path | None, typer.Option(help="Client key for mutual TLS to the host.")] = None,
) -> None:
    """Serve every Runner component of the plugins in --plugins; prints `AGENTRUNNER_LISTENING host:port`."""
    if importlib.util.find_spec("langbot_plugin") is None:
        typer.echo(
            "error: the LangBot plugin runtime is not installed: "
            "pip install 'langbot-agentrunner-runners[langbot]' (langbot-plugin==0.7.18)",
            err=True,
        )
        raise typer.Exit(2)
    if not 1 <= max_in_flight <= 124:
        typer.echo("error: --max-in-flight must be 1..124 (the runtime refuses over 128 actions)", err=True)
        raise typer.Exit(1)
    if host_ca or host_cert or host_key:
        configure_host_tls(HostTls(ca_file=host_ca, cert_file=host_cert, key_file=host_key))
    try:
        bridge = Bridge(
            plugins.resolve(),
            work_dir=work_dir.resolve() if work_dir else None,
            plugin_config=load_plugin_config(plugin_config),
            skip_deps_check=skip_deps_check,
            max_in_flight=max_in_flight,
        )
        options: dict[str, float | bool] = {
            "startup_timeout": startup_timeout,
            "grace": grace,
            "watch_stdin": watch_stdin,
        }
        asyncio.run(_serve(bridge, host, port, (tls_cert, tls_key), options))
    except PluginsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except PortInUseError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except (OSError, RuntimeError, ValueError) as exc:
        typer.echo(f"error: the bridge could not start: {exc}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


if __name__ == "__main__":
    app()
