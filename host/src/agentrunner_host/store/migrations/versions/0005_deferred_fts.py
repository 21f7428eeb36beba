"""SQLite: transcript full-text index written in batches, not by a trigger per inserted row

The FTS5 trigger made every transcript insert write a new index segment at its commit: about a third
of the run-start transaction. Rows are now indexed in batches (`transcript_search.index_pending_sync`: by the
host's indexer loop, and before every search, so a search still sees every committed row) up to the
high-water mark kept in `transcript_fts_state`. PostgreSQL (a GIN expression index) is unchanged.

Revision ID: 0005_deferred_fts
Revises: 0004_packed_deltas
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005_deferred_fts"
down_revision: str | Sequence[str] | None = "0004_packed_deltas"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Kept identical to agentrunner_host.store.transcript_search (INDEX_PENDING_SQLITE).
_INDEX_PENDING = [
    "INSERT INTO transcript_fts(rowid, content) SELECT id, content FROM transcript_items "
    "WHERE id > (SELECT indexed_through FROM transcript_fts_state WHERE id = 1) ORDER BY id",
    "UPDATE transcript_fts_state SET indexed_through = "
    "(SELECT COALESCE(MAX(id), indexed_through) FROM transcript_items) WHERE id = 1",
]


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("DROP TRIGGER IF EXISTS transcript_items_fts_ai")
    op.execute("DROP TRIGGER IF EXISTS transcript_items_fts_ad")
    op.execute(
        "CREATE TABLE transcript_fts_state (id INTEGER NOT NULL PRIMARY KEY CHECK (id = 1), "
        "indexed_through BIGINT NOT NULL)"
    )
    # every row so far was indexed by the trigger
    op.execute(
        "INSERT INTO transcript_fts_state (id, indexed_through) "
        "SELECT 1, COALESCE(MAX(id), 0) FROM transcript_items"
    )
    # Only indexed rows have index entries to delete. Deleting the highest indexed row lowers the mark:
    # its id can be handed out again, and that new row must still be indexed.
    op.execute(
        "CREATE TRIGGER transcript_items_fts_ad AFTER DELETE ON transcript_items "
        "WHEN old.id <= (SELECT indexed_through FROM transcript_fts_state WHERE id = 1) BEGIN "
        "INSERT INTO transcript_fts(transcript_fts, rowid, content) VALUES ('delete', old.id, old.content); "
        "UPDATE transcript_fts_state SET indexed_through = old.id - 1 "
        "WHERE id = 1 AND indexed_through = old.id; END"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for statement in _INDEX_PENDING:  # index what is pending, then back to the per-row triggers
        op.execute(statement)
    op.execute("DROP TRIGGER IF EXISTS transcript_items_fts_ad")
    op.execute("DROP TABLE transcript_fts_state")
    op.execute(
        "CREATE TRIGGER transcript_items_fts_ai AFTER INSERT ON transcript_items BEGIN "
        "INSERT INTO transcript_fts(rowid, content) VALUES (new.id, new.content); END"
    )
    op.execute(
        "CREATE TRIGGER transcript_items_fts_ad AFTER DELETE ON transcript_items BEGIN "
        "INSERT INTO transcript_fts(transcript_fts, rowid, content) VALUES ('delete', old.id, old.content); END"
    )
