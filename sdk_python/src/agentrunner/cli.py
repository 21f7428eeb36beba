"""`python -m agentrunner serve MODULE:ATTR [...]` (listen for the host) and `connect HOST MODULE:ATTR [...]`
(dial the host: a runtime): serve runners from the command line.

Parsed with the standard library's argparse, not typer: a runner process started this way holds only
what serving needs (typer loads pydantic and rich when it parses, ~6 MiB of every idle runner; issue 37).
Usage errors exit 2 with a usage line, as before.
"""

from __future__ import annotations

# (grpc's C-core log level is set by `agentrunner._grpc_env`, which the package imports before grpc
# loads: by the time this module runs, grpc has read GRPC_VERBOSITY and a value set here would reach
# only the processes a runner starts)
import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrunner.api import HostTls, configure_host_tls
from agentrunner.manifest import ManifestError
from agentrunner.runner import Runner
from agentrunner.server import PortInUseError, serve
from agentrunner.telemetry import TelemetryError


class UsageError(ValueError):
    """A command-line value the command cannot use (exit 2 with the usage line)."""


def load_target(target: str) -> list[Runner | type[Runner]]:
    """`pkg.module:Attr` -> the runner(s) it names (a Runner class or instance, or a list of them)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{target!r} must look like module:Attr")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    items = obj if isinstance(obj, list | tuple) else [obj]
    for item in items:
        if not (isinstance(item, Runner) or (isinstance(item, type) and issubclass(item, Runner))):
            raise UsageError(f"{target!r} is not a Runner class or instance")
    return list(items)


def _load_all(targets: list[str]) -> list[Runner | type[Runner]]:
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    runners: list[Runner | type[Runner]] = []
    for target in targets:
        runners.extend(load_target(target))
    return runners


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def serve_command(args: argparse.Namespace) -> int:
    """Serve runners; prints `AGENTRUNNER_LISTENING host:port` when ready."""
    if args.host_ca or args.host_cert or args.host_key:
        configure_host_tls(HostTls(ca_file=args.host_ca, cert_file=args.host_cert, key_file=args.host_key))
    try:
        runners = _load_all(args.targets)
        serve(
            runners,
            host=args.host,
            port=args.port,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            grace=args.grace,
        )
    except PortInUseError as exc:
        return _fail(str(exc), 2)
    except UsageError:
        raise
    except (TelemetryError, ManifestError, ImportError, AttributeError, ValueError, OSError) as exc:
        return _fail(str(exc), 1)
    return 0


def _labels(values: list[str] | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for value in values or []:
        key, sep, val = value.partition("=")
        if not sep or not key or not val:
            raise UsageError(f"--label {value!r}: expected key=value")
        labels[key] = val
    return labels


def connect_command(args: argparse.Namespace) -> int:
    """Serve runners by connecting out to the host (no listening port); the key comes from
    AGENTRUNNER_RUNTIME_KEY or the file AGENTRUNNER_RUNTIME_KEY_FILE names (over plaintext only to a
    loopback host unless AGENTRUNNER_HOST_ALLOW_PLAINTEXT=1). Prints `AGENTRUNNER_RUNTIME_CONNECTED
    <runtime id> <connection id>` each time the host accepts it; reconnects with backoff when the
    connection drops."""
    import asyncio

    from agentrunner.runtime import RuntimeOptions, RuntimeRefused, connect_async
    from agentrunner.runtime.credentials import take_runtime_key

    labels = _labels(args.label)
    tls_config = None
    if args.host_ca or args.host_cert or args.host_key or args.tls:
        tls_config = HostTls(ca_file=args.host_ca, cert_file=args.host_cert, key_file=args.host_key)
        configure_host_tls(tls_config)  # (proxy calls go to the same address)
    try:
        key = take_runtime_key()  # (out of the environment: nothing the runners start inherits it)
    except ValueError as exc:
        return _fail(str(exc), 1)
    options = RuntimeOptions(
        address=args.address,
        key=key.value if key is not None else "",
        labels=labels,
        slots=args.slots,
        grace=args.grace,
        tls=tls_config,
        detect=[d.strip() for d in args.detect.split(",") if d.strip()],
    )
    if args.runtime_id:
        options.runtime_id = args.runtime_id
    try:
        runners = _load_all(args.targets)
        asyncio.run(connect_async(runners, options))
    except RuntimeRefused as exc:
        return _fail(f"the host refused this runtime: {exc}", 2)
    except UsageError:
        raise
    except (TelemetryError, ManifestError, ImportError, AttributeError, ValueError, OSError) as exc:
        return _fail(str(exc), 1)
    return 0


def _at_least_one(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{number} is not >= 1")
    return number


def _host_tls_options(parser: argparse.ArgumentParser, ca_help: str) -> None:
    parser.add_argument("--host-ca", type=Path, help=ca_help)
    parser.add_argument("--host-cert", type=Path, help="Client certificate for mutual TLS to the host.")
    parser.add_argument("--host-key", type=Path, help="Client key for mutual TLS to the host.")


def build_parser() -> argparse.ArgumentParser:
    """The `agentrunner` command line: `serve` and `connect`."""
    parser = argparse.ArgumentParser(prog="agentrunner", description="LangBot AgentRunner SDK tools.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    serve_p = commands.add_parser(
        "serve", help="Serve runners (listen for the host).", description=serve_command.__doc__
    )
    serve_p.add_argument("targets", nargs="+", metavar="TARGET", help="Runners to serve, as module:Attr.")
    serve_p.add_argument("--host", default="127.0.0.1", help="Interface to bind. [default: 127.0.0.1]")
    serve_p.add_argument(
        "--port", type=int, default=0, help="Port to bind; 0 picks a free port. [default: 0]"
    )
    serve_p.add_argument("--tls-cert", type=Path, help="PEM certificate chain for TLS.")
    serve_p.add_argument("--tls-key", type=Path, help="PEM private key for TLS.")
    serve_p.add_argument(
        "--grace", type=float, default=5.0, help="Seconds in-flight runs get on SIGTERM. [default: 5.0]"
    )
    _host_tls_options(
        serve_p, "CA bundle verifying the host's TLS proxy endpoint [env AGENTRUNNER_HOST_CA_FILE]."
    )
    serve_p.set_defaults(handler=serve_command, command_parser=serve_p)
    connect_p = commands.add_parser(
        "connect",
        help="Serve runners by connecting out to the host (a runtime).",
        description=connect_command.__doc__,
    )
    connect_p.add_argument("address", help="The host's address, as HOST:PORT.")
    connect_p.add_argument("targets", nargs="+", metavar="TARGET", help="Runners to serve, as module:Attr.")
    connect_p.add_argument("--runtime-id", help="This runtime's id on the host [default: the hostname].")
    connect_p.add_argument(
        "--label", action="append", help="A label agents select runtimes by, key=value (repeat)."
    )
    connect_p.add_argument(
        "--slots", type=_at_least_one, default=4, help="Runs executed at once at most. [default: 4]"
    )
    connect_p.add_argument(
        "--grace", type=float, default=5.0, help="Seconds open runs get on SIGTERM. [default: 5.0]"
    )
    _host_tls_options(connect_p, "CA bundle verifying the host's TLS [env AGENTRUNNER_HOST_CA_FILE].")
    connect_p.add_argument("--tls", action="store_true", help="TLS with the system's CAs.")
    connect_p.add_argument(
        "--detect",
        default="claude,codex",
        help="Harness CLIs to look for on PATH, comma-separated ('' for none).",
    )
    connect_p.set_defaults(handler=connect_command, command_parser=connect_p)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """The `agentrunner` command's entry point (console script)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.handler(args)
    except UsageError as exc:
        args.command_parser.error(str(exc))  # (exits 2 with the command's usage line)
    raise SystemExit(code)
