"""The delivery adapter seam and the host's own adapter.

A `DeliveryAdapter` delivers a run's replies to its surface and executes platform actions for it. The
`AdapterRegistry` maps a surface (the run's `delivery.surface`) to the adapter that renders it and an
action name to the adapter that implements it. This host ships `GrpcDeliveryAdapter`: replies go to the
run's client stream (`Run` / `AttachRun` / `SubmitInteraction`), and `send_message` to a host
conversation becomes an assistant transcript item there, pushed to any run open in that conversation.
Every other action has no adapter here (NOT_IMPLEMENTED); `action.requested` results are telemetry only
and never reach an adapter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import structlog
from google.protobuf import json_format

from agentrunner.errors import FailedPreconditionError, InvalidArgumentError, NotImplementedFeatureError
from agentrunner.v1 import common_pb2, host_service_pb2, proxy_service_pb2
from agentrunner_host.delivery.channel import DeliveryHub, Update
from agentrunner_host.fleet.routing import Fleet
from agentrunner_host.ports import RunSession
from agentrunner_host.store.transcript import Transcript

log = structlog.get_logger("agentrunner_host.delivery")

#: `SendMessage` counts as this platform action name (grants, `Resources.platform_actions`)
SEND_MESSAGE = "send_message"


class DeliveryAdapter(Protocol):
    name: str

    def actions(self) -> frozenset[str]:
        """Platform action names it implements."""
        ...

    def surfaces(self) -> frozenset[str]:
        """Delivery surfaces whose replies it renders (`*` = any)."""
        ...

    async def reply(
        self, run: RunSession, reply: host_service_pb2.Reply
    ) -> proxy_service_pb2.SendReplyResponse: ...

    async def send_message(
        self, run: RunSession, req: proxy_service_pb2.SendMessageRequest
    ) -> proxy_service_pb2.SendMessageResponse: ...

    async def call(
        self, run: RunSession, action: str, payload: dict[str, Any], bot_id: str
    ) -> dict[str, Any]: ...


class AdapterRegistry:
    """Surface -> reply adapter, action -> executing adapter (first registered wins)."""

    def __init__(self, adapters: Iterable[DeliveryAdapter] = ()) -> None:
        self._adapters: list[DeliveryAdapter] = list(adapters)

    def add(self, adapter: DeliveryAdapter) -> None:
        self._adapters.append(adapter)

    def actions(self) -> frozenset[str]:
        out: frozenset[str] = frozenset()
        for adapter in self._adapters:
            out |= adapter.actions()
        return out

    def for_action(self, action: str) -> DeliveryAdapter:
        for adapter in self._adapters:
            if action in adapter.actions():
                return adapter
        raise NotImplementedFeatureError(
            f"no delivery adapter on this host implements platform action {action!r}",
            metadata={"action": action},
        )

    def for_surface(self, surface: str) -> DeliveryAdapter:
        for adapter in self._adapters:
            if surface in adapter.surfaces():
                return adapter
        for adapter in self._adapters:
            if "*" in adapter.surfaces():
                return adapter
        raise NotImplementedFeatureError(
            f"no delivery adapter renders surface {surface!r}", metadata={"surface": surface}
        )


def message_text(message: common_pb2.AssistantMessage) -> str:
    return message.content or "".join(c.text for c in message.contents if c.text)


class GrpcDeliveryAdapter:
    """The host's own API surface: gRPC clients of `HostService`."""

    name = "grpc"

    def __init__(self, hub: DeliveryHub, transcript: Transcript, fleet: Fleet | None = None) -> None:
        self.hub = hub
        self.transcript = transcript
        #: with several replicas, the other replicas' runs of the conversation get the message too
        self.fleet = fleet
        if fleet is not None:
            fleet.bus.handle("conversation_reply", self._reply_from_peer)

    def actions(self) -> frozenset[str]:
        return frozenset({SEND_MESSAGE})

    def surfaces(self) -> frozenset[str]:
        return frozenset({"*"})

    async def reply(
        self, run: RunSession, reply: host_service_pb2.Reply
    ) -> proxy_service_pb2.SendReplyResponse:
        channel = self.hub.get(run.run_id)
        if channel is None:
            raise FailedPreconditionError("the run is not open on this host", metadata={"runId": run.run_id})
        await channel.deliver(Update(reply=reply))
        return proxy_service_pb2.SendReplyResponse(reply_id=reply.reply_id, delivered=True)

    async def send_message(
        self, run: RunSession, req: proxy_service_pb2.SendMessageRequest
    ) -> proxy_service_pb2.SendMessageResponse:
        if req.target_type != "conversation":
            raise NotImplementedFeatureError(
                f"the gRPC surface cannot send to target type {req.target_type!r} (only `conversation`)",
                metadata={"action": SEND_MESSAGE, "targetType": req.target_type},
            )
        if not req.target_id:
            raise InvalidArgumentError("target_id is required", field="target_id")
        snap = run.snapshot
        row = await self.transcript.append(
            conversation_id=req.target_id,
            role="assistant",
            content=message_text(req.message),
            contents=list(req.message.contents),
            artifacts=list(req.message.artifacts),
            run_id=run.run_id,
            metadata={
                "source": SEND_MESSAGE,
                "bot_id": req.bot_id or snap.bot_id,
                "sender_run_id": run.run_id,
            },
        )
        # Clients watching the conversation: the runs open in it get a FULL reply item (on every replica).
        item = host_service_pb2.Reply(
            run_id=run.run_id, reply_id=f"msg.{row.transcript_id}", mode=common_pb2.REPLY_MODE_FULL
        )
        item.message.CopyFrom(req.message)
        item.create_time.GetCurrentTime()
        await self._deliver_to_conversation(req.target_id, item)
        if self.fleet is not None and self.fleet.has_peers():
            await self.fleet.broadcast("conversation_reply", req.target_id, item.SerializeToString())
        return proxy_service_pb2.SendMessageResponse(delivered=True, platform_message_id=row.transcript_id)

    async def _deliver_to_conversation(self, conversation_id: str, item: host_service_pb2.Reply) -> None:
        for channel in self.hub.for_conversation(conversation_id):
            try:
                await channel.deliver(Update(reply=item))
            except FailedPreconditionError:
                pass

    async def _reply_from_peer(self, origin: str, conversation_id: str, body: bytes) -> bytes:
        """The fleet's `conversation_reply`: a message another replica sent to a conversation."""
        await self._deliver_to_conversation(conversation_id, host_service_pb2.Reply.FromString(body))
        return b""

    async def call(
        self, run: RunSession, action: str, payload: dict[str, Any], bot_id: str
    ) -> dict[str, Any]:
        if action != SEND_MESSAGE:
            raise NotImplementedFeatureError(
                f"platform action {action!r} is not implemented", metadata={"action": action}
            )
        req = proxy_service_pb2.SendMessageRequest(
            bot_id=bot_id,
            target_type=str(payload.get("target_type", "")),
            target_id=str(payload.get("target_id", "")),
        )
        message = payload.get("message")
        if isinstance(message, Mapping):
            json_format.ParseDict(dict(message), req.message, ignore_unknown_fields=True)
        else:
            req.message.content = str(payload.get("text", message or ""))
        resp = await self.send_message(run, req)
        return {"delivered": resp.delivered, "platform_message_id": resp.platform_message_id}
