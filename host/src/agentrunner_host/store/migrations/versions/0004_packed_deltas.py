"""run ledger: a row may hold a run of consecutive `message.delta` results (`run_results.result_count`)

Revision ID: 0004_packed_deltas
Revises: 0003_interactions
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_packed_deltas"
down_revision: str | Sequence[str] | None = "0003_interactions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FRAME = struct.Struct(">I")  # kept identical to agentrunner_host.store.ledger_rows


def upgrade() -> None:
    with op.batch_alter_table("run_results") as batch:
        batch.add_column(sa.Column("result_count", sa.Integer(), server_default="1", nullable=False))


def downgrade() -> None:
    """Unpacks every packed row into one row per result (nothing is lost), then drops the column."""
    from agentrunner.v1 import result_pb2

    bind = op.get_bind()
    results = sa.table(
        "run_results",
        sa.column("id", sa.BigInteger()),
        sa.column("run_id", sa.String()),
        sa.column("sequence", sa.BigInteger()),
        sa.column("result_type", sa.String()),
        sa.column("payload", sa.LargeBinary()),
        sa.column("result_count", sa.Integer()),
        sa.column("created_at", sa.DateTime()),
    )
    packed = bind.execute(
        sa.select(results.c.id, results.c.run_id, results.c.payload, results.c.created_at).where(
            results.c.result_count > 1
        )
    ).all()
    for row_id, run_id, payload, created_at in packed:
        rows = []
        at = 0
        while at < len(payload):
            (size,) = _FRAME.unpack_from(payload, at)
            at += _FRAME.size
            item = payload[at : at + size]
            at += size
            rows.append(
                {
                    "run_id": run_id,
                    "sequence": result_pb2.RunResult.FromString(item).sequence,
                    "result_type": "message.delta",
                    "payload": item,
                    "result_count": 1,
                    "created_at": created_at,
                }
            )
        bind.execute(sa.delete(results).where(results.c.id == row_id))
        bind.execute(sa.insert(results), rows)
    with op.batch_alter_table("run_results") as batch:
        batch.drop_column("result_count")
