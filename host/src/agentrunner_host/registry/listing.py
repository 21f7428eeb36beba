"""The runner registry as a client sees it (`HostService.ListRunners`), transport-neutral."""

from __future__ import annotations

from agentrunner.v1 import host_service_pb2
from agentrunner_host.registry.endpoints import RunnerRegistry


def list_runners(registry: RunnerRegistry) -> host_service_pb2.HostServiceListRunnersResponse:
    """Every registered runner with its manifest, and every configured endpoint with its health (a down
    endpoint with its last error and no runners)."""
    out = host_service_pb2.HostServiceListRunnersResponse()
    for runner in registry.runners():
        endpoint = registry.endpoints[runner.endpoint_id]
        item = out.runners.add(
            endpoint_id=runner.endpoint_id, address=runner.address, available=endpoint.available
        )
        item.manifest.CopyFrom(runner.manifest)
        item.refresh_time.FromDatetime(runner.refreshed_at)
    for endpoint_id, endpoint in sorted(registry.endpoints.items()):
        status = out.endpoints.add(
            endpoint_id=endpoint_id,
            address=endpoint.config.address,
            available=endpoint.available,
            last_error=endpoint.last_error,
            runner_ids=endpoint.runner_ids if endpoint.available else [],
        )
        if endpoint.checked_at is not None:
            status.check_time.FromDatetime(endpoint.checked_at)
        if endpoint.succeeded_at is not None:
            status.success_time.FromDatetime(endpoint.succeeded_at)
    return out
