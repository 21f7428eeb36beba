"""The tables of the host's fact stores (HOST_SDK §4.6–§4.7): event log, run ledger, transcript,
artifacts, state, storage, run sessions, steering, host secrets and instance leases.

Created by Alembic (`migrations/versions/0001_initial.py` and the revisions after it); keep both in
step. Column types are `schema/base.py`'s.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from agentrunner_host.store.schema.base import Base, BigId, Json, UTCDateTime


class HostSecret(Base):
    """Secrets shared by all replicas (the cursor HMAC key), created on first open."""

    __tablename__ = "host_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)


class EventLogRow(Base):
    """The append-only event log: incoming events, run results, proxy audit, telemetry, errors."""

    __tablename__ = "event_log"
    __table_args__ = (
        Index("ix_event_log_conversation_seq", "conversation_id", "seq"),
        Index("ix_event_log_run_seq", "run_id", "seq"),
    )

    seq: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    #: the event id for incoming events; a generated id for every other record
    record_id: Mapped[str] = mapped_column(String(128), nullable=False, unique=True)
    #: event | result | tool | action | error | audit
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    event_type: Mapped[str] = mapped_column(String(128), nullable=False)
    conversation_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    thread_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    run_id: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    runner_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    bot_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    workspace_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    source: Mapped[str] = mapped_column(String(128), nullable=False, default="")
    actor: Mapped[dict[str, Any]] = mapped_column(Json, nullable=False, default=dict)
    subject: Mapped[dict[str, Any]] = mapped_column(Json, nullable=False, default=dict)
    summary: Mapped[str] = mapped_column(Text, nullable=False, default="")
    data: Mapped[dict[str, Any]] = mapped_column(Json, nullable=False, default=dict)
    occurred_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class RunRow(Base):
    """The run ledger: one record per run."""

    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_conversation_id", "conversation_id", "id"),
        Index("ix_runs_agent_id", "agent_id", "id"),
        Index("ix_runs_runner_id", "runner_id", "id"),
        Index("ix_runs_status_owner", "status", "owner"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    #: unique: a duplicate event attaches to the existing run (race-safe)
    event_id: Mapped[str] = mapped_column(String(128), nullable=False, unique=True)
    agent_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    binding_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    runner_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    status: Mapped[int] = mapped_column(Integer, nullable=False)
    status_reason: Mapped[str] = mapped_column(Text, nullable=False, default="")
    conversation_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    thread_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    bot_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    workspace_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    trace_id: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    #: host instance that runs it; crash recovery only touches its own runs
    owner: Mapped[str] = mapped_column(String(128), nullable=False, default="")
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    deadline_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    cancel_requested_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    usage: Mapped[dict[str, Any]] = mapped_column(Json, nullable=False, default=dict)
    last_sequence: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", Json, nullable=False, default=dict)


class RunResultRow(Base):
    """Validated results of a run (serialized `RunResult`s), unique by `(run_id, sequence)`: one result, or
    a run of consecutive deltas keyed by its last sequence."""

    __tablename__ = "run_results"
    __table_args__ = (UniqueConstraint("run_id", "sequence", name="uq_run_results_run_id_sequence"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False
    )
    sequence: Mapped[int] = mapped_column(BigInteger, nullable=False)
    result_type: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    payload: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    #: results held: 1 = `payload` is one serialized result; more = consecutive `message.delta` results
    #: ending at `sequence`, each framed with its length (`ledger_rows.packed_rows`)
    result_count: Mapped[int] = mapped_column(Integer, nullable=False, default=1, server_default="1")


class ConversationRow(Base):
    """Per-conversation counters; the row lock serializes transcript sequence allocation."""

    __tablename__ = "conversations"

    conversation_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    last_seq: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class TranscriptRow(Base):
    """A message projected from the event log."""

    __tablename__ = "transcript_items"
    __table_args__ = (
        UniqueConstraint("conversation_id", "seq", name="uq_transcript_items_conversation_id_seq"),
        Index("ix_transcript_items_run_id", "run_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    transcript_id: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    conversation_id: Mapped[str] = mapped_column(String(256), nullable=False)
    thread_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    seq: Mapped[int] = mapped_column(BigInteger, nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    item_type: Mapped[str] = mapped_column(String(32), nullable=False, default="message")
    content: Mapped[str] = mapped_column(Text, nullable=False, default="")
    contents: Mapped[list[Any]] = mapped_column(Json, nullable=False, default=list)
    artifacts: Mapped[list[Any]] = mapped_column(Json, nullable=False, default=list)
    event_id: Mapped[str] = mapped_column(String(128), nullable=False, default="")
    run_id: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", Json, nullable=False, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class ArtifactBlobRow(Base):
    """A content-addressed body: in the database when small, on the artifact directory when large."""

    __tablename__ = "artifact_blobs"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False)
    #: db | file
    location: Mapped[str] = mapped_column(String(8), nullable=False)
    body: Mapped[bytes | None] = mapped_column(LargeBinary)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class ArtifactRow(Base):
    """An artifact: ownership, metadata and expiry around a blob (or an external URI)."""

    __tablename__ = "artifacts"
    __table_args__ = (
        Index("ix_artifacts_conversation_id", "conversation_id"),
        Index("ix_artifacts_expires_at", "expires_at"),
        Index("ix_artifacts_sha256", "sha256"),
    )

    artifact_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    size_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    mime_type: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    name: Mapped[str] = mapped_column(String(512), nullable=False, default="")
    uri: Mapped[str] = mapped_column(Text, nullable=False, default="")
    summary: Mapped[str] = mapped_column(Text, nullable=False, default="")
    #: input | runner | tool
    source: Mapped[str] = mapped_column(String(16), nullable=False)
    conversation_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    run_id: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    binding_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", Json, nullable=False, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)


class HostLeaseRow(Base):
    """The lease of a live host instance (`store/leases.py`): renewed by its heartbeat."""

    __tablename__ = "host_leases"

    instance_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    #: random token of the process holding the lease
    holder: Mapped[str] = mapped_column(String(64), nullable=False)
    hostname: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    pid: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    heartbeat_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class StateRow(Base):
    """A small JSON state value, keyed by scope, the scope's namespaced identity and key."""

    __tablename__ = "state_entries"
    __table_args__ = (UniqueConstraint("scope", "owner_key", "key", name="uq_state_entries_scope_owner_key"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    scope: Mapped[str] = mapped_column(String(16), nullable=False)
    #: runner id, binding and the scope's identity
    owner_key: Mapped[str] = mapped_column(String(1024), nullable=False)
    key: Mapped[str] = mapped_column(String(256), nullable=False)
    value: Mapped[Any] = mapped_column(Json, nullable=True)
    size_bytes: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    updated_by_run: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class StorageRow(Base):
    """A byte value in a plugin, workspace or binding storage area."""

    __tablename__ = "storage_entries"
    __table_args__ = (UniqueConstraint("area", "owner_key", "key", name="uq_storage_entries_area_owner_key"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    area: Mapped[str] = mapped_column(String(16), nullable=False)
    owner_key: Mapped[str] = mapped_column(String(1024), nullable=False)
    key: Mapped[str] = mapped_column(String(512), nullable=False)
    value: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    size_bytes: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class RunSessionRow(Base):
    """An active run session, so any replica sharing the database can authorize proxy calls."""

    __tablename__ = "run_sessions"

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    runner_id: Mapped[str] = mapped_column(String(256), nullable=False)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    snapshot: Mapped[dict[str, Any]] = mapped_column(Json, nullable=False)
    revoked: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class SteeringRow(Base):
    """Steering input queued for a conversation; claimed (delivered once) by a run."""

    __tablename__ = "steering_queue"
    __table_args__ = (Index("ix_steering_queue_conversation", "conversation_id", "claimed_by_run", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    steering_id: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    conversation_id: Mapped[str] = mapped_column(String(256), nullable=False)
    thread_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    #: serialized `SteeringInput`
    payload: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    received_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    claimed_by_run: Mapped[str | None] = mapped_column(String(64))
    claimed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)


class RuntimeRow(Base):
    """A runtime that dials in (`RuntimeService`): what it announced and its current state, one row per
    runtime id (written by `store/runtimes.py` only)."""

    __tablename__ = "runtimes"

    runtime_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    client_id: Mapped[str] = mapped_column(String(128), nullable=False, default="")
    #: online | draining | offline
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    status_reason: Mapped[str] = mapped_column(Text, nullable=False, default="")
    #: an operator drained it (kept across reconnects until resumed)
    drained: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    drain_reason: Mapped[str] = mapped_column(Text, nullable=False, default="")
    #: the current (or last) connection
    connection_id: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    instance_id: Mapped[str] = mapped_column(String(128), nullable=False, default="")
    host_instance_id: Mapped[str] = mapped_column(String(128), nullable=False, default="")
    peer: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    machine: Mapped[dict[str, Any]] = mapped_column(Json, nullable=False, default=dict)
    sdk: Mapped[dict[str, Any]] = mapped_column(Json, nullable=False, default=dict)
    labels: Mapped[dict[str, Any]] = mapped_column(Json, nullable=False, default=dict)
    slots: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    #: free slots of its last heartbeat
    free_slots: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    runner_ids: Mapped[list[Any]] = mapped_column(Json, nullable=False, default=list)
    capabilities: Mapped[list[Any]] = mapped_column(Json, nullable=False, default=list)
    heartbeat_interval_ms: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    connected_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    disconnected_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class RuntimeConnectionRow(Base):
    """One connection of a runtime: from `welcome` to the end of its `Connect` stream."""

    __tablename__ = "runtime_connections"
    __table_args__ = (Index("ix_runtime_connections_runtime", "runtime_id", "connected_at"),)

    connection_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    runtime_id: Mapped[str] = mapped_column(String(128), nullable=False)
    instance_id: Mapped[str] = mapped_column(String(128), nullable=False, default="")
    client_id: Mapped[str] = mapped_column(String(128), nullable=False, default="")
    host_instance_id: Mapped[str] = mapped_column(String(128), nullable=False, default="")
    peer: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    connected_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    heartbeats: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    ended_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    end_reason: Mapped[str] = mapped_column(Text, nullable=False, default="")


class RuntimeClaimRow(Base):
    """A run a runtime claimed: which runtime (and connection) ran it, from claim to end."""

    __tablename__ = "runtime_claims"
    __table_args__ = (Index("ix_runtime_claims_runtime", "runtime_id", "claimed_at"),)

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    runtime_id: Mapped[str] = mapped_column(String(128), nullable=False)
    connection_id: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    runner_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    claimed_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    ended_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    #: how the claim ended: the terminal result's type or code, or the stream's error
    outcome: Mapped[str] = mapped_column(Text, nullable=False, default="")


class RuntimeEventRow(Base):
    """The runtimes' audit trail: connected, refused, disconnected, offline, superseded, drained,
    resumed, run claimed, run ended."""

    __tablename__ = "runtime_events"
    __table_args__ = (Index("ix_runtime_events_runtime", "runtime_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    runtime_id: Mapped[str] = mapped_column(String(128), nullable=False, default="")
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    run_id: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    client_id: Mapped[str] = mapped_column(String(128), nullable=False, default="")
    reason: Mapped[str] = mapped_column(Text, nullable=False, default="")
    duration_ms: Mapped[int | None] = mapped_column(BigInteger)
    peer: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
