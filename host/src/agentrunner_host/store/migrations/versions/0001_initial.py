"""initial schema: event log, run ledger, transcript, artifacts, state, storage, run sessions, steering

Revision ID: 0001_initial
Revises:
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001_initial"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Timestamps are naive UTC (see models.UTCDateTime); JSON is JSONB on PostgreSQL.
JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "artifact_blobs",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("location", sa.String(length=8), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_artifact_blobs")),
    )
    op.create_table(
        "artifacts",
        sa.Column("artifact_id", sa.String(length=64), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("mime_type", sa.String(length=256), nullable=False),
        sa.Column("name", sa.String(length=512), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("conversation_id", sa.String(length=256), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("binding_id", sa.String(length=256), nullable=False),
        sa.Column("metadata", JSON_TYPE, nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("artifact_id", name=op.f("pk_artifacts")),
    )
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.create_index("ix_artifacts_conversation_id", ["conversation_id"], unique=False)
        batch_op.create_index("ix_artifacts_expires_at", ["expires_at"], unique=False)
        batch_op.create_index("ix_artifacts_sha256", ["sha256"], unique=False)

    op.create_table(
        "conversations",
        sa.Column("conversation_id", sa.String(length=256), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_conversations")),
    )
    op.create_table(
        "event_log",
        sa.Column("seq", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("record_id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("event_type", sa.String(length=128), nullable=False),
        sa.Column("conversation_id", sa.String(length=256), nullable=False),
        sa.Column("thread_id", sa.String(length=256), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("runner_id", sa.String(length=256), nullable=False),
        sa.Column("bot_id", sa.String(length=256), nullable=False),
        sa.Column("workspace_id", sa.String(length=256), nullable=False),
        sa.Column("source", sa.String(length=128), nullable=False),
        sa.Column("actor", JSON_TYPE, nullable=False),
        sa.Column("subject", JSON_TYPE, nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("data", JSON_TYPE, nullable=False),
        sa.Column("occurred_at", sa.DateTime(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_event_log")),
        sa.UniqueConstraint("record_id", name=op.f("uq_event_log_record_id")),
    )
    with op.batch_alter_table("event_log", schema=None) as batch_op:
        batch_op.create_index("ix_event_log_conversation_seq", ["conversation_id", "seq"], unique=False)
        batch_op.create_index("ix_event_log_run_seq", ["run_id", "seq"], unique=False)

    op.create_table(
        "host_secrets",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_host_secrets")),
    )
    op.create_table(
        "run_sessions",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("runner_id", sa.String(length=256), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("snapshot", JSON_TYPE, nullable=False),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_run_sessions_token_hash")),
    )
    op.create_table(
        "runs",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.String(length=128), nullable=False),
        sa.Column("agent_id", sa.String(length=256), nullable=False),
        sa.Column("binding_id", sa.String(length=256), nullable=False),
        sa.Column("runner_id", sa.String(length=256), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("status_reason", sa.Text(), nullable=False),
        sa.Column("conversation_id", sa.String(length=256), nullable=False),
        sa.Column("thread_id", sa.String(length=256), nullable=False),
        sa.Column("bot_id", sa.String(length=256), nullable=False),
        sa.Column("workspace_id", sa.String(length=256), nullable=False),
        sa.Column("trace_id", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("deadline_at", sa.DateTime(), nullable=True),
        sa.Column("cancel_requested_at", sa.DateTime(), nullable=True),
        sa.Column("usage", JSON_TYPE, nullable=False),
        sa.Column("last_sequence", sa.BigInteger(), nullable=False),
        sa.Column("metadata", JSON_TYPE, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("event_id", name=op.f("uq_runs_event_id")),
        sa.UniqueConstraint("run_id", name=op.f("uq_runs_run_id")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_conversation_id", ["conversation_id", "id"], unique=False)
        batch_op.create_index("ix_runs_status_owner", ["status", "owner"], unique=False)

    op.create_table(
        "state_entries",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("owner_key", sa.String(length=1024), nullable=False),
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.Column("value", JSON_TYPE, nullable=True),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("updated_by_run", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_state_entries")),
        sa.UniqueConstraint("scope", "owner_key", "key", name="uq_state_entries_scope_owner_key"),
    )
    op.create_table(
        "steering_queue",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("steering_id", sa.String(length=64), nullable=False),
        sa.Column("conversation_id", sa.String(length=256), nullable=False),
        sa.Column("thread_id", sa.String(length=256), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("received_at", sa.DateTime(), nullable=False),
        sa.Column("claimed_by_run", sa.String(length=64), nullable=True),
        sa.Column("claimed_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_steering_queue")),
        sa.UniqueConstraint("steering_id", name=op.f("uq_steering_queue_steering_id")),
    )
    with op.batch_alter_table("steering_queue", schema=None) as batch_op:
        batch_op.create_index(
            "ix_steering_queue_conversation", ["conversation_id", "claimed_by_run", "id"], unique=False
        )

    op.create_table(
        "storage_entries",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("area", sa.String(length=16), nullable=False),
        sa.Column("owner_key", sa.String(length=1024), nullable=False),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_storage_entries")),
        sa.UniqueConstraint("area", "owner_key", "key", name="uq_storage_entries_area_owner_key"),
    )
    op.create_table(
        "transcript_items",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("transcript_id", sa.String(length=64), nullable=False),
        sa.Column("conversation_id", sa.String(length=256), nullable=False),
        sa.Column("thread_id", sa.String(length=256), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("item_type", sa.String(length=32), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("contents", JSON_TYPE, nullable=False),
        sa.Column("artifacts", JSON_TYPE, nullable=False),
        sa.Column("event_id", sa.String(length=128), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("metadata", JSON_TYPE, nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_transcript_items")),
        sa.UniqueConstraint("conversation_id", "seq", name="uq_transcript_items_conversation_id_seq"),
        sa.UniqueConstraint("transcript_id", name=op.f("uq_transcript_items_transcript_id")),
    )
    with op.batch_alter_table("transcript_items", schema=None) as batch_op:
        batch_op.create_index("ix_transcript_items_run_id", ["run_id"], unique=False)

    op.create_table(
        "run_results",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("result_type", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.run_id"], name=op.f("fk_run_results_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_results")),
        sa.UniqueConstraint("run_id", "sequence", name="uq_run_results_run_id_sequence"),
    )

    _create_full_text_search()


FTS_SQLITE = [
    # External-content FTS5 index over transcript_items.content; kept in step by triggers.
    "CREATE VIRTUAL TABLE transcript_fts USING fts5("
    "content, content='transcript_items', content_rowid='id', tokenize='unicode61')",
    "CREATE TRIGGER transcript_items_fts_ai AFTER INSERT ON transcript_items BEGIN "
    "INSERT INTO transcript_fts(rowid, content) VALUES (new.id, new.content); END",
    "CREATE TRIGGER transcript_items_fts_ad AFTER DELETE ON transcript_items BEGIN "
    "INSERT INTO transcript_fts(transcript_fts, rowid, content) VALUES ('delete', old.id, old.content); END",
]


def _create_full_text_search() -> None:
    """SQLite FTS5 or a PostgreSQL GIN index on `to_tsvector('simple', content)`."""
    if op.get_bind().dialect.name == "sqlite":
        for statement in FTS_SQLITE:
            op.execute(statement)
    else:
        op.execute(
            "CREATE INDEX ix_transcript_items_fts ON transcript_items "
            "USING gin (to_tsvector('simple', content))"
        )


def _drop_full_text_search() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS transcript_items_fts_ad")
        op.execute("DROP TRIGGER IF EXISTS transcript_items_fts_ai")
        op.execute("DROP TABLE IF EXISTS transcript_fts")
    else:
        op.execute("DROP INDEX IF EXISTS ix_transcript_items_fts")


def downgrade() -> None:
    _drop_full_text_search()
    op.drop_table("run_results")
    with op.batch_alter_table("transcript_items", schema=None) as batch_op:
        batch_op.drop_index("ix_transcript_items_run_id")

    op.drop_table("transcript_items")
    op.drop_table("storage_entries")
    with op.batch_alter_table("steering_queue", schema=None) as batch_op:
        batch_op.drop_index("ix_steering_queue_conversation")

    op.drop_table("steering_queue")
    op.drop_table("state_entries")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_status_owner")
        batch_op.drop_index("ix_runs_conversation_id")

    op.drop_table("runs")
    op.drop_table("run_sessions")
    op.drop_table("host_secrets")
    with op.batch_alter_table("event_log", schema=None) as batch_op:
        batch_op.drop_index("ix_event_log_run_seq")
        batch_op.drop_index("ix_event_log_conversation_seq")

    op.drop_table("event_log")
    op.drop_table("conversations")
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.drop_index("ix_artifacts_sha256")
        batch_op.drop_index("ix_artifacts_expires_at")
        batch_op.drop_index("ix_artifacts_conversation_id")

    op.drop_table("artifacts")
    op.drop_table("artifact_blobs")
