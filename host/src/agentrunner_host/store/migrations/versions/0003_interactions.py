"""runner API parity: delivered reply / interaction items, platform-send idempotency, interactions

Revision ID: 0003_interactions
Revises: 0002_knowledge
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003_interactions"
down_revision: str | Sequence[str] | None = "0002_knowledge"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Kept identical to agentrunner_host.delivery.store (naive UTC timestamps, JSONB on PostgreSQL).
JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "run_deliveries",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("after_sequence", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_deliveries")),
    )
    op.create_index("ix_run_deliveries_run_id", "run_deliveries", ["run_id", "id"])
    op.create_table(
        "platform_sends",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("binding_id", sa.String(length=256), nullable=False),
        sa.Column("idempotency_key", sa.String(length=256), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=600), nullable=False),
        sa.Column("response", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_platform_sends")),
        sa.UniqueConstraint(
            "binding_id", "idempotency_key", name="uq_platform_sends_binding_id_idempotency_key"
        ),
    )
    op.create_table(
        "interactions",
        sa.Column("interaction_id", sa.String(length=255), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("conversation_id", sa.String(length=256), nullable=False),
        sa.Column("thread_id", sa.String(length=256), nullable=False),
        sa.Column("binding_id", sa.String(length=256), nullable=False),
        sa.Column("agent_id", sa.String(length=256), nullable=False),
        sa.Column("bot_id", sa.String(length=256), nullable=False),
        sa.Column("workspace_id", sa.String(length=256), nullable=False),
        sa.Column("actor", JSON_TYPE, nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("request", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("submitted_at", sa.DateTime(), nullable=True),
        sa.Column("event_id", sa.String(length=128), nullable=True),
        sa.Column("submitted_run_id", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("interaction_id", name=op.f("pk_interactions")),
    )
    op.create_index("ix_interactions_status_expires_at", "interactions", ["status", "expires_at"])
    op.create_index("ix_interactions_conversation_id", "interactions", ["conversation_id"])


def downgrade() -> None:
    op.drop_index("ix_interactions_conversation_id", table_name="interactions")
    op.drop_index("ix_interactions_status_expires_at", table_name="interactions")
    op.drop_table("interactions")
    op.drop_table("platform_sends")
    op.drop_index("ix_run_deliveries_run_id", table_name="run_deliveries")
    op.drop_table("run_deliveries")
