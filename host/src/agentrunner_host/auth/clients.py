"""Who may call HostService: client authentication, scopes and audited refusals.

A client is identified by an API key (`authorization: Bearer <key>`; the config holds only its sha256)
or by its client certificate over mutual TLS (a subject CN or SAN listed in `tls_names`). Its scopes
say which operations it may call, for which bots and agents; attach, get, cancel and interaction
answers reach only runs of those bots and agents. Without credentials a call is anonymous: accepted
(with every operation) only from a loopback peer while the host listens on a loopback address only, and
only when `auth.anonymous` allows it (the default while no clients are configured). Every refusal is
answered with a typed status (`CREDENTIALS_INVALID` / UNAUTHENTICATED, `UNAUTHORIZED` /
PERMISSION_DENIED) and recorded in the audit log.

`ProxyService` calls are not clients' calls: the run token authorizes them (`proxy/servicer.py`).
Clients send their key with `agentrunner.client.host_service_channel` (call credentials over TLS, one
interceptor per call kind over plaintext), which the CLI and the console use too.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import ipaddress
import os
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import structlog

from agentrunner.errors import AgentRunnerError, CredentialsInvalidError, UnauthorizedError
from agentrunner_host.config.model import CLIENT_OPERATIONS, ClientConfig, HostConfig, Selector
from agentrunner_host.ports import RunRecord, utcnow
from agentrunner_host.proxy.api import AuditSink

log = structlog.get_logger("agentrunner_host.auth.clients")

ANONYMOUS = "anonymous"
#: the metadata key of an API key
AUTHORIZATION_HEADER = "authorization"


def key_digest(key: str) -> str:
    """The sha256 (hex) the config holds for an API key."""
    return hashlib.sha256(key.encode()).hexdigest()


def _selected(selector: Selector, value: str) -> bool:
    return selector == "*" or value in selector


@dataclasses.dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller of HostService and what it may do."""

    client_id: str
    operations: frozenset[str]
    bots: Selector = "*"
    agents: Selector = "*"
    expires_at: dt.datetime | None = None

    @property
    def anonymous(self) -> bool:
        return self.client_id == ANONYMOUS

    def may(self, operation: str) -> bool:
        return operation in self.operations

    def may_use(self, bot_id: str, agent_id: str | None) -> bool:
        """An event of `bot_id` routed to `agent_id` (None: a discarding binding, no agent)."""
        return _selected(self.bots, bot_id) and (agent_id is None or _selected(self.agents, agent_id))

    def sees(self, record: RunRecord) -> bool:
        """Whether the run is one this client may attach to, read, cancel or answer."""
        return self.may_use(record.bot_id, record.agent_id)


class _Context(Protocol):
    """What the gate reads of a `grpc.aio.ServicerContext`."""

    def invocation_metadata(self) -> Any: ...

    def peer(self) -> str: ...

    def auth_context(self) -> Mapping[str, Iterable[bytes]]: ...


def is_loopback_address(address: str) -> bool:
    """Whether a listen address (`host:port`, `[v6]:port`, `unix:path`) binds loopback only."""
    if address.startswith("unix:"):
        return True
    host = address.rsplit(":", 1)[0] if ":" in address else address
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=1024)
def is_loopback_peer(peer: str) -> bool:
    """Whether a gRPC peer string (`ipv4:127.0.0.1:5000`, `ipv6:[::1]:5000`, `unix:...`) is local
    (remembered per peer string: a connection's calls share it, and `ipaddress` parses slowly)."""
    kind, _, rest = peer.partition(":")
    if kind == "unix":
        return True
    if kind not in ("ipv4", "ipv6"):
        return False
    host = rest.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _principal(client: ClientConfig) -> Principal:
    return Principal(
        client_id=client.id,
        operations=frozenset(client.operations),
        bots=client.bots,
        agents=client.agents,
        expires_at=client.expires_at,
    )


