"""The runner registry: dials runner endpoints, validates manifests and keeps descriptors.

Each endpoint is probed independently; a dead endpoint or an invalid manifest removes only the runners
it served (with a warning), and the rest keep serving. Down endpoints are probed on a short retry
interval so a returning endpoint is picked up quickly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import pathlib

import grpc
import structlog
from google.protobuf import struct_pb2

from agentrunner.manifest import ManifestError, validate_manifest
from agentrunner.v1 import (
    manifest_pb2,
    runner_service_pb2,
    runner_service_pb2_grpc,
)
from agentrunner_host.config import HostConfig, HostEnv, RunnerEndpointConfig, TlsConfig
from agentrunner_host.ports import utcnow

log = structlog.get_logger("agentrunner_host.registry")

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


def _read(path: pathlib.Path | None) -> bytes | None:
    return path.read_bytes() if path else None


def client_credentials(tls: TlsConfig) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca_file),
        private_key=_read(tls.key_file),
        certificate_chain=_read(tls.cert_file),
    )


class Endpoint:
    """One runner endpoint: its channel, stub and last known health."""

    def __init__(self, config: RunnerEndpointConfig, env: HostEnv) -> None:
        self.config = config
        options: list[tuple[str, object]] = [
            ("grpc.max_receive_message_length", 16 * 1024 * 1024),
            ("grpc.enable_retries", 0),
        ]
        if config.tls is not None:
            if config.tls.server_name:
                options.append(("grpc.ssl_target_name_override", config.tls.server_name))
            self.channel = grpc.aio.secure_channel(config.address, client_credentials(config.tls), options)
        else:
            self.channel = grpc.aio.insecure_channel(config.address, options)
        self.stub = runner_service_pb2_grpc.RunnerServiceStub(self.channel)
        token = config.resolved_token(env)
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.available = False
        self.last_error = ""

    async def close(self) -> None:
        await self.channel.close()


class RunnerRegistry:
    def __init__(self, config: HostConfig, env: HostEnv | None = None) -> None:
        self._config = config
        env = env or HostEnv()
        self.endpoints: dict[str, Endpoint] = {e.id: Endpoint(e, env) for e in config.runners}
        self._runners: dict[str, RegisteredRunner] = {}
        self._task: asyncio.Task[None] | None = None
        self._refresh_lock: dict[str, asyncio.Lock] = {e: asyncio.Lock() for e in self.endpoints}

    # -- lookups ---------------------------------------------------------------------------------------
    def get(self, runner_id: str) -> RegisteredRunner | None:
        return self._runners.get(runner_id)

    def endpoint_of(self, runner: RegisteredRunner) -> Endpoint:
        return self.endpoints[runner.endpoint_id]

    def runners(self) -> list[RegisteredRunner]:
        return sorted(self._runners.values(), key=lambda r: r.runner_id)

    # -- refresh ---------------------------------------------------------------------------------------
    async def refresh(self) -> None:
        """Probes every endpoint once, concurrently."""
        await asyncio.gather(*(self.refresh_endpoint(e) for e in self.endpoints))

    async def refresh_endpoint(self, endpoint_id: str) -> None:
        endpoint = self.endpoints[endpoint_id]
        async with self._refresh_lock[endpoint_id]:
            try:
                response = await endpoint.stub.ListRunners(
                    runner_service_pb2.ListRunnersRequest(),
                    timeout=self._config.registry.describe_timeout_seconds,
                    metadata=endpoint.metadata,
                )
            except grpc.RpcError as exc:
                self._drop_endpoint(endpoint, f"{exc.code().name}: {exc.details()}")
                return
            now = utcnow()
            fresh: dict[str, RegisteredRunner] = {}
            for manifest in response.runners:
                try:
                    validate_manifest(manifest)
                except ManifestError as exc:
                    log.warning(
                        "runner.manifest_invalid",
                        endpoint=endpoint_id,
                        runner_id=manifest.id,
                        reason=str(exc),
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
                fresh[manifest.id] = RegisteredRunner(manifest, endpoint_id, endpoint.config.address, now)
            for runner_id in [r for r, d in self._runners.items() if d.endpoint_id == endpoint_id]:
                if runner_id not in fresh:
                    del self._runners[runner_id]
            self._runners.update(fresh)
            if not endpoint.available:
                log.info("runner.endpoint_up", endpoint=endpoint_id, runners=sorted(fresh))
            endpoint.available = True
            endpoint.last_error = ""

    def _drop_endpoint(self, endpoint: Endpoint, reason: str) -> None:
        removed = [r for r, d in self._runners.items() if d.endpoint_id == endpoint.config.id]
        for runner_id in removed:
            del self._runners[runner_id]
        if endpoint.available or endpoint.last_error != reason:
            log.warning("runner.endpoint_down", endpoint=endpoint.config.id, reason=reason, removed=removed)
        endpoint.available = False
        endpoint.last_error = reason

    def mark_unreachable(self, runner: RegisteredRunner, reason: str) -> None:
        """Called by the run (`run/execution.py`) when a run could not reach the runner's endpoint."""
        endpoint = self.endpoints.get(runner.endpoint_id)
        if endpoint is not None:
            self._drop_endpoint(endpoint, reason)

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
