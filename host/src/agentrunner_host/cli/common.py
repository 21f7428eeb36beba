"""Shared pieces of the CLI: consoles, options, the channel to the host and the one error path.

Every failure a user can cause or meet ends in `fail` (one line on stderr, a non-zero exit, never a
traceback); failed calls go through `fail_rpc`, which translates transport jargon
(`transport_errors.explain_rpc_failure`) and prints a typed error as `REASON: message`.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn, TypeVar

import grpc
import typer
from rich.console import Console
from rich.markup import escape

from agentrunner.errors import from_rpc_error
from agentrunner.v1 import host_service_pb2_grpc
from agentrunner_host.wire.transport_errors import explain_rpc_failure

console = Console()
err_console = Console(stderr=True)

HostOpt = Annotated[
    str, typer.Option("--host", "-H", help="Host address (host:port).", envvar="AGENTRUNNER_HOST")
]
# TLS to the host (the same environment variables the SDK reads for a runner's calls to the host)
CaOpt = Annotated[
    pathlib.Path | None,
    typer.Option(
        help="CA bundle verifying the host's certificate (turns TLS on).", envvar="AGENTRUNNER_HOST_CA_FILE"
    ),
]
CertOpt = Annotated[
    pathlib.Path | None,
    typer.Option(help="Client certificate for mutual TLS.", envvar="AGENTRUNNER_HOST_CERT_FILE"),
]
KeyOpt = Annotated[
    pathlib.Path | None, typer.Option(help="Client key for mutual TLS.", envvar="AGENTRUNNER_HOST_KEY_FILE")
]
TlsOpt = Annotated[bool, typer.Option("--tls", help="TLS with the system's CAs.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
ConfigOpt = Annotated[pathlib.Path, typer.Option("--config", "-c", help="Host config file (YAML).")]
DEFAULT_HOST = "127.0.0.1:50051"
#: how long a read call (GetRun, ListRuns, ListRunners, CancelRun) may take
READ_TIMEOUT = 10.0


T = TypeVar("T")


def run_until_interrupted(main: Callable[[], Awaitable[T]]) -> T:
    """`asyncio.run(main())`, where Ctrl-C cancels `main` inside the running loop and then raises
    `KeyboardInterrupt`: the command's channels close while the loop still runs (interrupted from
    outside, grpc.aio's poller callbacks met a closing loop and printed a traceback)."""
    interrupted = False

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_sigint() -> None:
            nonlocal interrupted
            interrupted = True
            task.cancel()

        loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            return await main()
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    try:
        return asyncio.run(guarded())
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr and exit `code` (no traceback); the message is plain text (`[extra]` stays)."""
    err_console.print(f"[red]error[/red]: {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def fail_rpc(exc: grpc.RpcError, target: str, timeout: float | None = None) -> NoReturn:
    """A failed call as one line: transport failures explained, typed errors as `REASON: message`."""
    code = exc.code() if hasattr(exc, "code") else None
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    explained = explain_rpc_failure(code.name if code else "UNKNOWN", details, target, timeout=timeout)
    if explained:
        fail(explained)
    err = from_rpc_error(exc)
    fail(f"{err.reason}: {err.message}")


@dataclass(frozen=True)
class HostTarget:
    """Where the host is and how to reach it (`--host` and the TLS options of a client command)."""

    address: str = DEFAULT_HOST
    ca_file: pathlib.Path | None = None
    cert_file: pathlib.Path | None = None
    key_file: pathlib.Path | None = None
    tls: bool = False

    def channel(self) -> grpc.aio.Channel:
        return host_channel(self.address, self.ca_file, self.cert_file, self.key_file, self.tls)


def call_host(
    target: HostTarget, method: Callable[[Any], Awaitable[Any]], timeout: float = READ_TIMEOUT
) -> Any:
    """One call to the host (`method(stub)`); failures end the command with one line."""

    async def go() -> Any:
        async with target.channel() as channel:
            return await method(host_service_pb2_grpc.HostServiceStub(channel))

    try:
        return asyncio.run(go())
    except grpc.RpcError as exc:
        fail_rpc(exc, target.address, timeout)


#: the API key the client commands send (`authorization: Bearer <key>`); never a command-line option,
#: which other users of the machine could read
API_KEY_ENV = "AGENTRUNNER_HOST_API_KEY"


def host_channel(
    address: str,
    ca_file: pathlib.Path | None = None,
    cert_file: pathlib.Path | None = None,
    key_file: pathlib.Path | None = None,
    tls: bool = False,
) -> grpc.aio.Channel:
    """A channel to the host: plaintext unless TLS is asked for (`--tls` or any of the files), with
    the API key from `AGENTRUNNER_HOST_API_KEY` on every call when it is set."""
    from agentrunner_host.auth.clients import ApiKeyInterceptor

    api_key = os.environ.get(API_KEY_ENV, "").strip()
    interceptors = [ApiKeyInterceptor(api_key)] if api_key else None
    if not (tls or ca_file or cert_file or key_file):
        return grpc.aio.insecure_channel(address, interceptors=interceptors)
    if bool(cert_file) != bool(key_file):
        fail("--cert-file and --key-file go together (mutual TLS)", 2)
    try:
        creds = grpc.ssl_channel_credentials(
            root_certificates=ca_file.read_bytes() if ca_file else None,
            private_key=key_file.read_bytes() if key_file else None,
            certificate_chain=cert_file.read_bytes() if cert_file else None,
        )
    except OSError as exc:
        fail(f"cannot read {exc.filename}: {exc.strerror}", 2)
    return grpc.aio.secure_channel(address, creds, interceptors=interceptors)


def load(config: pathlib.Path) -> Any:
    """The validated host config, or every problem (`file: path: reason` lines) and exit 2."""
    from agentrunner_host.config.model import ConfigError, load_config

    try:
        return load_config(config)
    except ConfigError as exc:
        err_console.print(f"[red]invalid config[/red]\n{exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def print_json(data: Any) -> None:
    """JSON on stdout, plain (no colour codes) when piped."""
    text = json.dumps(data, ensure_ascii=False, indent=2, default=str)
    if console.is_terminal:
        console.print_json(text)
    else:
        print(text)
