"""Calling a host's `HostService` from Python: one channel that authenticates every call it makes.

    from agentrunner.client import ClientCredentials, host_service_channel
    from agentrunner.v1 import host_service_pb2_grpc

    async with host_service_channel("localhost:50443", ClientCredentials.from_env()) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)

A client is identified by an API key (`authorization: Bearer <key>` metadata) or by a client certificate
over mutual TLS. The key is read from `AGENTRUNNER_HOST_API_KEY` or from a file
(`AGENTRUNNER_HOST_API_KEY_FILE`, e.g. a container secret), never from a command line, and never
appears in a repr, a log line or an error message.

How the key rides with each call is gRPC's own business, and it must reach streaming calls as well as
unary ones (grpc.aio files a client interceptor under the first interceptor kind it is an instance of,
so one class covering two kinds silently skips the second):

- over TLS, call credentials (`grpc.metadata_call_credentials` composed with the channel's TLS
  credentials), which gRPC applies to every call of the channel;
- over plaintext, which gRPC will not carry call credentials on, one interceptor per call kind; and only
  to a loopback (or Unix socket) address unless the caller says a proxy in front terminates TLS
  (`allow_plaintext`, `AGENTRUNNER_HOST_ALLOW_PLAINTEXT=1`): the key would otherwise cross a network in
  clear.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

API_KEY_ENV = "AGENTRUNNER_HOST_API_KEY"
API_KEY_FILE_ENV = "AGENTRUNNER_HOST_API_KEY_FILE"
ALLOW_PLAINTEXT_ENV = "AGENTRUNNER_HOST_ALLOW_PLAINTEXT"
#: the metadata key an API key travels in
AUTHORIZATION_HEADER = "authorization"


class ClientCredentialsError(ValueError):
    """Credentials that cannot be used as given; the message says which and what to do (one line)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ApiKey:
    """An API key and where it came from (`source`, for messages: an env var or a file, never the key)."""

    value: str = dataclasses.field(repr=False)
    source: str

    def metadata(self) -> tuple[tuple[str, str]]:
        """The gRPC metadata that presents the token to the host (`authorization: Bearer ...`)."""
        return ((AUTHORIZATION_HEADER, f"Bearer {self.value}"),)


def checked_api_key(text: str, source: str) -> ApiKey:
    """`text` as an API key (surrounding whitespace dropped); `ClientCredentialsError` for an empty one or
    one a gRPC header cannot carry."""
    key = text.strip()
    if not key:
        raise ClientCredentialsError(f"the API key from {source} is empty")
    if any(not (33 <= ord(c) <= 126) for c in key):
        raise ClientCredentialsError(
            f"the API key from {source} has characters a gRPC header cannot carry "
            "(a key is one line of printable ASCII without spaces)"
        )
    return ApiKey(key, source)


def read_api_key_file(path: Path, source: str = "") -> ApiKey:
    """The key in `path` (surrounding whitespace and the final newline ignored)."""
    source = source or f"the file {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ClientCredentialsError(f"cannot read the API key file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ClientCredentialsError(f"the API key file {path} is not text") from None
    return checked_api_key(text, source)


