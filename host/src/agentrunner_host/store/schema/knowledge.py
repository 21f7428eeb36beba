"""The built-in knowledge bases' tables: documents, chunks and the full-text index (migration 0002;
the vectors are `store/kb_vectors.py`'s, migration 0007). Ingest and retrieval are
`capabilities/kb_ingest.py` and `capabilities/knowledge.py`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import Mapped, mapped_column

from agentrunner_host.store import kb_vectors
from agentrunner_host.store.schema.base import Base, table_of


class KbDocument(Base):
    """One ingested file."""

    __tablename__ = "kb_documents"
    __table_args__ = (UniqueConstraint("kb_id", "path", name="uq_kb_documents_kb_id_path"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kb_id: Mapped[str] = mapped_column(String(128), index=True)
    path: Mapped[str] = mapped_column(String(1024))
    title: Mapped[str] = mapped_column(String(512), default="")
    mime_type: Mapped[str] = mapped_column(String(64))
    sha256: Mapped[str] = mapped_column(String(64))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class KbChunk(Base):
    """One retrievable piece of a document, with its vector when the knowledge base has a model."""

    __tablename__ = "kb_chunks"

    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    kb_id: Mapped[str] = mapped_column(String(128), index=True)
    document_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("kb_documents.id", ondelete="CASCADE"), index=True
    )
    seq: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(String(512), default="")
    content: Mapped[str] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    #: the model of the chunk's vector (stored in `kb_vectors`), None when it has none
    embedding_model: Mapped[str | None] = mapped_column(String(128), nullable=True)


KNOWLEDGE_TABLES = [table_of(KbDocument), table_of(KbChunk)]

# Kept identical to migration 0002_knowledge.
SQLITE_FTS_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS kb_chunks_fts USING fts5("
    "chunk_id UNINDEXED, kb_id UNINDEXED, title, content, tokenize='porter unicode61')"
)
PG_TSV_EXPR = (
    "setweight(to_tsvector('english', coalesce(title, '')), 'A') || "
    "setweight(to_tsvector('english', content), 'B')"
)
PG_GIN_DDL = f"CREATE INDEX IF NOT EXISTS ix_kb_chunks_tsv ON kb_chunks USING gin (({PG_TSV_EXPR}))"


async def create_knowledge_schema(conn: AsyncConnection) -> None:
    """Creates the knowledge tables and the full-text index (what migration 0002 does), for tests
    and for hosts that run without Alembic."""
    await conn.run_sync(lambda sync: Base.metadata.create_all(sync, tables=KNOWLEDGE_TABLES))
    if conn.dialect.name == "sqlite":
        await conn.execute(text(SQLITE_FTS_DDL))
    elif conn.dialect.name == "postgresql":
        await conn.execute(text(PG_GIN_DDL))
    await kb_vectors.create_schema(conn)
