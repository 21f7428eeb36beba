"""knowledge vectors in the database's vector extension: sqlite-vec tables on SQLite, pgvector on
PostgreSQL; existing vectors move out of kb_chunks.embedding

Revision ID: 0007_kb_vectors
Revises: 0006_agent_state_leases
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentrunner_host.store import kb_vectors

revision: str = "0007_kb_vectors"
down_revision: str | Sequence[str] | None = "0006_agent_state_leases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 500


def upgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    if dialect == "postgresql":
        op.execute("CREATE EXTENSION IF NOT EXISTS vector")
        op.execute(kb_vectors.PG_TABLE_DDL)
        op.execute(kb_vectors.PG_INDEX_DDL)
    rows = bind.execute(
        sa.text(
            "SELECT id, kb_id, embedding_model, embedding FROM kb_chunks "
            "WHERE embedding IS NOT NULL AND embedding_model IS NOT NULL ORDER BY id"
        )
    ).fetchall()
    unusable = kb_vectors.unavailable_reason(dialect)
    if rows and unusable:  # dropping the blob column would lose them: stop before any change
        raise RuntimeError(
            f"cannot move {len(rows)} stored knowledge vectors: sqlite-vec is unavailable ({unusable}); "
            "nothing was changed"
        )
    moved: dict[int, list[dict[str, object]]] = {}
    for chunk_id, kb_id, model, blob in rows:
        vector = kb_vectors.unpack(bytes(blob))
        value = kb_vectors.pack(vector) if dialect == "sqlite" else kb_vectors.pg_literal(vector)
        moved.setdefault(len(vector), []).append({"c": chunk_id, "k": kb_id, "m": model, "e": value})
    for dim, params in moved.items():
        if dialect == "sqlite":
            op.execute(kb_vectors.sqlite_table_ddl(dim))
            insert = f"INSERT INTO kb_vec_{dim} (chunk_id, kb_id, embedding_model, embedding) VALUES (:c, :k, :m, :e)"
        else:
            insert = (
                "INSERT INTO kb_chunk_vectors (chunk_id, kb_id, embedding_model, embedding) "
                "VALUES (:c, :k, :m, CAST(:e AS vector))"
            )
        for i in range(0, len(params), BATCH):
            bind.execute(sa.text(insert), params[i : i + BATCH])
    # a chunk whose vector did not survive (no model recorded) is re-embedded by the next ingest
    bind.execute(sa.text("UPDATE kb_chunks SET embedding_model = NULL WHERE embedding IS NULL"))
    with op.batch_alter_table("kb_chunks") as batch:
        batch.drop_column("embedding")


def downgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    with op.batch_alter_table("kb_chunks") as batch:
        batch.add_column(sa.Column("embedding", sa.LargeBinary(), nullable=True))
    if dialect == "sqlite":
        tables = [
            r[0]
            for r in bind.execute(sa.text("SELECT name FROM sqlite_master WHERE name LIKE 'kb_vec_%'"))
            if r[0].removeprefix("kb_vec_").isdigit()
        ]
        for table in tables:
            rows = bind.execute(sa.text(f"SELECT chunk_id, embedding FROM {table}")).fetchall()
            _write_back(bind, [(c, bytes(e)) for c, e in rows])
            op.execute(f"DROP TABLE {table}")
    else:
        rows = bind.execute(sa.text("SELECT chunk_id, embedding::text FROM kb_chunk_vectors")).fetchall()
        _write_back(
            bind, [(c, kb_vectors.pack([float(x) for x in e.strip("[]").split(",")])) for c, e in rows]
        )
        op.execute("DROP TABLE kb_chunk_vectors")


def _write_back(bind: sa.engine.Connection, rows: list[tuple[str, bytes]]) -> None:
    for i in range(0, len(rows), BATCH):
        bind.execute(
            sa.text("UPDATE kb_chunks SET embedding = :e WHERE id = :c"),
            [{"c": c, "e": e} for c, e in rows[i : i + BATCH]],
        )
