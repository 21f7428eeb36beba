"""Proxy handlers of the delivery layer: `SendReply`, `SendMessage`, `RequestPlatformAction`.

Authorization comes from the frozen snapshot only: `snapshot.reply` for `SendReply`; the granted
platform actions (manifest `platform_api` ∩ the agent's `resource_policy.platform_actions`) for
`SendMessage` (`send_message`) and `RequestPlatformAction`, checked BEFORE looking for an adapter, so an
ungranted action is UNAUTHORIZED and a granted one no adapter implements is NOT_IMPLEMENTED. Acting as
another bot needs that bot in the agent's `resource_policy.platform_bots`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from google.protobuf import json_format

from agentrunner.errors import FailedPreconditionError, InvalidArgumentError, PayloadTooLargeError
from agentrunner.protocol import REPLY_MAX_CHARS
from agentrunner.v1 import common_pb2, proxy_service_pb2
from agentrunner_host.delivery.adapters import SEND_MESSAGE, AdapterRegistry, message_text
from agentrunner_host.delivery.channel import DeliveryHub, RunChannel
from agentrunner_host.delivery.store import DeliveryStore
from agentrunner_host.fleet.routing import Fleet
from agentrunner_host.ports import RunLedger, RunSession, utcnow
from agentrunner_host.proxy.api import HandlerTable, ProxyCall
from agentrunner_host.store.transcript import Transcript

pb = proxy_service_pb2
_MODES = {
    common_pb2.REPLY_MODE_FULL: "full",
    common_pb2.REPLY_MODE_UPDATE: "update",
    common_pb2.REPLY_MODE_FINISH: "finish",
    common_pb2.REPLY_MODE_ABORT: "abort",
}


def _check_size(message: common_pb2.AssistantMessage, field: str = "message.content") -> None:
    size = len(message.content) + sum(len(c.text) for c in message.contents)
    if size > REPLY_MAX_CHARS:
        raise PayloadTooLargeError(
            f"a reply has at most {REPLY_MAX_CHARS} characters (got {size})",
            metadata={"field": field, "size": size, "cap": REPLY_MAX_CHARS},
        )


def _bot(call: ProxyCall, bot_id: str) -> str:
    """The bot to act as: the run's unless another one is granted."""
    snap = call.snapshot
    if not bot_id or bot_id == snap.bot_id:
        return snap.bot_id
    call.require(bot_id in snap.platform_bots, f"acting as bot {bot_id!r}", f"bot:{bot_id}")
    return bot_id


