"""The seams between the host core and its stores.

The run path (`agentrunner_host.run`) reaches the stores through `RunStore` only, and delivery reaches
an open run through `RunView`; the proxy service uses `SessionRegistry`. `agentrunner_host.store`
implements them on SQLAlchemy (SQLite embedded, PostgreSQL shared by several host replicas,
HOST_SDK_INFRASTRUCTURE §4.6–§4.7); the run path's unit tests use in-memory ones.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias, TypeVar

from agentrunner.v1 import common_pb2, host_service_pb2, proxy_service_pb2, result_pb2


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def hash_token(token: str) -> str:
    """Run tokens are stored only as their sha256, so a leaked database leaks no live credential."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class AuthorizationSnapshot:
    """What one run may do, frozen at run start (HOST_SDK §4.5, PROTOCOL_V1 §13).

    `ctx.resources` and `ctx.context.available_apis` are projections of this object, and every proxy
    call is checked against it; nothing is recomputed after the run starts. Operation sets use the spec
    names (`invoke`, `stream`, `rerank`, `count_tokens`, `detail`, `call`, `retrieve`, `page`, ...).
    """

    run_id: str
    runner_id: str
    agent_id: str
    binding_id: str
    event_id: str = ""
    conversation_id: str = ""
    thread_id: str = ""
    bot_id: str = ""
    workspace_id: str = ""
    actor_id: str = ""
    subject_id: str = ""
    #: model id -> authorized operations
    models: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    #: tool name -> authorized operations
    tools: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    #: knowledge base id -> authorized operations
    knowledge_bases: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    history: frozenset[str] = frozenset()
    events: frozenset[str] = frozenset()
    artifacts: frozenset[str] = frozenset()
    #: largest body `UploadArtifact` accepts for this run (the agent's `artifact_upload_max_bytes`)
    artifact_upload_max_bytes: int = 0
    #: state scopes by spec name: conversation, actor, subject, runner, binding, workspace
    state_scopes: frozenset[str] = frozenset()
    #: storage areas by spec name: plugin, workspace, binding
    storage_areas: frozenset[str] = frozenset()
    #: run record operations: get, list, events_page, cancel, append_result, finalize
    runs: frozenset[str] = frozenset()
    platform_actions: frozenset[str] = frozenset()
    #: bots other than the run's own that platform calls may act as (`bot_id` of SendMessage etc.)
    platform_bots: frozenset[str] = frozenset()
    #: `SendReply`: the event has a delivery target the runner may answer
    reply: bool = False
    prompt: bool = False
    steering: bool = False
    #: whether history / events of other conversations may be read
    cross_conversation: bool = False
    deadline_at: dt.datetime | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in _SNAPSHOT_FIELDS:
            value = getattr(self, name)
            kind = type(value)
            if kind is str or kind is bool or kind is int or value is None:  # most fields: no ABC check
                pass
            elif kind is frozenset:
                value = sorted(value) if value else []
            elif isinstance(value, dt.datetime):
                value = value.isoformat()
            elif isinstance(value, Mapping):
                value = {k: sorted(v) for k, v in value.items()}
            elif isinstance(value, frozenset):
                value = sorted(value)
            out[name] = value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AuthorizationSnapshot:
        kwargs: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            if field.name not in data:
                continue
            value = data[field.name]
            if field.name in {"models", "tools", "knowledge_bases"}:
                value = {k: frozenset(v) for k, v in value.items()}
            elif field.name == "deadline_at":
                value = dt.datetime.fromisoformat(value) if value else None
            elif isinstance(value, list):
                value = frozenset(value)
            kwargs[field.name] = value
        return cls(**kwargs)


_SNAPSHOT_FIELDS = tuple(field.name for field in dataclasses.fields(AuthorizationSnapshot))


def state_identity(snapshot: AuthorizationSnapshot, scope: str) -> str:
    """Whose `scope` state the run reads and writes ('' when the run has no such identity: e.g.
    conversation state in a run without a conversation). The state store and the result validator both
    ask this, so a state update the store would refuse is dropped by the validator instead."""
    match scope:
        case "conversation":
            return snapshot.conversation_id and f"{snapshot.conversation_id}\x1f{snapshot.thread_id}"
        case "actor":
            return snapshot.actor_id
        case "subject":
            return snapshot.subject_id
        case "workspace":
            return snapshot.workspace_id
        case _:  # runner, binding: the namespace itself is the identity
            return "-"