def load_api_key(api_key_file: Path | None = None, environ: Mapping[str, str] = os.environ) -> ApiKey | None:
    """The client's API key: `api_key_file` when given, else `AGENTRUNNER_HOST_API_KEY_FILE`, else
    `AGENTRUNNER_HOST_API_KEY`; None when there is none. Both variables set is an error (which one
    would win is a guess a user should not have to make)."""
    if api_key_file is not None:
        return read_api_key_file(api_key_file, f"--api-key-file {api_key_file}")
    from_file = environ.get(API_KEY_FILE_ENV, "").strip()
    from_env = environ.get(API_KEY_ENV, "")
    if from_file and from_env.strip():
        raise ClientCredentialsError(f"both {API_KEY_ENV} and {API_KEY_FILE_ENV} are set: keep one")
    if from_file:
        return read_api_key_file(Path(from_file), f"{API_KEY_FILE_ENV} ({from_file})")
    if from_env.strip():
        return checked_api_key(from_env, API_KEY_ENV)
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class ClientTls:
    """TLS towards the host: `ca_file` verifies it (None: the system's CAs), `cert_file` + `key_file`
    present a client certificate (mutual TLS), `server_name` overrides the name checked against the
    host's certificate."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials from the TLS files; raises `ClientCredentialsError` with a one-line reason
        when only half of a client certificate is given or a file cannot be read."""
        if bool(self.cert_file) != bool(self.key_file):
            raise ClientCredentialsError(
                "a client certificate needs both files: the certificate (--cert-file, "
                "AGENTRUNNER_HOST_CERT_FILE) and its private key (--key-file, AGENTRUNNER_HOST_KEY_FILE)"
            )

        def read(path: Path | None, what: str) -> bytes | None:
            if path is None:
                return None
            try:
                return path.read_bytes()
            except OSError as exc:
                raise ClientCredentialsError(
                    f"cannot read the {what} {path}: {exc.strerror or exc}"
                ) from None

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file, "CA file"),
            private_key=read(self.key_file, "client key file"),
            certificate_chain=read(self.cert_file, "client certificate file"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ClientCredentials:
    """How a client reaches a host: TLS (None: plaintext) and an API key (None: none, or the client
    certificate identifies the client)."""

    tls: ClientTls | None = None
    api_key: ApiKey | None = None
    #: send the API key over plaintext to a non-loopback address (a proxy in front terminates TLS)
    allow_plaintext: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ClientCredentials:
        """`AGENTRUNNER_HOST_API_KEY` / `_API_KEY_FILE`, `AGENTRUNNER_HOST_CA_FILE` / `_CERT_FILE` /
        `_KEY_FILE` / `_SERVER_NAME` (any of them turns TLS on), `AGENTRUNNER_HOST_ALLOW_PLAINTEXT=1`."""
        files = {
            f: environ.get(f"AGENTRUNNER_HOST_{f.upper()}") or None
            for f in ("ca_file", "cert_file", "key_file")
        }
        server_name = environ.get("AGENTRUNNER_HOST_SERVER_NAME") or None
        tls = None
        if any(files.values()) or server_name:
            tls = ClientTls(**{k: Path(v) for k, v in files.items() if v}, server_name=server_name)
        return cls(
            tls=tls,
            api_key=load_api_key(environ=environ),
            allow_plaintext=environ.get(ALLOW_PLAINTEXT_ENV, "") in ("1", "true", "yes"),
        )


def is_loopback_target(address: str) -> bool:
    """Whether a gRPC target (`host:port`, `[v6]:port`, `unix:path`) is this machine."""
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    host = address.removeprefix("dns:///").removeprefix("ipv4:").removeprefix("ipv6:")
    host = host.rsplit(":", 1)[0] if ":" in host and not host.endswith("]") else host
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _ApiKeyPlugin(grpc.AuthMetadataPlugin):
    """Call credentials: the `authorization` metadata on every call of a TLS channel."""

    def __init__(self, key: ApiKey) -> None:
        self._metadata = key.metadata()

    def __call__(self, context: grpc.AuthMetadataContext, callback: grpc.AuthMetadataPluginCallback) -> None:
        callback(self._metadata, None)


def _with_key(details: Any, metadata: Sequence[tuple[str, str]]) -> Any:
    return details._replace(metadata=grpc.aio.Metadata(*(details.metadata or ()), *metadata))


class _UnaryUnaryKey(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self._metadata = metadata

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return await continuation(_with_key(details, self._metadata), request)


class _UnaryStreamKey(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self._metadata = metadata

    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return await continuation(_with_key(details, self._metadata), request)


class _StreamUnaryKey(grpc.aio.StreamUnaryClientInterceptor):
    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self._metadata = metadata

    async def intercept_stream_unary(
        self, continuation: Callable[..., Any], details: Any, requests: Any
    ) -> Any:
        return await continuation(_with_key(details, self._metadata), requests)


class _StreamStreamKey(grpc.aio.StreamStreamClientInterceptor):
    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self._metadata = metadata

    async def intercept_stream_stream(
        self, continuation: Callable[..., Any], details: Any, requests: Any
    ) -> Any:
        return await continuation(_with_key(details, self._metadata), requests)


def api_key_interceptors(key: ApiKey) -> list[grpc.aio.ClientInterceptor]:
    """One interceptor per call kind (grpc.aio uses an interceptor for one kind only), each adding the
    key's `authorization` metadata: for plaintext channels, which carry no call credentials."""
    md = key.metadata()
    return [_UnaryUnaryKey(md), _UnaryStreamKey(md), _StreamUnaryKey(md), _StreamStreamKey(md)]


def host_service_channel(
    address: str,
    credentials: ClientCredentials | None = None,
    *,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Channel:
    """A channel to a host whose every call carries `credentials` (TLS: call credentials; plaintext:
    interceptors). Raises `ClientCredentialsError` for files it cannot read, a certificate without its
    key, and an API key that would go over plaintext to another machine."""
    credentials = credentials or ClientCredentials()
    key, tls = credentials.api_key, credentials.tls
    options = list(options)
    if tls is None:
        if key is not None and not (credentials.allow_plaintext or is_loopback_target(address)):
            raise ClientCredentialsError(
                f"refusing to send the API key in clear to {address}: connect with TLS (--ca-file, or "
                f"--tls for the system's CAs; AGENTRUNNER_HOST_CA_FILE), or set {ALLOW_PLAINTEXT_ENV}=1 "
                "when a proxy in front of the host terminates TLS"
            )
        interceptors = api_key_interceptors(key) if key is not None else None
        return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)
    channel_creds = tls.credentials()
    if key is not None:
        channel_creds = grpc.composite_channel_credentials(
            channel_creds, grpc.metadata_call_credentials(_ApiKeyPlugin(key), name="agentrunner-api-key")
        )
    if tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return grpc.aio.secure_channel(address, channel_creds, options=options)
