"""Conversation state per agent, host instance leases, run-listing indexes

- Conversation, actor and subject state were namespaced by the binding that routed the run; they are
  namespaced by the agent now (`store/state.py`), so an interaction's answer run (routed by an
  `interaction.submitted` binding) sees the state its question stored. Existing rows move to their
  agent's namespace (the agent of the run that last wrote them); where two bindings of one agent
  held the same key, the most recent value is kept. Rows whose writing run is gone stay as they are.
- `host_leases`: one row per live host instance (`instance_id`), renewed by a heartbeat; a second host
  with the same `instance_id` refuses to start instead of interrupting the first one's runs.
- `runs` indexes for `HostService.ListRuns` filtered by agent or runner, newest first.

Revision ID: 0006_agent_state_leases
Revises: 0005_deferred_fts
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_agent_state_leases"
down_revision: str | Sequence[str] | None = "0005_deferred_fts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_AGENT_SCOPES = ("conversation", "actor", "subject")
_SEP = "\x1e"


def _restate(conn: sa.engine.Connection, *, to_agent: bool) -> None:
    found = conn.execute(
        sa.text(
            "SELECT s.id, s.scope, s.owner_key, s.key, s.updated_at, r.agent_id, r.binding_id "
            "FROM state_entries s JOIN runs r ON r.run_id = s.updated_by_run "
            "WHERE s.scope IN ('conversation', 'actor', 'subject')"
        )
    ).all()
    # newest first: the first row to claim a (scope, owner, key) keeps it, older ones are dropped
    rows = sorted(found, key=lambda r: r.updated_at, reverse=True)
    taken = {
        (r.scope, r.owner_key, r.key)
        for r in conn.execute(sa.text("SELECT scope, owner_key, key FROM state_entries")).all()
    }
    for row in rows:
        parts = row.owner_key.split(_SEP, 2)
        if len(parts) != 3:
            continue
        middle = f"a:{row.agent_id}" if to_agent else row.binding_id
        if parts[1] == middle:
            continue
        owner = _SEP.join((parts[0], middle, parts[2]))
        target = (row.scope, owner, row.key)
        taken.discard((row.scope, row.owner_key, row.key))
        if target in taken:
            conn.execute(sa.text("DELETE FROM state_entries WHERE id = :id"), {"id": row.id})
            continue
        conn.execute(
            sa.text("UPDATE state_entries SET owner_key = :o WHERE id = :id"), {"o": owner, "id": row.id}
        )
        taken.add(target)


def upgrade() -> None:
    _restate(op.get_bind(), to_agent=True)
    op.create_table(
        "host_leases",
        sa.Column("instance_id", sa.String(128), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("hostname", sa.String(256), nullable=False, server_default=""),
        sa.Column("pid", sa.Integer, nullable=False, server_default="0"),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_runs_agent_id", "runs", ["agent_id", "id"])
    op.create_index("ix_runs_runner_id", "runs", ["runner_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_runs_runner_id", table_name="runs")
    op.drop_index("ix_runs_agent_id", table_name="runs")
    op.drop_table("host_leases")
    _restate(op.get_bind(), to_agent=False)
