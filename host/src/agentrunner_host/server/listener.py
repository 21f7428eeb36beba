"""The host's gRPC listener: the server's options (the pending-call backlog), its TLS credentials and
the refusal to serve plaintext off loopback. `HostApp.start` (`server/app.py`) binds with them."""

from __future__ import annotations

from typing import Any

import grpc

from agentrunner_host.auth.clients import is_loopback_address
from agentrunner_host.config.model import HostConfig, LimitsConfig
from agentrunner_host.wire.transport_errors import ListenError

SERVER_OPTIONS = [
    ("grpc.so_reuseport", 0),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5000),
]


def server_options(limits: LimitsConfig) -> list[tuple[str, Any]]:
    """`SERVER_OPTIONS` plus the pending-call backlog of `limits`: soft limit = hard limit, so gRPC core
    drops no call below `max_pending_calls` (its random early drop starts at the soft limit)."""
    return [
        *SERVER_OPTIONS,
        ("grpc.server.max_pending_requests", limits.max_pending_calls),
        ("grpc.server.max_pending_requests_hard_limit", limits.max_pending_calls),
        ("grpc.server_max_unrequested_time_in_server", limits.max_pending_seconds),
    ]


def server_credentials(config: HostConfig) -> grpc.ServerCredentials | None:
    """The TLS credentials of `listen.tls` (mutual TLS with `client_ca_file`); None for plaintext."""
    tls = config.listen.tls
    if tls is None or tls.cert_file is None or tls.key_file is None:
        return None
    client_ca = tls.client_ca_file.read_bytes() if tls.client_ca_file else None
    return grpc.ssl_server_credentials(
        [(tls.key_file.read_bytes(), tls.cert_file.read_bytes())],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )


def check_listener(config: HostConfig, address: str, *, tls: bool) -> None:
    """Plaintext is for loopback: a non-loopback address needs TLS or `listen.allow_plaintext`."""
    if tls or config.listen.allow_plaintext or is_loopback_address(address):
        return
    raise ListenerRefusedError(
        f"refusing to serve plaintext on {address}: API keys and run tokens would cross the network in "
        "clear. Configure listen.tls (with client_ca_file for mutual TLS), listen on a loopback address, "
        "or set listen.allow_plaintext: true behind a proxy that terminates TLS"
    )


class ListenerRefusedError(ListenError):
    """The listen configuration would expose credentials in clear; the message says what to change."""
