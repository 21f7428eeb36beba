"""An incoming event's facts, and the run start that records them together with the run.

An incoming event is recorded as its event-log entry (summary and small data), its attachments as
artifacts and, for `message.received` in a conversation, the user's transcript message
(`record_incoming_sync`, the one implementation of these rows). Two paths write them:

- `IncomingEvents.start_run`: a new run. The run row, the event, the run session and the state snapshot
  the run is granted, in ONE transaction: the whole run or nothing, with or without attachments. A
  refused attachment, or a store failure anywhere in the start (its COMMIT too, held until the runner
  call went out), leaves no run row, no event and no token, so a corrected retry of the same event id
  starts the run.
- `IncomingEvents.record_event`: an event without a run of its own (steering input for an open run).

Attachments are prepared before the transaction (`ArtifactStore.prepare_attachment`: every attachment
checked first, then decoded and a large body written to its file), so the transaction only inserts rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from agentrunner.errors import AlreadyExistsError
from agentrunner.v1 import common_pb2, host_service_pb2
from agentrunner_host.ports import AuthorizationSnapshot, RecordedEvent, RunRecord, RunSession, StartedRun
from agentrunner_host.store.artifacts import (
    ArtifactStore,
    PreparedArtifact,
    check_attachment,
    insert_prepared_sync,
)
from agentrunner_host.store.db import Database, with_then
from agentrunner_host.store.events import append_sync as append_event_sync
from agentrunner_host.store.events import incoming_fields, log_values
from agentrunner_host.store.ledger import get_run_by_event_sync, insert_run_sync, run_values
from agentrunner_host.store.schema import ArtifactRow, EventLogRow, TranscriptRow
from agentrunner_host.store.sessions import register_sync
from agentrunner_host.store.state import StateStore
from agentrunner_host.store.transcript import Transcript, insert_item_sync, latest_seq_sync, next_seq_sync
from agentrunner_host.store.transcript import append_sync as append_transcript_sync


def record_incoming_sync(
    conn: Connection,
    envelope: host_service_pb2.EventEnvelope,
    attachments: list[PreparedArtifact],
    *,
    run_id: str,
    runner_id: str,
    later: list[Callable[[Connection], object]] | None = None,
) -> tuple[int | None, int | None]:
    """The rows of an incoming event in the caller's transaction: its event-log entry, its prepared
    attachments and its user message. Returns (event seq, transcript seq); (None, None) when the event
    id was logged before, and then nothing is written. With `later`, the user message takes its
    position now and its insert is added to `later`, for the caller to run in the same transaction."""
    refs = [a.ref for a in attachments]
    extra = {"attachments": [r.artifact_id for r in refs]} if refs else None
    fields = incoming_fields(envelope, run_id=run_id, runner_id=runner_id, extra=extra)
    seq = append_event_sync(conn, log_values(**fields))
    if seq is None:
        return None, None
    for attachment in attachments:
        insert_prepared_sync(conn, attachment)
    item = _user_item(envelope, run_id)
    if item is None:
        return seq, None
    if later is None:
        return seq, append_transcript_sync(conn, **item, artifacts=refs)["seq"]
    transcript_seq = next_seq_sync(conn, item["conversation_id"])
    later.append(lambda c: insert_item_sync(c, transcript_seq, **item, artifacts=refs))
    return seq, transcript_seq


@dataclasses.dataclass(slots=True)
class _Written:
    """What the run-start transaction wrote (or found: `existing`, the run of a duplicate event id)."""

    existing: RunRecord | None = None
    duplicate: bool = False
    seq: int | None = None
    transcript_seq: int | None = None
    latest: int = 0
    created: bool = False
    state: dict[str, dict[str, Any]] | None = None


class IncomingEvents:
    """Records incoming events (see the module docstring)."""

    def __init__(
        self, db: Database, artifacts: ArtifactStore, transcript: Transcript, state: StateStore, owner: str
    ) -> None:
        self.db = db
        self.artifacts = artifacts
        self.transcript = transcript
        self.state = state
        self.owner = owner

    async def record_event(
        self,
        envelope: host_service_pb2.EventEnvelope,
        *,
        run_id: str = "",
        runner_id: str = "",
        binding_id: str = "",
    ) -> RecordedEvent:
        """Records an incoming event in one transaction (`record_incoming_sync`). Idempotent per event
        id: a duplicate delivery writes nothing and returns `created=False`."""
        attachments = await self._prepare(envelope, run_id, binding_id)
        seq, transcript_seq = await self.db.run_write(
            lambda conn: record_incoming_sync(conn, envelope, attachments, run_id=run_id, runner_id=runner_id)
        )
        if seq is None:
            return await self._recorded_before(envelope)
        conversation_id = envelope.conversation.conversation_id
        latest = (
            await self.transcript.latest_seq(conversation_id)
            if transcript_seq is None and conversation_id
            else 0
        )
        return self._recorded(
            conversation_id, seq, transcript_seq, latest, [a.ref for a in attachments], True
        )

    async def start_run(
        self,
        record: RunRecord,
        envelope: host_service_pb2.EventEnvelope,
        session: RunSession | None = None,
        state_of: AuthorizationSnapshot | None = None,
        *,
        hold: bool = False,
    ) -> StartedRun:
        """Everything a run needs before the runner is called, in ONE transaction: the run row (status
        as given, e.g. already `running`), the incoming event (`record_incoming_sync`), the run session
        and, for `state_of`, the state snapshot it grants. When the event id already has a run, nothing
        is written and that run comes back in `record` (with `recorded` None).

        `hold=True`: the transaction may come back open (`StartedRun.held`, `Database.run_write_held`):
        the run row, the event and the message's transcript position are written (so a duplicate event
        is refused and the context's positions are known), while the message itself, the session and
        the COMMIT wait for `StartedRun.commit()`, which the caller issues once the runner call is on
        its way."""
        attachments = await self._prepare(envelope, record.run_id, record.binding_id)
        values = run_values(record, self.owner)
        conversation_id = envelope.conversation.conversation_id
        #: the statements nothing before the commit needs (the user message, the session)
        later: list[Callable[[Connection], object]] = []

        def write(conn: Connection) -> _Written:
            later.clear()  # (a write retried after a lock conflict starts over)
            if not insert_run_sync(conn, values):
                return _Written(existing=get_run_by_event_sync(conn, record.event_id), duplicate=True)
            out = _Written()
            out.seq, out.transcript_seq = record_incoming_sync(
                conn, envelope, attachments, run_id=record.run_id, runner_id=record.runner_id, later=later
            )
            out.created = out.seq is not None
            if not out.created:  # the event was logged before (e.g. as steering): its stored position
                out.seq, out.transcript_seq = _logged_position_sync(conn, envelope.event_id)
            if out.transcript_seq is None and conversation_id:
                out.latest = latest_seq_sync(conn, conversation_id)
            out.state = self.state.snapshot_sync(conn, state_of) if state_of is not None else None
            if session is not None:
                later.append(lambda c: register_sync(c, session))
            return out

        def write_later(conn: Connection) -> None:
            for step in later:
                step(conn)

        held = None
        if hold:
            written, held = await self.db.run_write_held(write, then=write_later)
        else:
            written = await self.db.run_write(with_then(write, write_later), inline=True)
        if written.duplicate:
            if held is not None:
                held.commit()  # (nothing was written: this only ends the transaction)
            if written.existing is None:
                raise AlreadyExistsError(f"run id {record.run_id} already exists")
            return StartedRun(written.existing, None)
        refs = [a.ref for a in attachments]
        if not written.created and attachments:
            refs = (await self._recorded_before(envelope)).attachments  # (the ones stored with it)
        recorded = self._recorded(
            conversation_id, written.seq, written.transcript_seq, written.latest, refs, written.created
        )
        recorded.state = written.state
        return StartedRun(record, recorded, held)

    async def _prepare(
        self, envelope: host_service_pb2.EventEnvelope, run_id: str, binding_id: str
    ) -> list[PreparedArtifact]:
        """The event's attachments ready for its transaction; every one is checked before any body is
        written, so a refused attachment leaves nothing behind."""
        attachments = envelope.input.attachments
        if not attachments:
            return []
        cap = self.artifacts.limits.max_bytes
        for i, attachment in enumerate(attachments):
            check_attachment(attachment, cap, f"event.input.attachments[{i}]")
        conversation_id = envelope.conversation.conversation_id
        return [
            await self.artifacts.prepare_attachment(
                attachment, conversation_id=conversation_id, run_id=run_id, binding_id=binding_id
            )
            for attachment in attachments
        ]

    def _recorded(
        self,
        conversation_id: str,
        event_seq: int | None,
        transcript_seq: int | None,
        latest: int,
        refs: list[common_pb2.ArtifactRef],
        created: bool,
    ) -> RecordedEvent:
        """The run context's view of a recorded event: its position (the user message's, or after the
        conversation's `latest` item) and its attachments."""
        position = transcript_seq if transcript_seq is not None else latest + 1
        return RecordedEvent(
            event_seq=event_seq,
            transcript_seq=transcript_seq,
            latest_cursor=self.transcript.cursor(conversation_id, position) if conversation_id else "",
            has_history_before=position > 1,
            attachments=refs,
            created=created,
        )

    async def _recorded_before(self, envelope: host_service_pb2.EventEnvelope) -> RecordedEvent:
        """An event logged before: its stored position and attachments (`created=False`)."""
        conversation_id = envelope.conversation.conversation_id
        async with self.db.read() as s:
            event = await s.scalar(select(EventLogRow).where(EventLogRow.record_id == envelope.event_id))
            item = await s.scalar(
                select(TranscriptRow).where(
                    TranscriptRow.event_id == envelope.event_id, TranscriptRow.role == "user"
                )
            )
            ids = list((event.data or {}).get("attachments", [])) if event is not None else []
            rows = {
                r.artifact_id: r
                for r in await s.scalars(select(ArtifactRow).where(ArtifactRow.artifact_id.in_(ids)))
            }
        refs = [self.artifacts.to_ref(rows[i]) for i in ids if i in rows]
        transcript_seq = item.seq if item is not None else None
        latest = (
            await self.transcript.latest_seq(conversation_id)
            if transcript_seq is None and conversation_id
            else 0
        )
        seq = event.seq if event is not None else None
        return self._recorded(conversation_id, seq, transcript_seq, latest, refs, False)


def _user_item(envelope: host_service_pb2.EventEnvelope, run_id: str) -> dict[str, Any] | None:
    """The transcript row of a `message.received` event's user message (None for other events)."""
    conversation_id = envelope.conversation.conversation_id
    if envelope.event_type != "message.received" or not conversation_id:
        return None
    return {
        "conversation_id": conversation_id,
        "thread_id": envelope.conversation.thread_id,
        "role": "user",
        "content": envelope.input.text,
        "contents": list(envelope.input.contents),
        "event_id": envelope.event_id,
        "run_id": run_id,
        "metadata": {"actor_id": envelope.actor.actor_id} if envelope.actor.actor_id else None,
    }


def _logged_position_sync(conn: Connection, event_id: str) -> tuple[int | None, int | None]:
    """An event logged before (e.g. as steering): its event-log and user-message sequences."""
    seq = conn.execute(select(EventLogRow.seq).where(EventLogRow.record_id == event_id)).scalar_one_or_none()
    transcript_seq = conn.execute(
        select(TranscriptRow.seq).where(TranscriptRow.event_id == event_id, TranscriptRow.role == "user")
    ).scalar_one_or_none()
    return seq, transcript_seq
