"""The runner registry: dials runner endpoints, validates manifests and keeps descriptors.

Each endpoint is probed independently; a dead endpoint, an answer that does not decode or an invalid
manifest removes only the runners it served (with a warning), and the rest keep serving. Down endpoints
are probed on a short retry interval so a returning endpoint is picked up quickly.

Runner identity: a runner id is served only by the endpoint(s) configured for it (`runner_ids`); an
endpoint without such a list may serve ids no endpoint lists, and an id stays bound to the first
endpoint that served it for the life of the process. Another endpoint announcing a bound id is refused
and logged (`runner.identity_refused`), also once the first endpoint is down: its runs fail
`runner.unavailable` until it returns, they are never sent elsewhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import structlog
from google.protobuf import struct_pb2

from agentrunner.errors import bounded
from agentrunner.manifest import ManifestError
from agentrunner.manifest import validate_manifest as validate_runner_manifest
from agentrunner.v1 import manifest_pb2, runner_service_pb2
from agentrunner_host.config.model import HostConfig, HostEnv, RunnerEndpointConfig, TlsConfig
from agentrunner_host.observability.memory import LARGE_MESSAGE_BYTES, note_message
from agentrunner_host.observability.telemetry import RUNNER_ENDPOINT_UP
from agentrunner_host.ports import utcnow
from agentrunner_host.registry.targets import CallTarget, RunCall, RuntimePlacement
from agentrunner_host.wire.boundary import check_message
from agentrunner_host.wire.transport_errors import explain_rpc_failure

log = structlog.get_logger("agentrunner_host.registry.endpoints")

_SELECTOR_TYPES = {
    manifest_pb2.CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR,
    manifest_pb2.CONFIG_FIELD_TYPE_MODEL_FALLBACK_SELECTOR,
    manifest_pb2.CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR,
    manifest_pb2.CONFIG_FIELD_TYPE_KNOWLEDGE_BASE_MULTI_SELECTOR,
}


@dataclasses.dataclass(slots=True)
class RegisteredRunner:
    manifest: manifest_pb2.RunnerManifest
    endpoint_id: str
    address: str
    refreshed_at: dt.datetime

    @property
    def runner_id(self) -> str:
        return self.manifest.id

    @property
    def selector_fields(self) -> list[manifest_pb2.ConfigField]:
        return [f for f in self.manifest.config_schema if f.type in _SELECTOR_TYPES]

    def call_target(self) -> CallTarget | None:
        """Where a run of this runner goes when it is not the endpoint `endpoint_id` (a runtime's slot,
        `runtimes/calls.py`); None: the dialed endpoint."""
        return None


def validate_manifest(manifest: manifest_pb2.RunnerManifest) -> None:
    """Raises ManifestError unless the manifest is one this host can serve: the SDK's rules, and
    values the stores and the wire can carry (the boundary rules: no NaN default, no NUL, ...)."""
    unstorable = check_message(manifest, enums=False)
    if unstorable:
        where, problem = unstorable[0]
        raise ManifestError(f"{where}: {problem}")
    validate_runner_manifest(manifest)


def _read(path: pathlib.Path | None) -> bytes | None:
    return path.read_bytes() if path else None


def client_credentials(tls: TlsConfig) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca_file),
        private_key=_read(tls.key_file),
        certificate_chain=_read(tls.cert_file),
    )


def _channel(config: RunnerEndpointConfig, retry_seconds: float) -> grpc.aio.Channel:
    """A channel to the endpoint whose reconnect backoff never exceeds the registry's retry interval
    (gRPC's default grows to 120 s, and a call on a channel in backoff fails without trying)."""
    backoff_ms = max(100, int(retry_seconds * 1000))
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", 16 * 1024 * 1024),
        ("grpc.enable_retries", 0),
        ("grpc.initial_reconnect_backoff_ms", min(1000, backoff_ms)),
        ("grpc.min_reconnect_backoff_ms", min(1000, backoff_ms)),
        ("grpc.max_reconnect_backoff_ms", backoff_ms),
    ]
    if config.tls is not None:
        if config.tls.server_name:
            options.append(("grpc.ssl_target_name_override", config.tls.server_name))
        return grpc.aio.secure_channel(config.address, client_credentials(config.tls), options)
    return grpc.aio.insecure_channel(config.address, options)


def _lenient(cls: type[Any]) -> Callable[[bytes], Any]:
    """A response deserializer that answers None for bytes that do not decode (what grpc itself hands
    over then, after logging a traceback for what is the runner's fault, not the host's)."""
    from_string = cls.FromString

    def deserialize(data: bytes) -> Any:
        if len(data) >= LARGE_MESSAGE_BYTES:
            note_message(len(data))
        try:
            return from_string(data)
        except Exception:
            return None

    return deserialize


