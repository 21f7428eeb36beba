"""Shared pieces of the CLI: consoles, options, the channel to the host and the one error path.

Every failure a user can cause or meet ends in `fail` (one line on stderr, a non-zero exit, never a
traceback); failed calls go through `fail_rpc`, which translates transport jargon
(`transport_errors.explain_rpc_failure`) and prints a typed error as `REASON: message`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import pathlib
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import grpc
import typer

from agentrunner.client import (
    ALLOW_PLAINTEXT_ENV,
    API_KEY_ENV,
    API_KEY_FILE_ENV,
    ClientCredentials,
    ClientCredentialsError,
    ClientTls,
    host_service_channel,
    load_api_key,
)
from agentrunner.errors import from_rpc_error
from agentrunner.fleet import FleetAddressError
from agentrunner.v1 import host_service_pb2_grpc
from agentrunner_host.cli.output import console as console
from agentrunner_host.cli.output import err_console as err_console
from agentrunner_host.cli.output import fail as fail
from agentrunner_host.cli.output import load as load
from agentrunner_host.wire.transport_errors import explain_rpc_failure

if TYPE_CHECKING:
    pass


HostOpt = Annotated[
    str,
    typer.Option(
        "--host",
        "-H",
        help="Host address (host:port); a fleet: several, comma-separated, or dns:///name:port (round robin).",
        envvar="AGENTRUNNER_HOST",
    ),
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
# the API key: from this file or the environment, never from the command line (other users of the
# machine can read a process's arguments)
ApiKeyFileOpt = Annotated[
    pathlib.Path | None,
    typer.Option(
        help="File holding the API key (else AGENTRUNNER_HOST_API_KEY_FILE, else AGENTRUNNER_HOST_API_KEY)."
    ),
]
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


def fail_rpc(exc: grpc.RpcError, target: HostTarget, timeout: float | None = None) -> NoReturn:
    """A failed call as one line: transport failures explained, typed errors as `REASON: message`,
    refused credentials with what to do about them (`credentials_hint`)."""
    code = exc.code() if hasattr(exc, "code") else None
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    creds = target.credentials
    explained = explain_rpc_failure(
        code.name if code else "UNKNOWN",
        details,
        target.address,
        timeout=timeout,
        tls=creds.tls is not None,
        client_cert=str(creds.tls.cert_file) if creds.tls and creds.tls.cert_file else "",
    )
    if explained:
        fail(explained)
    err = from_rpc_error(exc)
    hint = credentials_hint(err.reason, creds)
    fail(f"{err.reason}: {err.message}" + (f"; {hint}" if hint else ""))


def credentials_hint(reason: str, creds: ClientCredentials) -> str:
    """What to do about refused credentials: which one was sent (and from where), how to send one."""
    if reason != "CREDENTIALS_INVALID":
        return ""
    cert = creds.tls.cert_file if creds.tls else None
    if creds.api_key is not None:
        return (
            f"the API key came from {creds.api_key.source}: use a key whose sha256 is in one of the host's "
            "auth.clients (`agentrunner-host auth new-key` makes one)"
        )
    if cert is not None:
        return (
            f"the client certificate sent was {cert}: use one whose CN or DNS SAN a client's tls_names list, "
            f"or send an API key ({API_KEY_ENV}, or --api-key-file FILE)"
        )
    return (
        f"no credentials were sent: set {API_KEY_ENV} to your API key, or pass --api-key-file FILE (or set "
        f"{API_KEY_FILE_ENV}); or present a client certificate with --cert-file and --key-file"
    )


@dataclass(frozen=True)
class HostTarget:
    """Where the host is and how to reach it (`--host`, the TLS options and `--api-key-file` of a client
    command; the API key itself only from the environment or that file)."""

    address: str = DEFAULT_HOST
    ca_file: pathlib.Path | None = None
    cert_file: pathlib.Path | None = None
    key_file: pathlib.Path | None = None
    tls: bool = False
    api_key_file: pathlib.Path | None = None

    @functools.cached_property
    def credentials(self) -> ClientCredentials:
        """The client's credentials (exit 2 with one line when the key file cannot be read, ...)."""
        try:
            api_key = load_api_key(self.api_key_file)
        except ClientCredentialsError as exc:
            fail(str(exc), 2)
        tls = None
        if self.tls or self.ca_file or self.cert_file or self.key_file:
            server_name = os.environ.get("AGENTRUNNER_HOST_SERVER_NAME") or None
            tls = ClientTls(self.ca_file, self.cert_file, self.key_file, server_name)
        allow = os.environ.get(ALLOW_PLAINTEXT_ENV, "") in ("1", "true", "yes")
        return ClientCredentials(tls=tls, api_key=api_key, allow_plaintext=allow)

    def channel(self) -> grpc.aio.Channel:
        try:
            return host_service_channel(self.address, self.credentials)
        except (ClientCredentialsError, FleetAddressError) as exc:
            fail(str(exc), 2)


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
        fail_rpc(exc, target, timeout)


def host_channel(
    address: str,
    ca_file: pathlib.Path | None = None,
    cert_file: pathlib.Path | None = None,
    key_file: pathlib.Path | None = None,
    tls: bool = False,
    api_key_file: pathlib.Path | None = None,
) -> grpc.aio.Channel:
    """A channel to the host: plaintext unless TLS is asked for (`--tls` or any of the files), with the
    API key (`--api-key-file`, else `AGENTRUNNER_HOST_API_KEY_FILE` or `AGENTRUNNER_HOST_API_KEY`) on
    every call, streaming ones included (`agentrunner.client.host_service_channel`)."""
    return HostTarget(address, ca_file, cert_file, key_file, tls, api_key_file).channel()


def print_json(data: Any) -> None:
    """JSON on stdout, plain (no colour codes) when piped."""
    text = json.dumps(data, ensure_ascii=False, indent=2, default=str)
    if console().is_terminal:
        console().print_json(text)
    else:
        print(text)