class ClientGate:
    """Authenticates HostService calls, checks their scopes and audits every refusal."""

    def __init__(self, config: HostConfig, audit: AuditSink | None, *, listen_address: str) -> None:
        auth = config.auth
        self.audit = audit
        self._by_key: dict[str, Principal] = {}
        self._by_name: dict[str, Principal] = {}
        for client in auth.clients:
            principal = _principal(client)
            digests = list(client.api_key_sha256)
            if client.api_key_env:
                key = os.environ.get(client.api_key_env, "")
                if key:
                    digests.append(key_digest(key))
                else:
                    log.warning("auth.client_key_missing", client=client.id, env=client.api_key_env)
            for digest in digests:
                self._by_key[digest] = principal
            for name in client.tls_names:
                self._by_name[name] = principal
        anonymous = auth.anonymous or ("none" if auth.clients else "loopback")
        #: anonymous calls are accepted (from loopback peers) only on a loopback-only listener
        self.anonymous_allowed = anonymous == "loopback" and is_loopback_address(listen_address)
        self._anonymous = Principal(ANONYMOUS, frozenset(CLIENT_OPERATIONS))

    # -- authentication --------------------------------------------------------------------------------
    def authenticate(self, context: _Context) -> Principal:
        """The caller, from its API key, else its client certificate, else anonymous; raises
        `CredentialsInvalidError` for credentials that are wrong, expired or missing where needed (the
        message says which, without echoing a key)."""
        key = ""
        for name, value in context.invocation_metadata() or ():
            if name == AUTHORIZATION_HEADER:
                text = value if isinstance(value, str) else value.decode(errors="replace")
                scheme, _, key = text.partition(" ")
                if scheme.lower() != "bearer" or not key.strip():
                    raise CredentialsInvalidError(
                        "the authorization header must be `Bearer <api key>`",
                        metadata={"header": AUTHORIZATION_HEADER},
                    )
                key = key.strip()
                break
        if key:
            return self.principal_for_key(key)
        names = self._certificate_names(context) if self._by_name else []
        principal = next((self._by_name[n] for n in names if n in self._by_name), None)
        if principal is None:
            if self.anonymous_allowed and is_loopback_peer(context.peer()):
                return self._anonymous
            names = names or self._certificate_names(context)  # (for the refusal's message)
            if names:
                raise CredentialsInvalidError(
                    f"no API key was sent, and the client certificate ({names[0]}) names no client of this "
                    "host (auth.clients[].tls_names)",
                    metadata={"header": AUTHORIZATION_HEADER, "certificateName": names[0][:128]},
                )
            raise CredentialsInvalidError(
                "this host needs client credentials: an API key (`authorization: Bearer <key>` metadata) or "
                "a client certificate its auth.clients list",
                metadata={"header": AUTHORIZATION_HEADER},
            )
        return self._unexpired(principal)

    def principal_for_key(self, key: str) -> Principal:
        """The client an API key belongs to; `CredentialsInvalidError` for a key no client has, or whose
        client's credentials expired."""
        principal = self._by_key.get(key_digest(key))
        if principal is None:
            raise CredentialsInvalidError(
                "the API key is not valid on this host (its sha256 is in no auth.clients entry)",
                metadata={"header": AUTHORIZATION_HEADER},
            )
        return self._unexpired(principal)

    @staticmethod
    def _unexpired(principal: Principal) -> Principal:
        if principal.expires_at is not None and principal.expires_at <= utcnow():
            raise CredentialsInvalidError(
                f"the credentials of client {principal.client_id!r} expired",
                metadata={"clientId": principal.client_id},
            )
        return principal

    def _certificate_names(self, context: _Context) -> list[str]:
        """The verified client certificate's common name and subject alternative names (none without
        mutual TLS)."""
        try:
            auth = context.auth_context()
        except Exception:  # no transport security on this call
            return []
        return [
            raw.decode(errors="replace")
            for prop in ("x509_common_name", "x509_subject_alternative_name")
            for raw in auth.get(prop, ())
        ]

    # -- authorization ---------------------------------------------------------------------------------
    async def admit(self, context: _Context, method: str, operation: str, *, run_id: str = "") -> Principal:
        """Authenticates the call and checks it may use `operation`; refusals are audited and raised."""
        try:
            principal = self.authenticate(context)
        except AgentRunnerError as err:
            await self.record_refusal(context, method, err, client_id="", run_id=run_id)
            raise
        if not principal.may(operation):
            await self.refuse(
                context,
                principal,
                method,
                f"client {principal.client_id!r} may not call {method}: the operation {operation!r} is not "
                "among its auth.clients operations",
                resource=f"operation:{operation}",
                run_id=run_id,
            )
        return principal

    async def refuse(
        self,
        context: _Context,
        principal: Principal,
        method: str,
        message: str,
        *,
        resource: str,
        run_id: str = "",
    ) -> None:
        """Raises (and audits) UNAUTHORIZED for something `principal` may not do."""
        err = UnauthorizedError(message, metadata={"clientId": principal.client_id, "resource": resource})
        await self.record_refusal(
            context, method, err, client_id=principal.client_id, run_id=run_id, resource=resource
        )
        raise err

    async def record_refusal(
        self,
        context: _Context,
        method: str,
        err: AgentRunnerError,
        *,
        client_id: str,
        run_id: str = "",
        resource: str = "",
        service: str = "HostService",
    ) -> None:
        """One audit record of a refused call (a HostService call; the console's sign-in is
        `service="Console"`). Never raises: a refusal stays a refusal."""
        peer = context.peer()
        log.warning(
            "auth.refused", method=method, client=client_id, reason=err.reason, peer=peer, resource=resource
        )
        if self.audit is None:
            return
        try:
            await self.audit.record_proxy_call(
                run_id=run_id,
                runner_id="",
                method=f"{service}.{method}",
                resource=resource or (f"client:{client_id}" if client_id else "client:?"),
                outcome=err.reason,
                detail={
                    "code": err.status_code.name,
                    "message": err.message,
                    "client": client_id,
                    "peer": peer,
                },
            )
        except Exception as exc:
            log.error("auth.audit_failed", method=method, error=type(exc).__name__)