class RunnerStub:
    """`RunnerServiceStub` whose answers that do not decode arrive as None (the caller's to refuse)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        prefix = "/agentrunner.v1.RunnerService/"
        self.Run: grpc.aio.UnaryStreamMultiCallable[runner_service_pb2.RunRequest, Any] = (
            channel.unary_stream(
                prefix + "Run",
                request_serializer=runner_service_pb2.RunRequest.SerializeToString,
                response_deserializer=_lenient(runner_service_pb2.RunResponse),
            )
        )
        self.ListRunners = channel.unary_unary(
            prefix + "ListRunners",
            request_serializer=runner_service_pb2.ListRunnersRequest.SerializeToString,
            response_deserializer=_lenient(runner_service_pb2.ListRunnersResponse),
        )
        self.DescribeRunner = channel.unary_unary(
            prefix + "DescribeRunner",
            request_serializer=runner_service_pb2.DescribeRunnerRequest.SerializeToString,
            response_deserializer=_lenient(runner_service_pb2.DescribeRunnerResponse),
        )


class Endpoint:
    """One runner endpoint: its channel, stub and last known health."""

    def __init__(self, config: RunnerEndpointConfig, env: HostEnv, retry_seconds: float = 2.0) -> None:
        self.config = config
        self.retry_seconds = retry_seconds
        self.channel = _channel(config, retry_seconds)
        self.stub = RunnerStub(self.channel)
        token = config.resolved_token(env)
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.available = False
        self.last_error = ""
        self.checked_at: dt.datetime | None = None
        self.succeeded_at: dt.datetime | None = None
        self.runner_ids: list[str] = []
        self._retired: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return self.config.address

    def start_call(
        self, request: runner_service_pb2.RunRequest, *, timeout: float, metadata: Sequence[tuple[str, str]]
    ) -> RunCall:
        """`RunnerService.Run` on this endpoint (its bearer token first in the metadata)."""
        call: RunCall = self.stub.Run(request, timeout=timeout, metadata=self.metadata + tuple(metadata))
        return call

    def fresh_stub(self) -> tuple[grpc.aio.Channel, RunnerStub]:
        """A new channel (no reconnect backoff state) for probing an endpoint that was down."""
        channel = _channel(self.config, self.retry_seconds)
        return channel, RunnerStub(channel)

    def adopt(self, channel: grpc.aio.Channel, stub: RunnerStub) -> None:
        """Serves from `channel` from now on; the old one closes once its calls ended (30 s at most)."""
        old, self.channel, self.stub = self.channel, channel, stub
        task = asyncio.create_task(old.close(grace=30), name=f"retire-channel-{self.config.id}")
        self._retired.add(task)
        task.add_done_callback(self._retired.discard)

    async def close(self) -> None:
        await self.channel.close()
        for task in list(self._retired):
            task.cancel()
        await asyncio.gather(*self._retired, return_exceptions=True)


class RunnerRegistry:
    def __init__(self, config: HostConfig, env: HostEnv | None = None) -> None:
        self._config = config
        env = env or HostEnv()
        retry = config.registry.retry_interval_seconds
        self.endpoints: dict[str, Endpoint] = {e.id: Endpoint(e, env, retry) for e in config.runners}
        self._runners: dict[str, RegisteredRunner] = {}
        self._task: asyncio.Task[None] | None = None
        self._refresh_lock: dict[str, asyncio.Lock] = {e: asyncio.Lock() for e in self.endpoints}
        #: runner id -> the endpoints configured to serve it (`runner_ids`)
        self._listed: dict[str, set[str]] = {}
        for e in config.runners:
            for runner_id in e.runner_ids or ():
                self._listed.setdefault(runner_id, set()).add(e.id)
        #: runner id -> the endpoint it is bound to in this process (ids no endpoint lists)
        self._bound: dict[str, str] = {}
        self._refused: set[tuple[str, str]] = set()
        #: runtimes that dial in, when the host has them (`HostApp` sets it), and the runner ids runtime
        #: clients list by name (no endpoint without `runner_ids` may take those)
        self.runtimes: RuntimePlacement | None = None
        self.runtime_listed: frozenset[str] = frozenset(
            r for c in config.runtimes.clients if c.runner_ids != "*" for r in c.runner_ids
        )

    # -- lookups ---------------------------------------------------------------------------------------
    def get(self, runner_id: str) -> RegisteredRunner | None:
        return self._runners.get(runner_id)

    def endpoint_of(self, runner: RegisteredRunner) -> CallTarget:
        """Where the runner's runs are sent: its endpoint, or the runtime it was placed on."""
        target = runner.call_target()
        return target if target is not None else self.endpoints[runner.endpoint_id]

    def runners(self) -> list[RegisteredRunner]:
        return sorted(self._runners.values(), key=lambda r: r.runner_id)

    # -- refresh ---------------------------------------------------------------------------------------
    async def refresh(self) -> None:
        """Probes every endpoint once, concurrently; takes the answers in config order (so an id no
        endpoint lists is bound to the first endpoint in the config that serves it, however fast the
        others answer)."""
        ids = list(self.endpoints)
        for endpoint_id in ids:
            await self._refresh_lock[endpoint_id].acquire()
        try:
            answers = await asyncio.gather(*(self._fetch(self.endpoints[e]) for e in ids))
            for endpoint_id, answer in zip(ids, answers, strict=True):
                if answer is not None:
                    self._register(self.endpoints[endpoint_id], answer)
        finally:
            for endpoint_id in ids:
                self._refresh_lock[endpoint_id].release()

    async def refresh_endpoint(self, endpoint_id: str) -> None:
        endpoint = self.endpoints[endpoint_id]
        async with self._refresh_lock[endpoint_id]:
            answer = await self._fetch(endpoint)
            if answer is not None:
                self._register(endpoint, answer)

    async def _fetch(self, endpoint: Endpoint) -> runner_service_pb2.ListRunnersResponse | None:
        """The endpoint's `ListRunners` answer; None (and the endpoint marked down) when it fails or
        does not decode."""
        # A down endpoint is probed on a fresh channel: the old one may sit in reconnect backoff,
        # failing every call without trying, for longer than the retry interval.
        channel, stub = endpoint.fresh_stub() if not endpoint.available else (None, endpoint.stub)
        timeout = self._config.registry.describe_timeout_seconds
        endpoint.checked_at = utcnow()
        try:
            response = await stub.ListRunners(
                runner_service_pb2.ListRunnersRequest(), timeout=timeout, metadata=endpoint.metadata
            )
        except grpc.RpcError as exc:
            if channel is not None:
                await channel.close()
            code, details = exc.code().name, bounded(exc.details() or "", 200)
            reason = explain_rpc_failure(code, details, endpoint.config.address, timeout=timeout)
            self._drop_endpoint(endpoint, reason or f"{code}: {details}")
            return None
        if not isinstance(response, runner_service_pb2.ListRunnersResponse):
            # the answer did not decode (`RunnerStub` hands over None)
            if channel is not None:
                await channel.close()
            self._drop_endpoint(endpoint, "its ListRunners answer does not decode as ListRunnersResponse")
            return None
        if channel is not None:
            endpoint.adopt(channel, stub)
        return response

    def _may_serve(self, endpoint_id: str, runner_id: str) -> str | None:
        """None when the endpoint may serve the runner id, else why not."""
        listed = self._listed.get(runner_id)
        if listed is not None:
            return None if endpoint_id in listed else f"configured for {sorted(listed)}"
        if self.endpoints[endpoint_id].config.runner_ids is not None:
            return "not in the endpoint's runner_ids"
        if runner_id in self.runtime_listed:
            return "listed by runtimes.clients (runtimes serve it)"
        bound = self._bound.get(runner_id)
        if bound is None and self.runtimes is not None and self.runtimes.serves(runner_id):
            return "served by a connected runtime"
        return None if bound in (None, endpoint_id) else f"bound to endpoint {bound!r}"

    def _register(self, endpoint: Endpoint, response: runner_service_pb2.ListRunnersResponse) -> None:
        """Takes the valid manifests of an endpoint's answer whose ids it may serve."""
        endpoint_id = endpoint.config.id
        now = endpoint.succeeded_at = utcnow()
        fresh: dict[str, RegisteredRunner] = {}
        for manifest in response.runners:
            try:
                validate_manifest(manifest)
            except ManifestError as exc:
                log.warning(
                    "runner.manifest_invalid",
                    endpoint=endpoint_id,
                    runner_id=bounded(manifest.id, 200),
                    reason=str(exc),
                )
                continue
            refused = self._may_serve(endpoint_id, manifest.id)
            if refused is not None:
                if (endpoint_id, manifest.id) not in self._refused:
                    self._refused.add((endpoint_id, manifest.id))
                    log.warning(
                        "runner.identity_refused", endpoint=endpoint_id, runner_id=manifest.id, reason=refused
                    )
                continue
            owner = self._runners.get(manifest.id)
            if owner is not None and owner.endpoint_id != endpoint_id:
                log.warning(
                    "runner.duplicate_id",
                    runner_id=manifest.id,
                    kept=owner.endpoint_id,
                    ignored=endpoint_id,
                )
                continue
            if manifest.id not in self._listed:
                self._bound.setdefault(manifest.id, endpoint_id)
            fresh[manifest.id] = RegisteredRunner(manifest, endpoint_id, endpoint.config.address, now)
        for runner_id in [r for r, d in self._runners.items() if d.endpoint_id == endpoint_id]:
            if runner_id not in fresh:
                del self._runners[runner_id]
        self._runners.update(fresh)
        if not endpoint.available:
            log.info("runner.endpoint_up", endpoint=endpoint_id, runners=sorted(fresh))
        endpoint.available = True
        endpoint.last_error = ""
        endpoint.runner_ids = sorted(fresh)
        RUNNER_ENDPOINT_UP.labels(endpoint_id).set(1)

    def _drop_endpoint(self, endpoint: Endpoint, reason: str) -> None:
        removed = [r for r, d in self._runners.items() if d.endpoint_id == endpoint.config.id]
        for runner_id in removed:
            del self._runners[runner_id]
        if endpoint.available or endpoint.last_error != reason:
            log.warning("runner.endpoint_down", endpoint=endpoint.config.id, reason=reason, removed=removed)
        endpoint.available = False
        endpoint.last_error = reason
        RUNNER_ENDPOINT_UP.labels(endpoint.config.id).set(0)

    def mark_unreachable(self, runner: RegisteredRunner, reason: str) -> None:
        """Called by the run (`run/execution.py`) when a run could not reach the runner's endpoint (`reason` may be
        gRPC's `UNAVAILABLE: <details>`; it is kept explained)."""
        endpoint = self.endpoints.get(runner.endpoint_id)
        if endpoint is not None:
            code, _, details = reason.partition(": ")
            explained = explain_rpc_failure(code, details, endpoint.config.address)
            self._drop_endpoint(endpoint, explained or reason)

    def owner_of(self, runner_id: str) -> str | None:
        """Which dialed endpoint owns a runner id (lists it, or serves it unlisted), for runtimes'
        registrations; None: no endpoint does."""
        listed = self._listed.get(runner_id)
        if listed:
            return "endpoint " + ", ".join(sorted(listed))
        bound = self._bound.get(runner_id)
        return f"endpoint {bound}" if bound is not None else None

    async def resolve_for(
        self, runner_id: str, selector: dict[str, str]
    ) -> tuple[RegisteredRunner | None, str]:
        """Where a run of `runner_id` goes, or why it cannot go anywhere (''). An agent with a runtime
        selector runs on runtimes only; otherwise a dialed endpoint that is up comes first, then a
        connected runtime (docs/runtimes.md)."""
        if not selector:
            runner = self._runners.get(runner_id)
            if runner is not None:
                return runner, ""
        runtimes = self.runtimes
        if runtimes is not None and (selector or runtimes.serves(runner_id)):
            placed, why = await runtimes.place(runner_id, selector)
            return placed, why
        runner = await self.resolve(runner_id)
        if runner is not None:
            return runner, ""
        if runtimes is not None:
            return None, f"no endpoint serves it and no runtime serving {runner_id} is connected"
        return None, ""

    async def resolve(self, runner_id: str) -> RegisteredRunner | None:
        """The runner's descriptor, refreshing down endpoints on demand when it is unknown."""
        runner = self._runners.get(runner_id)
        if runner is not None:
            return runner
        down = [e for e, ep in self.endpoints.items() if not ep.available]
        await asyncio.gather(*(self.refresh_endpoint(e) for e in down))
        return self._runners.get(runner_id)

    # -- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._loop(), name="runner-registry-refresh")

    async def _loop(self) -> None:
        cfg = self._config.registry
        since_full = 0.0
        while True:
            await asyncio.sleep(cfg.retry_interval_seconds)
            since_full += cfg.retry_interval_seconds
            try:
                if since_full >= cfg.refresh_interval_seconds:
                    since_full = 0.0
                    await self.refresh()
                else:
                    down = [e for e, ep in self.endpoints.items() if not ep.available]
                    await asyncio.gather(*(self.refresh_endpoint(e) for e in down))
            except Exception:  # a refresh bug must not stop future refreshes
                log.exception("runner.refresh_failed")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.gather(*(e.close() for e in self.endpoints.values()))


def struct_to_dict(value: struct_pb2.Struct) -> dict[str, object]:
    from google.protobuf import json_format

    return json_format.MessageToDict(value)
