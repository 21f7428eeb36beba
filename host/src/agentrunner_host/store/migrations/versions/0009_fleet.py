"""a host fleet on one database: the mailbox replicas hand each other operations through

- `fleet_mailbox`: one row per operation one replica hands another (cancel, append, steer, reply,
  control signal, ...): the NOTIFY that announces it may be lost, the row is not (`store/mailbox.py`).

Numbered 0009 after the runtimes branch's `0008_runtimes`; it revises `0007_kb_vectors` until that
branch is merged, then `0008_runtimes`.

Revision ID: 0009_fleet
Revises: 0007_kb_vectors
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_fleet"
down_revision: str | Sequence[str] | None = "0008_runtimes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "fleet_mailbox",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("origin", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("key", sa.String(256), nullable=False, server_default=""),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("want_reply", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("state", sa.Integer, nullable=False, server_default="0"),
        sa.Column("reply", sa.LargeBinary, nullable=True),
        sa.Column("failed", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("answered_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_mailbox")),
    )
    op.create_index("ix_fleet_mailbox_target_state", "fleet_mailbox", ["target", "state", "id"])


def downgrade() -> None:
    op.drop_index("ix_fleet_mailbox_target_state", table_name="fleet_mailbox")
    op.drop_table("fleet_mailbox")