@dataclasses.dataclass(frozen=True, slots=True)
class _DeliveryHandlers:
    """One method per RPC, over the delivery hub, the platform adapters, the transcript (a finished
    reply is recorded there) and the delivery store (`SendMessage` idempotency). With a `fleet`, a
    reply to a run open on another replica is delivered there (`reply_for_peer` on that replica)."""

    hub: DeliveryHub
    adapters: AdapterRegistry
    transcript: Transcript
    store: DeliveryStore
    fleet: Fleet | None = None
    ledger: RunLedger | None = None

    async def send_reply(self, call: ProxyCall, request: pb.SendReplyRequest) -> pb.SendReplyResponse:
        snap = call.snapshot
        call.require(snap.reply, "reply", f"reply:{request.reply_id or '?'}")
        if not request.reply_id:
            raise InvalidArgumentError("reply_id is required", field="reply_id")
        if request.mode not in _MODES:
            raise InvalidArgumentError("mode must be FULL, UPDATE, FINISH or ABORT", field="mode")
        _check_size(request.message)
        call.audit["mode"] = _MODES[request.mode]
        channel = self.hub.get(call.run_id)
        if channel is None:
            response = await self._reply_elsewhere(call.run_id, request)
        else:
            response = await self._reply_on(channel, call.session, request)
        call.audit["delivered"] = response.delivered
        return response

    async def _reply_on(
        self, channel: RunChannel, session: RunSession, request: pb.SendReplyRequest
    ) -> pb.SendReplyResponse:
        """The reply on the run's channel (this replica runs it): the reply state machine, the surface's
        adapter, a finished reply into the transcript."""
        snap = session.snapshot
        adapter = self.adapters.for_surface(channel.delivery.surface)
        async with channel.lock:
            step = channel.book.apply(request.reply_id, request.mode, request.message, request.quote_origin)
            if step.push is None:
                response = pb.SendReplyResponse(reply_id=request.reply_id, delivered=False)
            else:
                response = await adapter.reply(session, step.push)
            if step.final is not None:
                channel.mark_output()
                if snap.conversation_id:
                    await self.transcript.append(
                        conversation_id=snap.conversation_id,
                        thread_id=snap.thread_id,
                        role="assistant",
                        content=message_text(step.final),
                        contents=list(step.final.contents),
                        artifacts=list(step.final.artifacts),
                        event_id=snap.event_id,
                        run_id=snap.run_id,
                        metadata={"reply_id": request.reply_id, "source": "reply"},
                    )
        return response

    async def _reply_elsewhere(self, run_id: str, request: pb.SendReplyRequest) -> pb.SendReplyResponse:
        """A reply for a run this replica does not hold: delivered by the replica that runs it."""
        record = await self.ledger.get_run(run_id) if self.fleet is not None and self.ledger else None
        if record is None or self.fleet is None or not self.fleet.elsewhere(record):
            raise FailedPreconditionError("the run is not open on this host", metadata={"runId": run_id})
        return pb.SendReplyResponse.FromString(
            await self.fleet.call(record, "reply", request.SerializeToString())
        )

    async def reply_for_peer(self, origin: str, run_id: str, body: bytes) -> bytes:
        """The fleet's `reply`: another replica received `SendReply` for a run this replica runs (the
        caller was authorized there against the same frozen snapshot)."""
        channel = self.hub.get(run_id)
        if channel is None:
            raise FailedPreconditionError("the run is not open on this host", metadata={"runId": run_id})
        snap = channel.run.snapshot
        session = RunSession(run_id=run_id, token_hash="", runner_id=snap.runner_id,
                             expires_at=snap.deadline_at or utcnow(), snapshot=snap)  # fmt: skip
        request = pb.SendReplyRequest.FromString(body)
        return (await self._reply_on(channel, session, request)).SerializeToString()

    async def send_message(self, call: ProxyCall, request: pb.SendMessageRequest) -> pb.SendMessageResponse:
        snap = call.snapshot
        target = f"{request.target_type}:{request.target_id}"
        call.require(SEND_MESSAGE in snap.platform_actions, "platform action 'send_message'", target)
        if not request.target_type or not request.target_id:
            raise InvalidArgumentError("target_type and target_id are required", field="target_type")
        _check_size(request.message)
        bot = _bot(call, request.bot_id)
        if request.idempotency_key:
            first = await self.store.sent(snap.binding_id, request.idempotency_key)
            if first is not None:
                call.audit["replayed"] = True
                return pb.SendMessageResponse.FromString(first)
        adapter = self.adapters.for_action(SEND_MESSAGE)
        sent = pb.SendMessageRequest()
        sent.CopyFrom(request)
        sent.bot_id = bot
        response = await adapter.send_message(call.session, sent)
        if request.idempotency_key:
            stored = await self.store.remember_send(
                snap.binding_id, request.idempotency_key, call.run_id, target, response.SerializeToString()
            )
            response = pb.SendMessageResponse.FromString(stored)
        return response

    async def request_platform_action(
        self, call: ProxyCall, request: pb.RequestPlatformActionRequest
    ) -> pb.RequestPlatformActionResponse:
        if not request.action:
            raise InvalidArgumentError("action is required", field="action")
        call.require(
            request.action in call.snapshot.platform_actions,
            f"platform action {request.action!r}",
            request.action,
        )
        bot = _bot(call, request.bot_id)
        adapter = self.adapters.for_action(request.action)  # NOT_IMPLEMENTED when none implements it
        payload: dict[str, Any] = (
            json_format.MessageToDict(request.payload) if request.HasField("payload") else {}
        )
        result = await adapter.call(call.session, request.action, payload, bot)
        response = pb.RequestPlatformActionResponse()
        response.result.update(result)
        return response


def delivery_handlers(
    hub: DeliveryHub,
    adapters: AdapterRegistry,
    transcript: Transcript,
    store: DeliveryStore,
    fleet: Fleet | None = None,
    ledger: RunLedger | None = None,
) -> HandlerTable:
    """The delivery RPCs' handlers; with a `fleet`, also its `reply` operation (a reply another
    replica received for a run open here)."""
    handlers = _DeliveryHandlers(hub, adapters, transcript, store, fleet, ledger)
    if fleet is not None:
        fleet.bus.handle("reply", handlers.reply_for_peer)
    return {
        "SendReply": handlers.send_reply,
        "SendMessage": handlers.send_message,
        "RequestPlatformAction": handlers.request_platform_action,
    }
