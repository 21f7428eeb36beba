"""`RequestPlatformAction` (PROTOCOL_V1 §8): reserved in v1.

Refused with UNAUTHORIZED unless the action is in the run's snapshot (manifest `platform_api` ∩ the
agent's policy); granted actions still answer NOT_IMPLEMENTED until an entry adapter executes them.
"""

from __future__ import annotations

from agentrunner.errors import InvalidArgumentError, NotImplementedFeatureError
from agentrunner.v1 import proxy_service_pb2
from agentrunner_host.proxy.api import HandlerTable, ProxyCall


async def request_platform_action(
    call: ProxyCall, request: proxy_service_pb2.RequestPlatformActionRequest
) -> proxy_service_pb2.RequestPlatformActionResponse:
    if not request.action:
        raise InvalidArgumentError("action is required", field="action")
    call.require(
        request.action in call.snapshot.platform_actions,
        f"platform action {request.action!r}",
        request.action,
    )
    raise NotImplementedFeatureError(
        f"platform action {request.action!r} has no executing adapter in v1",
        metadata={"action": request.action},
    )


HANDLERS: HandlerTable = {"RequestPlatformAction": request_platform_action}
