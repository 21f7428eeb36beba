"""`FactStores`: every fact store of the host, built from one `Database`, plus the run path's
entry points that write several stores in one transaction.

Typical host wiring::

    db = Database(settings.database_url)
    ensure_current(settings.database_url)            # refuse an un-migrated database
    stores = await FactStores.open(db, FactStoreSettings(artifact_dir=..., owner=instance_id))
    await stores.mark_interrupted()                  # crash recovery, once at startup
    maintenance = asyncio.create_task(stores.run_maintenance())

    # per event / run (run/)
    started = await stores.start_run(record, envelope, session, state_of)   # ONE transaction; duplicate
    #                                          event -> started.record is the existing run, recorded None
    await stores.record_results(snapshot, results)                       # the run journal's batches
    await stores.finish_run(snapshot, unwritten, status, reason, usage)  # terminal + status + token
    recorded = await stores.record_event(envelope, run_id=...)           # steering input for an open run
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession

from agentrunner.v1 import common_pb2, host_service_pb2, result_pb2
from agentrunner_host.ports import (
    AuthorizationSnapshot,
    RecordedEvent,
    RunRecord,
    RunSession,
    StartedRun,
    utcnow,
)
from agentrunner_host.store.artifacts import ArtifactStore
from agentrunner_host.store.blobs import ArtifactLimits
from agentrunner_host.store.common import (
    CursorCodec,
    dialect_insert,
    message_to_json,
    value_to_python,
)
from agentrunner_host.store.db import Database, repeat
from agentrunner_host.store.events import EventLog
from agentrunner_host.store.incoming import IncomingEvents
from agentrunner_host.store.ledger import (
    SqlRunLedger,
    finish_run_sync,
    insert_results_sync,
)
from agentrunner_host.store.result_effects import SYNC_KINDS, apply_sync
from agentrunner_host.store.schema import (
    HostSecret,
    RunRow,
    RunSessionRow,
)
from agentrunner_host.store.sessions import SqlSessionRegistry, revoke_sync
from agentrunner_host.store.state import StateStore, scope_name
from agentrunner_host.store.steering import SteeringQueue
from agentrunner_host.store.storage import StorageStore
from agentrunner_host.store.transcript import (
    Transcript,
)

log = logging.getLogger(__name__)

_CURSOR_SECRET = "cursor-hmac"
_OPEN_STATUSES = (common_pb2.RUN_STATUS_CREATED, common_pb2.RUN_STATUS_RUNNING)
#: the `run.failed` code of a run a host restart ended (`mark_interrupted`)
INTERRUPTED_CODE = "host.restarted"


@dataclasses.dataclass(frozen=True, slots=True)
class FactStoreSettings:
    #: where artifact bodies larger than `artifact_limits.inline_max_bytes` are written
    artifact_dir: Path = Path("var/artifacts")
    artifact_limits: ArtifactLimits = dataclasses.field(default_factory=ArtifactLimits)
    state_value_cap_bytes: int = 64 * 1024
    storage_value_cap_bytes: int = 1024 * 1024
    #: hard caps of the pull APIs
    history_page_cap: int = 200
    history_page_default: int = 50
    search_cap: int = 50
    events_page_cap: int = 200
    runs_page_cap: int = 100
    #: byte cap of one page of any pull API (history, search, events, run records, results, steering):
    #: a page ends early (with `has_more`) before it would pass it; sent as the response's `max_page_bytes`
    page_max_bytes: int = 4 * 1024 * 1024
    #: this host instance; crash recovery interrupts only the runs it owns
    owner: str = ""
    #: how often `run_maintenance` deletes expired artifacts and stale sessions (seconds)
    maintenance_interval: float = 300.0


class FactStores:
    def __init__(self, db: Database, codec: CursorCodec, settings: FactStoreSettings) -> None:
        self.db = db
        self.codec = codec
        self.settings = settings
        self.events = EventLog(db, codec)
        self.ledger = SqlRunLedger(db, codec, owner=settings.owner)
        self.sessions = SqlSessionRegistry(db)
        self.transcript = Transcript(db, codec)
        self.artifacts = ArtifactStore(db, settings.artifact_dir, settings.artifact_limits)
        self.state = StateStore(db, value_cap_bytes=settings.state_value_cap_bytes)
        self.storage = StorageStore(db, value_cap_bytes=settings.storage_value_cap_bytes)
        self.steering = SteeringQueue(db)
        self.incoming = IncomingEvents(db, self.artifacts, self.transcript, self.state, settings.owner)

    @classmethod
    async def open(cls, db: Database, settings: FactStoreSettings | None = None) -> FactStores:
        """Builds the stores; loads (or creates, once for all replicas) the cursor key."""
        async with db.write() as s:
            insert = dialect_insert(s)
            await s.execute(
                insert(HostSecret)
                .values(name=_CURSOR_SECRET, value=secrets.token_bytes(32))
                .on_conflict_do_nothing(index_elements=["name"])
            )
            secret = await s.scalar(select(HostSecret.value).where(HostSecret.name == _CURSOR_SECRET))
        assert secret is not None
        return cls(db, CursorCodec(secret), settings or FactStoreSettings())

    # -- run path entry points ---------------------------------------------------------------

    async def record_event(
        self,
        envelope: host_service_pb2.EventEnvelope,
        *,
        run_id: str = "",
        runner_id: str = "",
        binding_id: str = "",
    ) -> RecordedEvent:
        """Records an incoming event in one transaction (`store/incoming.py`): the event log entry, its
        attachments as artifacts and, for `message.received` only, the user message in the transcript.
        Idempotent per event id: a duplicate delivery writes nothing and returns `created=False`."""
        return await self.incoming.record_event(
            envelope, run_id=run_id, runner_id=runner_id, binding_id=binding_id
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
        """The run row, the incoming event (attachments too), the run session and the state snapshot in
        ONE transaction: the whole run or nothing (`store/incoming.py`); `hold`: possibly still open."""
        return await self.incoming.start_run(record, envelope, session, state_of, hold=hold)

    async def finish_run(
        self,
        snapshot: AuthorizationSnapshot,
        results: Sequence[result_pb2.RunResult],
        status: common_pb2.RunStatus.ValueType,
        reason: str,
        usage: dict[str, Any] | None = None,
        *,
        revoke: bool = True,
    ) -> RunRecord | None:
        """Ends a run in ONE transaction: its unwritten results (a delta batch and the terminal result,
        with their effects), the ledger status and the revoked run token. All or nothing; raises like
        `record_results` (the caller then records the status alone with `ledger.finish_run`)."""
        known = [r for r in results if r.WhichOneof("payload") is not None]
        if any(r.WhichOneof("payload") not in SYNC_KINDS for r in known):
            await self.record_results(snapshot, known)
            known = []
        run_id = snapshot.run_id

        def write(conn: Connection) -> RunRecord | None:
            insert_results_sync(conn, run_id, known)
            for result in known:
                apply_sync(conn, snapshot, result)
            record = finish_run_sync(conn, run_id, status, reason, usage)
            if revoke:
                revoke_sync(conn, run_id)
            return record

        return await self.db.run_write(write)

    async def record_result(
        self,
        snapshot: AuthorizationSnapshot,
        result: result_pb2.RunResult,
        *,
        append_to_ledger: bool = True,
    ) -> bool:
        """Applies one validated run result, all in one transaction:

        - the ledger row (`run_results`, unique `(run_id, sequence)`; skip with `append_to_ledger=False`
          when another `RunLedger` stores results);
        - the event log entry (every type except `message.delta`; tool results as `tool`,
          `action.requested` as `action`, `run.failed` as `error` telemetry);
        - `message.completed` -> assistant transcript item (with its artifact refs);
          `run.completed.message` -> assistant item unless the run already wrote one;
        - `artifact.created` -> artifact store (inline content stored content-addressed);
        - `state.updated` -> state store (scope checked against `snapshot`; a null value deletes).

        Returns False (and writes nothing) when the sequence is already stored. Raises
        `AgentRunnerError` (e.g. `UnauthorizedError` for an ungranted state scope,
        `PayloadTooLargeError`) or `StoreError` with nothing written; the caller fails the run.
        Do not call `ledger.append_result` for the same result as well.
        """
        kind = result.WhichOneof("payload")
        if kind is None:
            log.warning(
                "ignoring a result of unknown type (run %s, seq %s)", snapshot.run_id, result.sequence
            )
            return False
        async with self.db.write() as s:
            if append_to_ledger and not await self.ledger.insert_result(s, snapshot.run_id, result):
                return False
            await self._apply(s, snapshot, result)
        return True

    async def record_results(
        self, snapshot: AuthorizationSnapshot, results: Sequence[result_pb2.RunResult]
    ) -> None:
        """`record_result` for several results of one run in ONE transaction (the run journal batches
        `message.delta` runs this way): ledger rows in one multi-row insert, then each result's other
        effects in order. All or nothing; raises like `record_result` (a stored sequence is an error
        here, since the run numbers results itself)."""
        known = [r for r in results if r.WhichOneof("payload") is not None]
        if not known:
            return
        if all(r.WhichOneof("payload") in SYNC_KINDS for r in known):

            def write(conn: Connection) -> None:
                insert_results_sync(conn, snapshot.run_id, known)
                for result in known:
                    apply_sync(conn, snapshot, result)

            await self.db.run_write(write)
            return
        async with self.db.write() as s:
            await self.ledger.insert_results(s, snapshot.run_id, known)
            for result in known:
                await self._apply(s, snapshot, result)

    async def record_deltas(self, batches: Sequence[tuple[str, Sequence[result_pb2.RunResult]]]) -> None:
        """`message.delta` results of SEVERAL runs in ONE transaction (the run journal's host-wide delta
        batch: concurrent runs share the fixed cost of a commit). All or nothing; deltas have no effect
        beyond their ledger rows."""
        batches = [(run_id, results) for run_id, results in batches if results]
        if not batches:
            return

        def write(conn: Connection) -> None:
            for run_id, results in batches:
                insert_results_sync(conn, run_id, results)

        await self.db.run_write(write)

    async def _apply(
        self, s: AsyncSession, snapshot: AuthorizationSnapshot, result: result_pb2.RunResult
    ) -> None:
        """All effects of a result besides its ledger row, in the session's transaction: the shared
        ones (`result_effects.apply_sync`, on the session's connection) and the two only this path
        writes, since their stores are async (`artifact.created`, `state.updated`; not in `SYNC_KINDS`)."""
        kind = result.WhichOneof("payload")
        if kind == "message_delta":
            return
        await s.run_sync(lambda session: apply_sync(session.connection(), snapshot, result))
        if kind == "artifact_created":
            await self.artifacts.register_created(result.artifact_created, snapshot=snapshot, session=s)
        elif kind == "state_updated":
            update = result.state_updated
            value = value_to_python(update.value) if update.HasField("value") else None
            await self.state.set(snapshot, scope_name(update.scope), update.key, value, session=s)

    # -- capability sinks ------------------------------------------------------------------------

    async def record_model_usage(
        self, run_id: str, model_id: str, usage: common_pb2.Usage, calls: int
    ) -> None:
        """`UsageSink` of the model registry: per-run, per-model token usage and call counts in the run
        ledger (run metadata `model_usage`)."""
        await self.ledger.add_model_usage(run_id, model_id, message_to_json(usage), calls)

    async def store_tool_result(
        self, run_id: str, name: str, data: bytes, mime_type: str
    ) -> common_pb2.ArtifactRef:
        """`ArtifactSink` of the tool registry: an oversized tool result becomes an artifact of the run
        (and of its conversation, so the runner can read it back)."""
        run = await self.ledger.get_run(run_id)
        return await self.artifacts.put_bytes(
            data,
            source="tool",
            conversation_id=run.conversation_id if run else "",
            run_id=run_id,
            binding_id=run.binding_id if run else "",
            mime_type=mime_type,
            name=name,
            summary=f"result of tool {name}",
        )

    async def mark_interrupted(self) -> int:
        """Crash recovery at startup, in one transaction: each run this instance left created/running
        ends `interrupted` with a terminal result (`run.failed` code `host.restarted`, retryable) after
        its last stored one, so its ledger reads like any ended run's (replays end, followers finish),
        and its run token is revoked."""
        owner = self.settings.owner
        now = utcnow()
        async with self.db.write() as s:
            open_runs = (
                await s.execute(
                    select(RunRow.run_id, RunRow.last_sequence)
                    .where(RunRow.status.in_(_OPEN_STATUSES), RunRow.owner == owner)
                    .with_for_update()
                )
            ).all()
            for run_id, last_sequence in open_runs:
                terminal = result_pb2.RunResult(run_id=run_id, sequence=last_sequence + 1)
                terminal.timestamp.FromDatetime(now)
                terminal.run_failed.code = INTERRUPTED_CODE
                terminal.run_failed.message = "the host stopped while the run was open"
                terminal.run_failed.retryable = True
                await self.ledger.insert_result(s, run_id, terminal)
                await s.execute(
                    update(RunRow)
                    .where(RunRow.run_id == run_id)
                    .values(
                        status=common_pb2.RUN_STATUS_INTERRUPTED,
                        status_reason=f"{INTERRUPTED_CODE}: the host stopped while the run was open",
                        finished_at=now,
                        last_sequence=last_sequence + 1,
                    )
                )
            if open_runs:
                await s.execute(
                    update(RunSessionRow)
                    .where(RunSessionRow.run_id.in_([r for r, _ in open_runs]))
                    .values(revoked=True)
                )
        if open_runs:
            log.warning("marked %d runs left open by a previous host process as interrupted", len(open_runs))
        return len(open_runs)

    async def cleanup(self) -> dict[str, int]:
        """One maintenance round: expired artifacts (rows, blobs, files) and stale sessions."""
        return {
            "artifacts": await self.artifacts.cleanup_expired(),
            "sessions": await self.sessions.purge(),
        }

    async def run_maintenance(self, interval: float | None = None) -> None:
        """Runs `cleanup` every `interval` seconds until cancelled; a failed round is logged."""
        await repeat(self.cleanup, interval or self.settings.maintenance_interval, "fact store maintenance")
