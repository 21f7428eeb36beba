"""`python -m agentrunner serve MODULE:ATTR [...]`: serve runners from the command line."""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # no C-core log lines (`I1201 ...`) on the runner's stderr

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


@app.callback()
def _root() -> None:
    """LangBot AgentRunner SDK."""


def main() -> None:
    """The `agentrunner` command's entry point (console script)."""
    app()
