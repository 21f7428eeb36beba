"""Structured interactions on the host: request -> stored + delivered -> answered once -> a new run.

Request (`interaction.requested` result, already checked by the validator with the SDK's rules and
given its effective expiry): `record_requested` stores it PENDING (an interaction id taken anywhere on
this host drops the result with a warning), and `deliver_requested` pushes it to the client: the
`Interaction` item when the run's surface declares `delivery.interactions`, else its `fallback_text` as
a reply item plus an assistant transcript line.

Answer (`HostService.SubmitInteraction`, `InteractionService.submit`): unknown id NOT_FOUND; answered,
cancelled or expired FAILED_PRECONDITION (an expired PENDING row is marked EXPIRED on the way: fail
closed); the answer is checked against the stored request (INVALID_ARGUMENT with `metadata.field`,
PAYLOAD_TOO_LARGE over 256 KiB); the binding is resolved; then one conditional UPDATE accepts it
(PENDING and unexpired -> SUBMITTED). The answer becomes an `interaction.submitted` event routed like any
other: no matching binding is BINDING_NOT_FOUND (fail closed; the host never falls back to the
requesting run's agent). Resubmitting with the answer's `event_id` attaches to the run it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
import uuid
from collections.abc import AsyncGenerator, Iterable
from typing import Any, Protocol

import structlog
from google.protobuf import json_format, struct_pb2

from agentrunner.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
)
from agentrunner.protocol import INTERACTION_MAX_BYTES, INTERACTION_SUBMITTED_EVENT
from agentrunner.v1 import common_pb2, context_pb2, host_service_pb2, result_pb2
from agentrunner_host.delivery.channel import RunChannel, Update
from agentrunner_host.delivery.store import (
    CANCELLED,
    EXPIRED,
    PENDING,
    SUBMITTED,
    InteractionStore,
    interaction_to_proto,
)
from agentrunner_host.ports import RunView, TranscriptAppender, UpdateStream, utcnow
from agentrunner_host.registry.bindings import BindingResolver, EventKey
from agentrunner_host.store.artifacts import ArtifactStore
from agentrunner_host.store.common import message_to_json
from agentrunner_host.store.schema import InteractionRow

log = structlog.get_logger("agentrunner_host.interactions")

C = common_pb2
_STATUS: dict[int, str] = {SUBMITTED: "answered", EXPIRED: "expired", CANCELLED: "cancelled"}


# -- request --------------------------------------------------------------------------------------------


def _row(run: RunView, event_actor: dict[str, Any], result: result_pb2.RunResult) -> InteractionRow:
    request = result.interaction_requested.interaction
    rec = run.record
    return InteractionRow(
        interaction_id=request.interaction_id,
        run_id=rec.run_id,
        conversation_id=rec.conversation_id,
        thread_id=rec.thread_id,
        binding_id=rec.binding_id,
        agent_id=rec.agent_id,
        bot_id=rec.bot_id,
        workspace_id=rec.workspace_id,
        actor=event_actor,
        status=PENDING,
        request=request.SerializeToString(),
        created_at=utcnow(),
        expires_at=request.expires_at.ToDatetime(tzinfo=dt.UTC),
        submitted_run_id="",
    )


async def record_requested(
    store: InteractionStore, run: RunView, actor: context_pb2.ActorContext, result: result_pb2.RunResult
) -> bool:
    """Stores an accepted request; False (drop the result) when its id is already taken on this host."""
    actor_json = message_to_json(actor) if actor.ByteSize() else {}
    if await store.insert(_row(run, actor_json, result)):
        return True
    log.warning(
        "result.invalid_interaction",
        run_id=run.run_id,
        reason="interaction_id_taken",
        interaction_id=result.interaction_requested.interaction.interaction_id[:64],
    )
    return False


async def deliver_requested(
    channel: RunChannel | None, store: InteractionStore, interaction_id: str, transcript: TranscriptAppender
) -> None:
    """Pushes the stored interaction (or its fallback text) to the run's client."""
    row = await store.get(interaction_id)
    if row is None or channel is None or channel.closed:
        return
    item = interaction_to_proto(row)
    if channel.interactions is not None:
        await channel.deliver(Update(interaction=item))
        return
    # The surface renders no interactions: the fallback text, like a reply, and in the transcript.
    text = item.request.fallback_text
    reply = host_service_pb2.Reply(
        run_id=row.run_id, reply_id=f"{interaction_id}.fallback", mode=C.REPLY_MODE_FULL
    )
    reply.message.content = text
    reply.create_time.GetCurrentTime()
    if channel.run.snapshot.reply:
        await channel.deliver(Update(reply=reply))
    if row.conversation_id:
        await transcript.append(
            conversation_id=row.conversation_id,
            thread_id=row.thread_id,
            role="assistant",
            content=text,
            run_id=row.run_id,
            event_id=channel.run.record.event_id,
            metadata={"source": "interaction", "interaction_id": interaction_id},
        )


