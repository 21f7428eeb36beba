"""`python -m agentrunner serve MODULE:ATTR [...]` (listen for the host) and `connect HOST MODULE:ATTR [...]`
(dial the host: a runtime): serve runners from the command line."""

from __future__ import annotations

# (grpc's C-core log level is set by `agentrunner._grpc_env`, which the package imports before grpc
# loads: by the time this module runs, grpc has read GRPC_VERBOSITY and a value set here would reach
# only the processes a runner starts)
import importlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from agentrunner.api import HostTls, configure_host_tls
from agentrunner.manifest import ManifestError
from agentrunner.runner import Runner
from agentrunner.server import PortInUseError, serve
from agentrunner.telemetry import TelemetryError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="LangBot AgentRunner SDK tools.")


def load_target(target: str) -> list[Runner | type[Runner]]:
    """`pkg.module:Attr` -> the runner(s) it names (a Runner class or instance, or a list of them)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise typer.BadParameter(f"{target!r} must look like module:Attr")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    items = obj if isinstance(obj, list | tuple) else [obj]
    for item in items:
        if not (isinstance(item, Runner) or (isinstance(item, type) and issubclass(item, Runner))):
            raise typer.BadParameter(f"{target!r} is not a Runner class or instance")
    return list(items)


@app.command("serve")
def serve_command(
    targets: Annotated[list[str], typer.Argument(help="Runners to serve, as module:Attr.")],
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind; 0 picks a free port.")] = 0,
    tls_cert: Annotated[Path | None, typer.Option(help="PEM certificate chain for TLS.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key for TLS.")] = None,
    grace: Annotated[float, typer.Option(help="Seconds in-flight runs get on SIGTERM.")] = 5.0,
    host_ca: Annotated[
        Path | None,
        typer.Option(
            help="CA bundle verifying the host's TLS proxy endpoint [env AGENTRUNNER_HOST_CA_FILE]."
        ),
    ] = None,
    host_cert: Annotated[
        Path | None, typer.Option(help="Client certificate for mutual TLS to the host.")
    ] = None,
    host_key: Annotated[Path | None, typer.Option(help="Client key for mutual TLS to the host.")] = None,
) -> None:
    """Serve runners; prints `AGENTRUNNER_LISTENING host:port` when ready."""
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    if host_ca or host_cert or host_key:
        configure_host_tls(HostTls(ca_file=host_ca, cert_file=host_cert, key_file=host_key))
    runners: list[Runner | type[Runner]] = []
    try:
        for target in targets:
            runners.extend(load_target(target))
        serve(runners, host=host, port=port, tls_cert=tls_cert, tls_key=tls_key, grace=grace)
    except PortInUseError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except TelemetryError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except (ManifestError, ImportError, AttributeError, ValueError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _labels(values: list[str] | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for value in values or []:
        key, sep, val = value.partition("=")
        if not sep or not key or not val:
            raise typer.BadParameter(f"--label {value!r}: expected key=value")
        labels[key] = val
    return labels


@app.command("connect")
def connect_command(
    address: Annotated[str, typer.Argument(help="The host's address, as HOST:PORT.")],
    targets: Annotated[list[str], typer.Argument(help="Runners to serve, as module:Attr.")],
    runtime_id: Annotated[
        str | None,
        typer.Option("--runtime-id", help="This runtime's id on the host [default: the hostname]."),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option("--label", help="A label agents select runtimes by, key=value (repeat)."),
    ] = None,
    slots: Annotated[int, typer.Option(help="Runs executed at once at most.", min=1)] = 4,
    grace: Annotated[float, typer.Option(help="Seconds open runs get on SIGTERM.")] = 5.0,
    host_ca: Annotated[
        Path | None, typer.Option(help="CA bundle verifying the host's TLS [env AGENTRUNNER_HOST_CA_FILE].")
    ] = None,
    host_cert: Annotated[
        Path | None, typer.Option(help="Client certificate for mutual TLS to the host.")
    ] = None,
    host_key: Annotated[Path | None, typer.Option(help="Client key for mutual TLS to the host.")] = None,
    tls: Annotated[bool, typer.Option("--tls", help="TLS with the system's CAs.")] = False,
    detect: Annotated[
        str, typer.Option(help="Harness CLIs to look for on PATH, comma-separated ('' for none).")
    ] = "claude,codex",
) -> None:
    """Serve runners by connecting out to the host (no listening port); the key comes from
    AGENTRUNNER_RUNTIME_KEY or the file AGENTRUNNER_RUNTIME_KEY_FILE names (over plaintext only to a
    loopback host unless AGENTRUNNER_HOST_ALLOW_PLAINTEXT=1). Prints `AGENTRUNNER_RUNTIME_CONNECTED <runtime id> <connection id>` each time
    the host accepts it; reconnects with backoff when the connection drops."""
    import asyncio

    from agentrunner.runtime import RuntimeOptions, RuntimeRefused, connect_async
    from agentrunner.runtime.credentials import take_runtime_key

    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    tls_config = None
    if host_ca or host_cert or host_key or tls:
        tls_config = HostTls(ca_file=host_ca, cert_file=host_cert, key_file=host_key)
        configure_host_tls(tls_config)  # (proxy calls go to the same address)
    try:
        key = take_runtime_key()  # (out of the environment: nothing the runners start inherits it)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    options = RuntimeOptions(
        address=address,
        key=key.value if key is not None else "",
        labels=_labels(label),
        slots=slots,
        grace=grace,
        tls=tls_config,
        detect=[d.strip() for d in detect.split(",") if d.strip()],
    )
    if runtime_id:
        options.runtime_id = runtime_id
    runners: list[Runner | type[Runner]] = []
    try:
        for target in targets:
            runners.extend(load_target(target))
        asyncio.run(connect_async(runners, options))
    except RuntimeRefused as exc:
        typer.echo(f"error: the host refused this runtime: {exc}", err=True)
        raise typer.Exit(2) from None
    except TelemetryError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except (ManifestError, ImportError, AttributeError, ValueError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


@app.callback()
def _root() -> None:
    """LangBot AgentRunner SDK."""


def main() -> None:
    """The `agentrunner` command's entry point (console script)."""
    app()
