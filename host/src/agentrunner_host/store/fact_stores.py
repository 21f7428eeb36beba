"""`FactStores`: every fact store of the host, built from one `Database`, plus the run path's
entry points that write several stores in one transaction.

Typical host wiring::

    db = Database(settings.database_url)
    ensure_current(settings.database_url)            # refuse an un-migrated database
    stores = await FactStores.open(db, FactStoreSettings(artifact_dir=..., owner=instance_id))
    await stores.mark_interrupted(ending, status)    # crash recovery, once at startup (`host.restarted`)
    await stores.take_over(lease, ending, status)    # a lost replica's runs (the fleet's takeover)
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

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession

from agentrunner.v1 import common_pb2, host_service_pb2, result_pb2
from agentrunner_host.ports import (
    AuthorizationSnapshot,
    RecordedEvent,
    RunRecord,
    RunSession,
    RunStatus,
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
from agentrunner_host.store.leases import Lease, expire_sync
from agentrunner_host.store.ledger import (
    SqlRunLedger,
    finish_run_sync,
    insert_deltas_sync,
    insert_results_sync,
    open_runs_sync,
)
from agentrunner_host.store.mailbox import purge_instance_sync
from agentrunner_host.store.result_effects import SYNC_KINDS, apply_sync
from agentrunner_host.store.runtimes import host_lost_sync
from agentrunner_host.store.schema import HostSecret
from agentrunner_host.store.sessions import SqlSessionRegistry, revoke_sync
from agentrunner_host.store.state import StateStore, scope_name
from agentrunner_host.store.steering import SteeringQueue
from agentrunner_host.store.storage import StorageStore
from agentrunner_host.store.transcript import Transcript

log = logging.getLogger(__name__)


def _interrupt_sync(
    conn: Connection, owner: str, ending: result_pb2.RunResult, status: RunStatus
) -> list[str]:
    """Ends every run `owner` left created or running with a copy of `ending` (numbered after its last
    stored result), `status`, and its run token revoked; the run ids."""
    reason = f"{ending.run_failed.code}: {ending.run_failed.message}"
    open_runs = open_runs_sync(conn, owner)
    for run_id, last_sequence in open_runs:
        terminal = result_pb2.RunResult()
        terminal.CopyFrom(ending)
        terminal.run_id, terminal.sequence = run_id, last_sequence + 1
        insert_results_sync(conn, run_id, [terminal])
        finish_run_sync(conn, run_id, status, reason)
        revoke_sync(conn, run_id)
    return [run_id for run_id, _ in open_runs]


_CURSOR_SECRET = "cursor-hmac"


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
        self.ledger = SqlRunLedger(db, codec)
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

        # inline: on the event loop when no other write waits (as the run start), which saves the
        # hand-off to the writer thread and back (two wake-ups per run, docs/performance.md)
        return await self.db.run_write(write, inline=True)

    async def record_results(
        self, snapshot: AuthorizationSnapshot, results: Sequence[result_pb2.RunResult]
    ) -> None:
        """Applies validated results of one run, all in ONE transaction (the run journal's batches):

        - the ledger rows (`ledger.insert_results_sync`: consecutive deltas share one; results come in
          sequence order after the run's stored ones, else `AlreadyExistsError`);
        - each result's other effects in order (`result_effects.apply_sync`: the event log entry, the
          assistant transcript item; `_apply`: `artifact.created` -> artifact store, `state.updated` ->
          state store, its scope checked against `snapshot`).

        A result of unknown type is skipped. All or nothing: raises `AgentRunnerError` (e.g.
        `UnauthorizedError` for an ungranted state scope, `PayloadTooLargeError`) or `StoreError` with
        nothing written; the caller fails the run."""
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
            await s.run_sync(
                lambda session: insert_results_sync(session.connection(), snapshot.run_id, known)
            )
            for result in known:
                await self._apply(s, snapshot, result)

    async def record_deltas(self, batches: Sequence[tuple[str, Sequence[result_pb2.RunResult]]]) -> None:
        """`message.delta` results of SEVERAL runs in ONE transaction (the run journal's host-wide delta
        batch: concurrent runs share the fixed cost of a commit). All or nothing; deltas have no effect
        beyond their ledger rows."""
        batches = [(run_id, results) for run_id, results in batches if results]
        if not batches:
            return

        await self.db.run_write(lambda conn: insert_deltas_sync(conn, batches))

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

    async def mark_interrupted(self, ending: result_pb2.RunResult, status: RunStatus) -> int:
        """Crash recovery at startup, in one transaction: each run this instance left created/running
        ends with `status` and a copy of `ending` as its terminal result (the `run.failed` the failure
        table gives a host restart: `run/outcomes.py`, `host.restarted`), numbered after its last stored
        one, so its ledger reads like any ended run's (replays end, followers finish); its reason is the
        code and message, and its run token is revoked. Returns how many runs it ended."""
        interrupted = await self.db.run_write(
            lambda conn: len(_interrupt_sync(conn, self.settings.owner, ending, status))
        )
        if interrupted:
            log.warning("marked %d runs left open by a previous host process as interrupted", interrupted)
        return interrupted

    async def take_over(
        self, lease: Lease, ending: result_pb2.RunResult, status: RunStatus
    ) -> list[str] | None:
        """The fleet's takeover of a lost replica, in one transaction: its expired `lease` is ended
        (`leases.expire_sync`: of replicas racing, exactly one gets past it; the others get None), its
        open runs end as `mark_interrupted` ends them (with `ending`, which names the lost replica), and
        its fleet mailbox rows are forgotten and the runtimes it held are offline. The run ids it ended."""

        def write(conn: Connection) -> list[str] | None:
            if not expire_sync(conn, lease, utcnow()):
                return None
            ended = _interrupt_sync(conn, lease.instance_id, ending, status)
            purge_instance_sync(conn, lease.instance_id)
            host_lost_sync(conn, lease.instance_id, utcnow())
            return ended

        return await self.db.run_write(write)

    async def cleanup(self) -> dict[str, int]:
        """One maintenance round: expired artifacts (rows, blobs, files) and stale sessions."""
        return {
            "artifacts": await self.artifacts.cleanup_expired(),
            "sessions": await self.sessions.purge(),
        }

    async def run_maintenance(self, interval: float | None = None) -> None:
        """Runs `cleanup` every `interval` seconds until cancelled; a failed round is logged."""
        await repeat(self.cleanup, interval or self.settings.maintenance_interval, "fact store maintenance")
