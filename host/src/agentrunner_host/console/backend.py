"""What the console shows, as JSON: HostService calls over the host's private socket, turned into the
dicts the browser renders (`update_event` for stream items, `timeline` entries for run pages).

Every call carries the signed-in user's metadata (`md`: the API key of the host client they signed in
as, on a host with `auth.clients`; nothing elsewhere), so the host's gate decides what the console may
do exactly as it would for that client."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from agentrunner.errors import from_rpc_error
from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from agentrunner_host.config.model import HostConfig
from agentrunner_host.views.interactions import full_interaction_support
from agentrunner_host.views.jsonview import message_dict, status_name, usage_dict
from agentrunner_host.views.timeline import Timeline, kind_name

READ_TIMEOUT = 10.0
#: a call's metadata: the caller's `authorization` header, or nothing
Metadata = Sequence[tuple[str, str]]
RUN_TIMEOUT = 3600.0
OPEN = (common_pb2.RUN_STATUS_CREATED, common_pb2.RUN_STATUS_RUNNING)


class ConsoleError(Exception):
    """A HostService call failed: `reason` and `message` as the host said them, `status` for HTTP."""

    def __init__(self, reason: str, message: str, status: int) -> None:
        super().__init__(message)
        self.reason, self.message, self.status = reason, message, status


_HTTP = {
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.UNAVAILABLE: 503,
}


def console_error(exc: grpc.RpcError) -> ConsoleError:
    err = from_rpc_error(exc)
    code = exc.code() if hasattr(exc, "code") else None
    return ConsoleError(err.reason, err.message, _HTTP.get(code, 500))  # type: ignore[arg-type]


def run_json(run: host_service_pb2.Run) -> dict[str, Any]:
    data = message_dict(run)
    data["status"] = status_name(run.status)
    data["live"] = run.status in OPEN
    if run.HasField("usage"):
        data["usage"] = usage_dict(run.usage)
    return data


def update_event(update: Any) -> dict[str, Any]:
    """One item of a run stream (`Run`, `AttachRun`, `SubmitInteraction`) as the browser renders it."""
    kind = update.WhichOneof("update")
    if kind == "result":
        r = update.result
        payload = r.WhichOneof("payload") or ""
        event: dict[str, Any] = {"type": "result", "sequence": int(r.sequence), "payload": payload}
        if payload:
            body = getattr(r, payload)
            event["data"] = message_dict(body)
            if payload == "message_delta":
                event["message_kind"] = kind_name(body)
            elif payload in ("message_completed", "run_completed"):
                event["message_kind"] = kind_name(body.message)
        if r.HasField("usage"):
            event["usage"] = usage_dict(r.usage)
        return event
    if kind == "finished":
        f = update.finished
        return {"type": "finished", "run_id": f.run_id, "status": status_name(f.status), "reason": f.reason,
                "usage": usage_dict(f.usage) if f.HasField("usage") else {}}  # fmt: skip
    if kind == "reply":
        reply = update.reply
        return {"type": "reply", "reply_id": reply.reply_id, "text": reply.message.content,
                "mode": common_pb2.ReplyMode.Name(reply.mode).removeprefix("REPLY_MODE_").lower()}  # fmt: skip
    if kind == "interaction":
        return {"type": "interaction", **message_dict(update.interaction)}
    if kind == "accepted":
        return {"type": "accepted", **message_dict(update.accepted)}
    return {"type": kind or "unknown"}


class ConsoleBackend:
    """The console's view of one host, over a HostService channel (`target`)."""

    def __init__(self, config: HostConfig, target: str, audit: Any = None) -> None:
        self.config = config
        self.channel = grpc.aio.insecure_channel(target)
        self.stub = host_service_pb2_grpc.HostServiceStub(self.channel)
        #: `(run_id) -> list of audit records` (the host's event log), or None
        self.audit = audit

    async def close(self) -> None:
        await self.channel.close()

    async def _unary(self, method: Any, request: Any, md: Metadata) -> Any:
        try:
            return await method(request, timeout=READ_TIMEOUT, metadata=tuple(md))
        except grpc.RpcError as exc:
            raise console_error(exc) from None

    # -- reads ---------------------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        from agentrunner_host import __version__

        return {
            "version": __version__,
            "instance_id": self.config.instance_id,
            "agents": [{"id": a.id, "runner_id": a.runner_id, "enabled": a.enabled,
                        "event_types": a.event_types} for a in self.config.agents],
            "bindings": [{"id": b.id, "event": b.event, "scope": f"{b.scope.type}:{b.scope.id or '*'}",
                          "target": b.target.agent or "discard", "enabled": b.enabled}
                         for b in self.config.bindings],
        }  # fmt: skip

    async def runners(self, md: Metadata = ()) -> dict[str, Any]:
        request = host_service_pb2.HostServiceListRunnersRequest()
        listed = await self._unary(self.stub.ListRunners, request, md)
        return message_dict(listed)

    async def runs(self, filters: dict[str, str], md: Metadata = ()) -> dict[str, Any]:
        statuses = [v for v in common_pb2.RunStatus.values() if v and status_name(v) in
                    {s for s in filters.get("status", "").split(",") if s}]  # fmt: skip
        request = host_service_pb2.ListRunsRequest(
            page_size=int(filters.get("page_size") or 25), page_token=filters.get("page_token", ""),
            statuses=statuses, agent_id=filters.get("agent", ""), runner_id=filters.get("runner", ""),
            conversation_id=filters.get("conversation", ""), binding_id=filters.get("binding", ""),
        )  # fmt: skip
        page = await self._unary(self.stub.ListRuns, request, md)
        return {"runs": [run_json(r) for r in page.runs], "next_page_token": page.next_page_token}

    async def run(self, run_id: str, md: Metadata = ()) -> dict[str, Any]:
        return run_json(
            (await self._unary(self.stub.GetRun, host_service_pb2.GetRunRequest(run_id=run_id), md)).run
        )

    async def run_audit(self, run_id: str) -> list[dict[str, Any]]:
        return list(await self.audit(run_id)) if self.audit is not None else []

    async def timeline(self, run_id: str, md: Metadata = ()) -> AsyncIterator[dict[str, Any]]:
        """Snapshots of a run's page: the record and its timeline so far; one per change, the last once
        the run ended."""
        record = await self.run(run_id, md)
        timeline = Timeline()
        call = self.stub.AttachRun(
            host_service_pb2.AttachRunRequest(run_id=run_id), timeout=RUN_TIMEOUT, metadata=tuple(md)
        )
        try:
            async for update in call:
                timeline.add(update)
                if update.HasField("finished"):
                    break
                if record["live"]:
                    yield {"run": record, "timeline": timeline.entries, "done": False}
        except grpc.RpcError as exc:
            raise console_error(exc) from None
        finally:
            call.cancel()
        yield {"run": await self.run(run_id, md), "timeline": timeline.entries, "done": True}

    # -- runs ------------------------------------------------------------------------------------------
    async def chat(self, body: dict[str, Any], md: Metadata = ()) -> AsyncIterator[dict[str, Any]]:
        """Sends one message event (as the console's user) and streams the run."""
        req = host_service_pb2.HostServiceRunRequest(agent_id=str(body.get("agent_id") or ""))
        ev = req.event
        ev.event_id = f"console-{uuid.uuid4().hex}"
        ev.event_type = "message.received"
        ev.source = "console"
        ev.bot_id = str(body.get("bot_id") or "console")
        ev.conversation.conversation_id = str(body.get("conversation_id") or "console")
        ev.actor.actor_type = "user"
        ev.actor.actor_id = str(body.get("user_id") or "console-user")
        ev.input.text = str(body.get("text") or "")
        self._delivery(ev.delivery)
        async for event in self._stream(self.stub.Run(req, timeout=RUN_TIMEOUT, metadata=tuple(md))):
            yield event

    async def submit(
        self, interaction_id: str, body: dict[str, Any], md: Metadata = ()
    ) -> AsyncIterator[dict[str, Any]]:
        """Answers an interaction and streams the run the answer starts."""
        req = host_service_pb2.SubmitInteractionRequest(
            interaction_id=interaction_id, action_id=str(body.get("action_id") or "")
        )
        values = body.get("values") or {}
        if isinstance(values, dict) and values:
            req.values.update(values)
        req.actor.actor_type = "user"
        req.actor.actor_id = str(body.get("user_id") or "console-user")
        self._delivery(req.delivery)
        call = self.stub.SubmitInteraction(req, timeout=RUN_TIMEOUT, metadata=tuple(md))
        async for event in self._stream(call):
            yield event

    async def follow(self, run_id: str, md: Metadata = ()) -> AsyncIterator[dict[str, Any]]:
        async for event in self._stream(
            self.stub.AttachRun(
                host_service_pb2.AttachRunRequest(run_id=run_id), timeout=RUN_TIMEOUT, metadata=tuple(md)
            )
        ):
            yield event

    async def cancel(self, run_id: str, reason: str, md: Metadata = ()) -> dict[str, Any]:
        request = host_service_pb2.CancelRunRequest(
            run_id=run_id, reason=reason or "cancelled from the console"
        )
        return run_json((await self._unary(self.stub.CancelRun, request, md)).run)

    @staticmethod
    def _delivery(delivery: Any) -> None:
        delivery.surface = "console"
        delivery.supports_streaming = True
        delivery.interactions.CopyFrom(full_interaction_support())

    @staticmethod
    async def _stream(call: Any) -> AsyncIterator[dict[str, Any]]:
        try:
            async for update in call:
                yield update_event(update)
        except grpc.RpcError as exc:
            err = console_error(exc)
            yield {"type": "error", "reason": err.reason, "message": err.message}
        finally:
            call.cancel()
