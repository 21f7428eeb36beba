"""Who may connect as a runtime, and what it may announce (`runtimes.clients` in the host config).

A runtime presents the same kinds of credentials as a HostService client (`auth/clients.py`): an API
key in `authorization: Bearer <key>` (the config keeps its sha256) or a client certificate over mutual
TLS (a subject CN or SAN in `tls_names`). Without credentials a runtime is anonymous: accepted only from
a loopback peer, while the host listens on a loopback address only and `runtimes.anonymous` allows it
(the default while no runtime clients are configured). Refusals are typed: `CREDENTIALS_INVALID`
(UNAUTHENTICATED) for credentials, `UNAUTHORIZED` (PERMISSION_DENIED) for what a credential may not
announce.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

import structlog

from agentrunner.errors import CredentialsInvalidError, UnauthorizedError
from agentrunner_host.auth.clients import (
    AUTHORIZATION_HEADER,
    is_loopback_address,
    is_loopback_peer,
    key_digest,
)
from agentrunner_host.config.model import HostConfig
from agentrunner_host.config.runtimes import RuntimeClientConfig
from agentrunner_host.ports import utcnow

log = structlog.get_logger("agentrunner_host.runtimes.gate")

ANONYMOUS = "anonymous"


class _Context(Protocol):
    """What the gate reads of a `grpc.aio.ServicerContext`."""

    def invocation_metadata(self) -> Any: ...

    def peer(self) -> str: ...

    def auth_context(self) -> Mapping[str, Iterable[bytes]]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class RuntimeClient:
    """An authenticated runtime credential and what it may announce."""

    client_id: str
    runner_ids: list[str] | Literal["*"] = "*"
    labels: tuple[str, ...] = ("*",)
    max_slots: int = 64
    expires_at: dt.datetime | None = None

    @property
    def anonymous(self) -> bool:
        return self.client_id == ANONYMOUS

    def lists(self, runner_id: str) -> bool:
        """Whether the credential names the runner id explicitly."""
        return self.runner_ids != "*" and runner_id in self.runner_ids

    def may_serve(self, runner_id: str) -> bool:
        return self.runner_ids == "*" or runner_id in self.runner_ids

    def may_label(self, key: str, value: str) -> bool:
        return any(p == "*" or p == f"{key}=*" or p == f"{key}={value}" for p in self.labels)


def _client(config: RuntimeClientConfig) -> RuntimeClient:
    return RuntimeClient(
        client_id=config.id,
        runner_ids=config.runner_ids if config.runner_ids == "*" else list(config.runner_ids),
        labels=tuple(config.labels),
        max_slots=config.max_slots,
        expires_at=config.expires_at,
    )


class RuntimeGate:
    """Authenticates `RuntimeService` calls (see the module docstring)."""

    def __init__(self, config: HostConfig, *, listen_address: str) -> None:
        runtimes = config.runtimes
        self._by_key: dict[str, RuntimeClient] = {}
        self._by_name: dict[str, RuntimeClient] = {}
        #: runner id -> the runtime clients that list it by name
        self.listed: dict[str, set[str]] = {}
        for client in runtimes.clients:
            principal = _client(client)
            digests = list(client.api_key_sha256)
            if client.api_key_env:
                key = os.environ.get(client.api_key_env, "")
                if key:
                    digests.append(key_digest(key))
                else:
                    log.warning("runtime.client_key_missing", client=client.id, env=client.api_key_env)
            for digest in digests:
                self._by_key[digest] = principal
            for name in client.tls_names:
                self._by_name[name] = principal
            if client.runner_ids != "*":
                for runner_id in client.runner_ids:
                    self.listed.setdefault(runner_id, set()).add(client.id)
        anonymous = runtimes.anonymous or ("none" if runtimes.clients else "loopback")
        self.anonymous_allowed = anonymous == "loopback" and is_loopback_address(listen_address)
        self._anonymous = RuntimeClient(ANONYMOUS)

    def authenticate(self, context: _Context) -> RuntimeClient:
        """The runtime's credential; raises `CredentialsInvalidError` when it is wrong, expired, or
        missing where one is needed."""
        key = ""
        for name, value in context.invocation_metadata() or ():
            if name == AUTHORIZATION_HEADER:
                text = value if isinstance(value, str) else value.decode(errors="replace")
                scheme, _, key = text.partition(" ")
                if scheme.lower() != "bearer" or not key.strip():
                    raise CredentialsInvalidError(
                        "the authorization header must be `Bearer <runtime key>`",
                        metadata={"header": AUTHORIZATION_HEADER},
                    )
                key = key.strip()
                break
        client: RuntimeClient | None
        if key:
            client = self._by_key.get(key_digest(key))
            if client is None:
                raise CredentialsInvalidError("the runtime key is not valid")
        else:
            client = self._certificate_client(context)
        if client is None:
            if self.anonymous_allowed and is_loopback_peer(context.peer()):
                return self._anonymous
            raise CredentialsInvalidError(
                "this host needs runtime credentials: a runtime key (AGENTRUNNER_RUNTIME_KEY, sent as "
                "`authorization: Bearer <key>`) or a client certificate",
                metadata={"header": AUTHORIZATION_HEADER},
            )
        if client.expires_at is not None and client.expires_at <= utcnow():
            raise CredentialsInvalidError(
                f"the runtime credentials of client {client.client_id!r} expired",
                metadata={"clientId": client.client_id},
            )
        return client

    def _certificate_client(self, context: _Context) -> RuntimeClient | None:
        if not self._by_name:
            return None
        try:
            auth = context.auth_context()
        except Exception:  # no transport security on this call
            return None
        for prop in ("x509_common_name", "x509_subject_alternative_name"):
            for raw in auth.get(prop, ()):
                client = self._by_name.get(raw.decode(errors="replace"))
                if client is not None:
                    return client
        return None

    def check_labels(self, client: RuntimeClient, labels: Mapping[str, str]) -> None:
        """Raises UNAUTHORIZED for the first label the credential may not announce."""
        for key, value in sorted(labels.items()):
            if not client.may_label(key, value):
                raise UnauthorizedError(
                    f"runtime client {client.client_id!r} may not announce label {key}={value}",
                    metadata={"clientId": client.client_id, "resource": f"label:{key}={value}"},
                )

    def check_runner(self, client: RuntimeClient, runner_id: str, endpoint_owner: str | None) -> None:
        """Raises UNAUTHORIZED unless the credential may serve the runner id: it must allow it, and an id
        a dialed endpoint (`endpoint_owner`) or another runtime client owns must be listed by name."""
        denied = ""
        owner = ""
        if not client.may_serve(runner_id):
            denied = f"runtime client {client.client_id!r} may not serve runner {runner_id!r}"
        elif not client.lists(runner_id):
            others = self.listed.get(runner_id)
            if others:
                owner = "runtime clients " + ", ".join(sorted(others))
            elif endpoint_owner:
                owner = endpoint_owner
            if owner:
                denied = f"runner {runner_id!r} belongs to {owner}; list it in this runtime client's runner_ids to share it"
        if denied:
            raise UnauthorizedError(
                denied,
                metadata={
                    "clientId": client.client_id,
                    "resource": f"runner:{runner_id}",
                    **({"owner": owner} if owner else {}),
                },
            )
