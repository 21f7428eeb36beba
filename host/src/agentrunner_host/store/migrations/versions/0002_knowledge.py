"""knowledge bases: documents, chunks (with optional vectors) and their full-text index

Revision ID: 0002_knowledge
Revises: 0001_initial
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_knowledge"
down_revision: str | Sequence[str] | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Kept identical to agentrunner_host.store.schema.knowledge (SQLITE_FTS_DDL, PG_GIN_DDL).
SQLITE_FTS_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS kb_chunks_fts USING fts5("
    "chunk_id UNINDEXED, kb_id UNINDEXED, title, content, tokenize='porter unicode61')"
)
PG_TSV_EXPR = (
    "setweight(to_tsvector('english', coalesce(title, '')), 'A') || "
    "setweight(to_tsvector('english', content), 'B')"
)


def upgrade() -> None:
    op.create_table(
        "kb_documents",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("kb_id", sa.String(length=128), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("title", sa.String(length=512), nullable=False),
        sa.Column("mime_type", sa.String(length=64), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kb_documents")),
        sa.UniqueConstraint("kb_id", "path", name=op.f("uq_kb_documents_kb_id_path")),
    )
    op.create_index(op.f("ix_kb_documents_kb_id"), "kb_documents", ["kb_id"])
    op.create_table(
        "kb_chunks",
        sa.Column("id", sa.String(length=80), nullable=False),
        sa.Column("kb_id", sa.String(length=128), nullable=False),
        sa.Column("document_id", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(length=512), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("embedding", sa.LargeBinary(), nullable=True),
        sa.Column("embedding_model", sa.String(length=128), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kb_chunks")),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["kb_documents.id"],
            name=op.f("fk_kb_chunks_document_id_kb_documents"),
            ondelete="CASCADE",
        ),
    )
    op.create_index(op.f("ix_kb_chunks_kb_id"), "kb_chunks", ["kb_id"])
    op.create_index(op.f("ix_kb_chunks_document_id"), "kb_chunks", ["document_id"])
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute(SQLITE_FTS_DDL)
    elif dialect == "postgresql":
        op.execute(f"CREATE INDEX ix_kb_chunks_tsv ON kb_chunks USING gin (({PG_TSV_EXPR}))")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TABLE IF EXISTS kb_chunks_fts")
    elif dialect == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_kb_chunks_tsv")
    op.drop_index(op.f("ix_kb_chunks_document_id"), table_name="kb_chunks")
    op.drop_index(op.f("ix_kb_chunks_kb_id"), table_name="kb_chunks")
    op.drop_table("kb_chunks")
    op.drop_index(op.f("ix_kb_documents_kb_id"), table_name="kb_documents")
    op.drop_table("kb_documents")