@dataclasses.dataclass(slots=True)
class RunSession:
    """An active run as the proxy service sees it: the token's identity plus the frozen snapshot."""

    run_id: str
    token_hash: str
    runner_id: str
    expires_at: dt.datetime
    snapshot: AuthorizationSnapshot
    revoked: bool = False


class SessionRegistry(Protocol):
    """Active run sessions. Shared by replicas when database-backed."""

    async def register(self, session: RunSession) -> None: ...

    async def lookup(self, token: str) -> RunSession | None:
        """The live session for a token; None when unknown, expired or revoked."""
        ...

    async def unregister(self, run_id: str) -> None:
        """Revokes the run's token. Idempotent."""
        ...


@dataclasses.dataclass(slots=True)
class RunRecord:
    """One row of the run ledger (mirrors `agentrunner.v1.Run`)."""

    run_id: str
    event_id: str
    agent_id: str
    binding_id: str
    runner_id: str
    status: common_pb2.RunStatus.ValueType = common_pb2.RUN_STATUS_CREATED
    status_reason: str = ""
    conversation_id: str = ""
    thread_id: str = ""
    bot_id: str = ""
    workspace_id: str = ""
    trace_id: str = ""
    created_at: dt.datetime = dataclasses.field(default_factory=utcnow)
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    deadline_at: dt.datetime | None = None
    cancel_requested_at: dt.datetime | None = None
    usage: dict[str, Any] = dataclasses.field(default_factory=dict)
    last_sequence: int = 0
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


TERMINAL_STATUSES = frozenset(
    {
        common_pb2.RUN_STATUS_COMPLETED,
        common_pb2.RUN_STATUS_FAILED,
        common_pb2.RUN_STATUS_CANCELLED,
        common_pb2.RUN_STATUS_TIMEOUT,
        common_pb2.RUN_STATUS_INTERRUPTED,
        common_pb2.RUN_STATUS_DISCARDED,
    }
)


class RunLedger(Protocol):
    """One record per run plus the run's validated results in sequence order: what the run path and
    the proxy read, and the writes made outside a run's own transactions (`RunStore` writes the rest)."""

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def list_results(
        self, run_id: str, after_sequence: int = 0, limit: int | None = None
    ) -> Sequence[result_pb2.RunResult]: ...

    async def request_cancel(self, run_id: str, at: dt.datetime) -> RunRecord | None: ...

    async def finish_run(
        self,
        run_id: str,
        status: common_pb2.RunStatus.ValueType,
        reason: str,
        usage: Mapping[str, Any] | None = None,
    ) -> RunRecord | None:
        """Sets the terminal status once; a second call leaves the first status in place."""
        ...

    async def list_runs(
        self,
        conversation_id: str,
        statuses: Sequence[int] = (),
        before_cursor: str = "",
        limit: int = 50,
    ) -> tuple[Sequence[RunRecord], str]:
        """Newest first; returns the records and the next cursor ('' when none)."""
        ...


@dataclasses.dataclass(slots=True)
class RecordedEvent:
    """What recording an incoming event stored, for building `RunContext.input` and `ContextAccess`."""

    event_seq: int | None
    #: the user message's transcript sequence (None for non-message events)
    transcript_seq: int | None
    #: cursor to page history *before* the current message (ContextAccess.latest_cursor)
    latest_cursor: str
    has_history_before: bool
    #: incoming attachments registered as artifacts, in order (RunInput.attachments)
    attachments: list[common_pb2.ArtifactRef]
    #: False when the event id was already recorded (a duplicate delivery): nothing was written
    created: bool
    #: the run context's state snapshot, when the run start was asked to read it in its transaction
    state: dict[str, dict[str, Any]] | None = None


class HeldCommit(Protocol):
    """A run-start transaction whose statements ran and whose COMMIT is still to come."""

    def commit(self) -> None:
        """Commits (a second call is a no-op); raises `StoreError` with nothing recorded."""
        ...

    def rollback(self) -> None: ...