# -- answer ---------------------------------------------------------------------------------------------


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _options(f: common_pb2.InteractionField) -> set[str]:
    return {o.value for o in f.options}


def _check_action(request: common_pb2.InteractionRequest, action_id: str) -> None:
    """An action is named exactly when the request offers actions, and is one of them."""
    actions = {a.id for a in request.actions}
    if actions:
        if not action_id:
            raise InvalidArgumentError(
                "action_id is required: the interaction has actions", field="action_id"
            )
        if action_id not in actions:
            raise InvalidArgumentError(f"unknown action {action_id!r}", field="action_id")
    elif action_id:
        raise InvalidArgumentError("the interaction has no actions", field="action_id")


def _value_fits(f: common_pb2.InteractionField, value: Any, artifacts: set[str]) -> bool:
    """A non-empty value against its field's type (and options; a file is an artifact the run sees)."""
    T = C.InteractionFieldType
    t = f.type
    if t in (T.INTERACTION_FIELD_TYPE_TEXT, T.INTERACTION_FIELD_TYPE_TEXTAREA):
        return isinstance(value, str)
    if t == T.INTERACTION_FIELD_TYPE_SELECT:
        return isinstance(value, str) and value in _options(f)
    if t == T.INTERACTION_FIELD_TYPE_MULTISELECT:
        return isinstance(value, list) and all(isinstance(v, str) and v in _options(f) for v in value)
    if t == T.INTERACTION_FIELD_TYPE_NUMBER:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if t == T.INTERACTION_FIELD_TYPE_BOOLEAN:
        return isinstance(value, bool)
    if t == T.INTERACTION_FIELD_TYPE_FILE:
        return isinstance(value, str) and value in artifacts
    return True


def validate_answer(
    request: common_pb2.InteractionRequest,
    action_id: str,
    values: dict[str, Any],
    visible_artifacts: Iterable[str] = (),
) -> None:
    """The answer against the stored request; raises INVALID_ARGUMENT naming the field."""
    _check_action(request, action_id)
    fields = {f.id: f for f in request.fields}
    for key in values:
        if key not in fields:
            raise InvalidArgumentError(f"unknown field {key!r}", field=f"values.{key}")
    artifacts = set(visible_artifacts)
    for fid, f in fields.items():
        where = f"values.{fid}"
        value = values.get(fid)
        if _empty(value):
            if f.required:
                raise InvalidArgumentError(f"field {fid!r} is required", field=where)
            continue
        if not _value_fits(f, value, artifacts):
            raise InvalidArgumentError(
                f"value of field {fid!r} is not valid for its type or options", field=where
            )


class Runs(Protocol):
    """What `InteractionService` uses of `run.service.RunService` (a protocol: the run path imports
    this module, so it does not import the run service back)."""

    resolver: BindingResolver

    def follow(
        self, run_id: str, after_sequence: int = 0, attached: bool = False
    ) -> AsyncGenerator[Update, None]: ...

    async def open(
        self, request: host_service_pb2.HostServiceRunRequest, metadata: Iterable[tuple[str, Any]] = ()
    ) -> UpdateStream[Update]: ...


