"""runtimes that dial in: the runtime registry, its connections, claimed runs and audit trail

- `runtimes`: one row per runtime id (what it announced, its state, the operator's drain);
- `runtime_connections`: one row per connection (heartbeats counted, how it ended);
- `runtime_claims`: which runtime ran which run, from claim to end;
- `runtime_events`: the audit trail (connected, refused, disconnected, offline, superseded, drained,
  resumed, run claimed, run ended).

Revision ID: 0008_runtimes
Revises: 0007_kb_vectors
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008_runtimes"
down_revision: str | Sequence[str] | None = "0007_kb_vectors"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _text(name: str, length: int | None = None) -> sa.Column[str]:
    kind: sa.types.TypeEngine[str] = sa.String(length) if length else sa.Text()
    return sa.Column(name, kind, nullable=False, server_default="")


def upgrade() -> None:
    op.create_table(
        "runtimes",
        sa.Column("runtime_id", sa.String(128), nullable=False),
        _text("client_id", 128),
        sa.Column("status", sa.String(16), nullable=False),
        _text("status_reason"),
        sa.Column("drained", sa.Boolean(), nullable=False, server_default=sa.false()),
        _text("drain_reason"),
        _text("connection_id", 64),
        _text("instance_id", 128),
        _text("host_instance_id", 128),
        _text("peer", 256),
        sa.Column("machine", JSON_TYPE, nullable=False),
        sa.Column("sdk", JSON_TYPE, nullable=False),
        sa.Column("labels", JSON_TYPE, nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("free_slots", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("runner_ids", JSON_TYPE, nullable=False),
        sa.Column("capabilities", JSON_TYPE, nullable=False),
        sa.Column("heartbeat_interval_ms", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("connected_at", sa.DateTime(), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=True),
        sa.Column("disconnected_at", sa.DateTime(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("runtime_id", name=op.f("pk_runtimes")),
    )
    op.create_table(
        "runtime_connections",
        sa.Column("connection_id", sa.String(64), nullable=False),
        sa.Column("runtime_id", sa.String(128), nullable=False),
        _text("instance_id", 128),
        _text("client_id", 128),
        _text("host_instance_id", 128),
        _text("peer", 256),
        sa.Column("connected_at", sa.DateTime(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=True),
        sa.Column("heartbeats", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        _text("end_reason"),
        sa.PrimaryKeyConstraint("connection_id", name=op.f("pk_runtime_connections")),
    )
    op.create_index("ix_runtime_connections_runtime", "runtime_connections", ["runtime_id", "connected_at"])
    op.create_table(
        "runtime_claims",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("runtime_id", sa.String(128), nullable=False),
        _text("connection_id", 64),
        _text("runner_id", 256),
        sa.Column("claimed_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        _text("outcome"),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_runtime_claims")),
    )
    op.create_index("ix_runtime_claims_runtime", "runtime_claims", ["runtime_id", "claimed_at"])
    op.create_table(
        "runtime_events",
        sa.Column("id", BIG_ID, nullable=False, autoincrement=True),
        _text("runtime_id", 128),
        sa.Column("kind", sa.String(32), nullable=False),
        _text("run_id", 64),
        _text("client_id", 128),
        _text("reason"),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        _text("peer", 256),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runtime_events")),
    )
    op.create_index("ix_runtime_events_runtime", "runtime_events", ["runtime_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_runtime_events_runtime", table_name="runtime_events")
    op.drop_table("runtime_events")
    op.drop_index("ix_runtime_claims_runtime", table_name="runtime_claims")
    op.drop_table("runtime_claims")
    op.drop_index("ix_runtime_connections_runtime", table_name="runtime_connections")
    op.drop_table("runtime_connections")
    op.drop_table("runtimes")