@dataclasses.dataclass(slots=True)
class StartedRun:
    """What `RunStore.start_run` recorded: the run (the stored one for a duplicate event), the event
    (None for a duplicate: nothing was written) and, when the store held the transaction open, its
    commit, still to come (`commit`)."""

    record: RunRecord
    recorded: RecordedEvent | None
    held: HeldCommit | None = None

    def commit(self) -> None:
        """Commits the run start if it is still held; a no-op once committed. Raises `StoreError`
        (then nothing of the run is recorded)."""
        held, self.held = self.held, None
        if held is not None:
            held.commit()


RunStatus: TypeAlias = common_pb2.RunStatus.ValueType


class SteeringStore(Protocol):
    async def enqueue(
        self, *, conversation_id: str, thread_id: str, item: proxy_service_pb2.SteeringInput
    ) -> proxy_service_pb2.SteeringInput: ...

    async def claim(self, *, run_id: str, conversation_id: str) -> Sequence[proxy_service_pb2.SteeringInput]:
        """Takes the conversation's unclaimed steering items for `run_id` (each is taken once)."""
        ...


class TranscriptAppender(Protocol):
    """Adds one item to a conversation's transcript."""

    async def append(
        self,
        *,
        conversation_id: str,
        role: str,
        content: str = "",
        thread_id: str = "",
        event_id: str = "",
        run_id: str = "",
        metadata: Mapping[str, Any] | None = None,
    ) -> object: ...  # the stored item (the run path does not read it)


class RunStore(Protocol):
    """Everything the run path records and reads. Each write is one transaction, all or nothing."""

    @property
    def ledger(self) -> RunLedger: ...

    @property
    def sessions(self) -> SessionRegistry: ...

    @property
    def steering(self) -> SteeringStore: ...

    @property
    def transcript(self) -> TranscriptAppender: ...

    async def start_run(
        self,
        record: RunRecord,
        envelope: host_service_pb2.EventEnvelope,
        session: RunSession | None = None,
        state_of: AuthorizationSnapshot | None = None,
        *,
        hold: bool = False,
    ) -> StartedRun:
        """The run row, the event (log + transcript message), the session and the state snapshot's read
        in ONE transaction: a whole run or nothing. `hold`: the store may return it still open
        (`StartedRun.held`), for the caller to commit once the runner call is on its way."""
        ...

    async def record_event(
        self,
        envelope: host_service_pb2.EventEnvelope,
        *,
        run_id: str = "",
        runner_id: str = "",
        binding_id: str = "",
    ) -> RecordedEvent: ...

    async def record_results(
        self, snapshot: AuthorizationSnapshot, results: Sequence[result_pb2.RunResult]
    ) -> None: ...

    async def record_deltas(self, batches: Sequence[tuple[str, Sequence[result_pb2.RunResult]]]) -> None: ...

    async def finish_run(
        self,
        snapshot: AuthorizationSnapshot,
        results: Sequence[result_pb2.RunResult],
        status: RunStatus,
        reason: str,
        usage: dict[str, Any] | None = None,
    ) -> RunRecord | None:
        """The run's unwritten results, its final status and the revoked token in ONE transaction."""
        ...


class RunView(Protocol):
    """An open run as delivery sees it (`delivery.channel.RunChannel`, interactions)."""

    @property
    def run_id(self) -> str: ...

    @property
    def record(self) -> RunRecord: ...

    @property
    def snapshot(self) -> AuthorizationSnapshot: ...

    def publish(self, update: host_service_pb2.HostServiceRunResponse) -> None:
        """Hands an update to the run's followers."""
        ...

    def last_sequence(self) -> int:
        """The sequence of the last result handed out (0: none yet)."""
        ...

    def mark_output(self) -> None:
        """Something the run delivered counts as its output (grammar rule 7)."""
        ...


ItemT = TypeVar("ItemT", covariant=True)


class UpdateStream(Protocol[ItemT]):
    """What `RunService.open` returns: iterate it once, close it when done (`contextlib.aclosing`)."""

    def __aiter__(self) -> AsyncIterator[ItemT]: ...

    def __anext__(self) -> Awaitable[ItemT]: ...

    async def aclose(self) -> None: ...