class InteractionService:
    """`HostService.SubmitInteraction` (transport-neutral) and the expiry sweep."""

    def __init__(self, runs: Runs, store: InteractionStore, artifacts: ArtifactStore) -> None:
        self.runs = runs
        self.store = store
        self.artifacts = artifacts

    async def _visible_artifacts(self, row: InteractionRow, values: dict[str, Any]) -> set[str]:
        ids = {v for v in values.values() if isinstance(v, str)}
        out: set[str] = set()
        artifacts = self.artifacts
        for artifact_id in ids:
            found = await artifacts.get(artifact_id)
            if found is not None and (
                found.run_id == row.run_id
                or (row.conversation_id and found.conversation_id == row.conversation_id)
            ):
                out.add(artifact_id)
        return out

    async def _attach(self, row: InteractionRow) -> AsyncGenerator[Update, None]:
        run_id = row.submitted_run_id
        for _ in range(50):  # the answer's run is being created right now: wait for its id
            if run_id:
                break
            await asyncio.sleep(0.1)
            fresh = await self.store.get(row.interaction_id)
            run_id = fresh.submitted_run_id if fresh is not None else ""
        if not run_id:
            raise FailedPreconditionError(
                "the interaction was answered; its run is not available yet",
                metadata={"interactionId": row.interaction_id},
            )
        async for update in self.runs.follow(run_id, 0, attached=True):
            yield update

    async def submit(
        self, request: host_service_pb2.SubmitInteractionRequest, metadata: Iterable[tuple[str, Any]] = ()
    ) -> AsyncGenerator[Update, None]:
        """The answer's run stream (items like `Run`); typed errors before the first item."""
        if not request.interaction_id:
            raise InvalidArgumentError("interaction_id is required", field="interaction_id")
        row = await self.store.get(request.interaction_id)
        if row is None:
            raise NotFoundError("interaction not found", metadata={"interactionId": request.interaction_id})
        if row.status == SUBMITTED and request.event_id and request.event_id == row.event_id:
            async for update in self._attach(row):
                yield update
            return
        now = utcnow()
        if row.status == PENDING and row.expires_at <= now:
            await self.store.expire(row.interaction_id, now)
            row.status = EXPIRED
        if row.status != PENDING:
            raise FailedPreconditionError(
                f"the interaction is {_STATUS.get(row.status, 'closed')}; it accepts no answer",
                metadata={"interactionId": row.interaction_id, "status": _STATUS.get(row.status, "closed")},
            )
        stored = common_pb2.InteractionRequest.FromString(row.request)
        size = request.values.ByteSize()
        if size > INTERACTION_MAX_BYTES:
            raise PayloadTooLargeError(
                f"the answer is {size} bytes; at most {INTERACTION_MAX_BYTES}",
                metadata={"field": "values", "size": size, "cap": INTERACTION_MAX_BYTES},
            )
        values = json_format.MessageToDict(request.values) if request.HasField("values") else {}
        validate_answer(stored, request.action_id, values, await self._visible_artifacts(row, values))
        event_id = request.event_id or f"evt_{uuid.uuid4().hex}"
        submission = common_pb2.InteractionSubmission(
            interaction_id=row.interaction_id,
            action_id=request.action_id,
            request_run_id=row.run_id,
        )
        submission.values.CopyFrom(request.values if request.HasField("values") else struct_pb2.Struct())
        submission.submitted_at.FromDatetime(now)
        run_request = host_service_pb2.HostServiceRunRequest(
            event=self._event(row, request, event_id, submission)
        )
        # Route first (fail closed, nothing consumed when no binding takes the event) ...
        ev = run_request.event
        self.runs.resolver.resolve(
            EventKey(
                ev.event_type,
                bot_id=ev.bot_id,
                workspace_id=ev.workspace_id,
                conversation_id=row.conversation_id,
            )
        )
        # ... then accept the answer once, atomically.
        if not await self.store.submit(row.interaction_id, event_id, now):
            fresh = await self.store.get(row.interaction_id)
            if fresh is not None and fresh.status == SUBMITTED and fresh.event_id == event_id:
                async for update in self._attach(fresh):
                    yield update
                return
            raise FailedPreconditionError(
                "the interaction was answered or expired meanwhile",
                metadata={"interactionId": row.interaction_id},
            )
        started = False
        try:
            async with contextlib.aclosing(await self.runs.open(run_request, metadata)) as updates:
                async for update in updates:
                    if not started and update.HasField("accepted"):
                        started = True
                        await self.store.set_submitted_run(row.interaction_id, update.accepted.run_id)
                    yield update
        finally:
            if not started:
                await self.store.reopen(row.interaction_id, event_id)
        log.info("interaction.submitted", interaction_id=row.interaction_id, event_id=event_id)

    @staticmethod
    def _event(
        row: InteractionRow,
        request: host_service_pb2.SubmitInteractionRequest,
        event_id: str,
        submission: common_pb2.InteractionSubmission,
    ) -> host_service_pb2.EventEnvelope:
        ev = host_service_pb2.EventEnvelope(
            event_id=event_id,
            event_type=INTERACTION_SUBMITTED_EVENT,
            source="api",
            trigger_source=context_pb2.TRIGGER_SOURCE_API,
            bot_id=row.bot_id,
            workspace_id=row.workspace_id,
        )
        ev.event_time.FromDatetime(submission.submitted_at.ToDatetime(tzinfo=dt.UTC))
        ev.conversation.conversation_id = row.conversation_id
        ev.conversation.thread_id = row.thread_id
        ev.conversation.bot_id = row.bot_id
        ev.conversation.workspace_id = row.workspace_id
        if request.HasField("actor") and request.actor.actor_id:
            ev.actor.CopyFrom(request.actor)
        elif row.actor:
            json_format.ParseDict(row.actor, ev.actor, ignore_unknown_fields=True)
        ev.subject.subject_type = "interaction"
        ev.subject.subject_id = row.interaction_id
        ev.data.update({"interaction_id": row.interaction_id, "action_id": request.action_id})
        ev.platform_event.bot_id = row.bot_id
        ev.platform_event.interaction_submitted.submission.CopyFrom(submission)
        if request.HasField("delivery"):
            ev.delivery.CopyFrom(request.delivery)
        if request.HasField("metadata"):
            ev.metadata.CopyFrom(request.metadata)
        return ev

    async def sweep(self, interval: float = 30.0) -> None:
        """Marks expired PENDING interactions EXPIRED, periodically (reads also expire lazily)."""
        while True:
            try:
                count = await self.store.expire()
                if count:
                    log.info("interactions.expired", count=count)
            except Exception:
                log.warning("interactions.sweep_failed", exc_info=True)
            await asyncio.sleep(interval)
