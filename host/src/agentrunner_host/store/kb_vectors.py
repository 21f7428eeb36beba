"""Chunk vectors in the database's vector extension: `sqlite-vec` on SQLite, `pgvector` on PostgreSQL.

SQLite: one `vec0` virtual table per dimension, `kb_vec_<dim>` (chunk id primary key, `kb_id` partition
key, `embedding_model` metadata column, cosine distance), searched with sqlite-vec's KNN query; the
extension is on every connection once `sqlite_vec.register()` ran (the `Database` does it).
PostgreSQL: `kb_chunk_vectors` with a dimensionless `vector` column (one knowledge base may change
models), searched by exact cosine distance (`<=>`) within the knowledge base and model.
Vectors are stored as sent by the model; scores are cosine similarities (1 - distance). Migration 0007
creates the PostgreSQL table with these statements; the knowledge capability writes and searches here.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from agentrunner_host.store import sqlite_vec

PG_TABLE_DDL = (
    "CREATE TABLE IF NOT EXISTS kb_chunk_vectors ("
    "chunk_id VARCHAR(80) PRIMARY KEY REFERENCES kb_chunks(id) ON DELETE CASCADE, "
    "kb_id VARCHAR(128) NOT NULL, embedding_model VARCHAR(128) NOT NULL, embedding vector NOT NULL)"
)
PG_INDEX_DDL = (
    "CREATE INDEX IF NOT EXISTS ix_kb_chunk_vectors_kb ON kb_chunk_vectors (kb_id, embedding_model)"
)
_VEC_TABLE = re.compile(r"^kb_vec_(\d+)$")


def unavailable_reason(dialect: str) -> str:
    """Why this database cannot store or search vectors ("" when it can). PostgreSQL always can:
    migration 0007 does not complete without pgvector."""
    return sqlite_vec.unavailable_reason() if dialect == "sqlite" else ""


def pack(vector: Sequence[float]) -> bytes:
    """float32 little-endian: sqlite-vec's vector format (and the pre-0007 blob column's)."""
    return struct.pack(f"<{len(vector)}f", *vector)


def unpack(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


def pg_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def sqlite_table_ddl(dim: int) -> str:
    return (
        f"CREATE VIRTUAL TABLE IF NOT EXISTS kb_vec_{int(dim)} USING vec0("
        f"chunk_id TEXT PRIMARY KEY, kb_id TEXT PARTITION KEY, embedding_model TEXT, "
        f"embedding float[{int(dim)}] distance_metric=cosine)"
    )


async def sqlite_tables(conn: AsyncConnection) -> list[str]:
    rows = await conn.execute(text("SELECT name FROM sqlite_master WHERE name LIKE 'kb_vec_%'"))
    return [r[0] for r in rows if _VEC_TABLE.match(r[0])]


async def store(
    conn: AsyncConnection, kb_id: str, model: str, rows: Sequence[tuple[str, Sequence[float]]]
) -> None:
    """Writes the vectors of chunks (chunk id, vector) in the caller's transaction."""
    if not rows:
        return
    if conn.dialect.name == "sqlite":
        by_dim: dict[int, list[dict[str, object]]] = {}
        for chunk_id, vector in rows:
            by_dim.setdefault(len(vector), []).append(
                {"c": chunk_id, "k": kb_id, "m": model, "e": pack(vector)}
            )
        for dim, params in by_dim.items():
            await conn.execute(text(sqlite_table_ddl(dim)))
            # vec0 has no upsert; a vector left behind while sqlite-vec was unavailable is replaced
            await conn.execute(text(f"DELETE FROM kb_vec_{dim} WHERE chunk_id = :c"), params)
            await conn.execute(
                text(
                    f"INSERT INTO kb_vec_{dim} (chunk_id, kb_id, embedding_model, embedding) "
                    "VALUES (:c, :k, :m, :e)"
                ),
                params,
            )
        return
    await conn.execute(
        text(
            "INSERT INTO kb_chunk_vectors (chunk_id, kb_id, embedding_model, embedding) "
            "VALUES (:c, :k, :m, CAST(:e AS vector))"
        ),
        [{"c": c, "k": kb_id, "m": model, "e": pg_literal(v)} for c, v in rows],
    )


async def delete(conn: AsyncConnection, chunk_ids: Sequence[str]) -> None:
    """Removes the vectors of chunks (PostgreSQL's cascade does it too; vec0 tables need it). Without
    sqlite-vec they stay: `store` replaces them when the chunk is embedded again."""
    if not chunk_ids or conn.dialect.name != "sqlite" or sqlite_vec.unavailable_reason():
        return
    for table in await sqlite_tables(conn):
        await conn.execute(text(f"DELETE FROM {table} WHERE chunk_id = :c"), [{"c": c} for c in chunk_ids])


async def nearest(
    conn: AsyncConnection, kb_id: str, model: str, query: Sequence[float], limit: int
) -> list[tuple[str, float]]:
    """(chunk id, cosine similarity) of the `limit` nearest chunks, best first."""
    dim = len(query)
    if conn.dialect.name == "sqlite":
        if f"kb_vec_{dim}" not in await sqlite_tables(conn):
            return []
        rows = await conn.execute(
            text(
                f"SELECT chunk_id, distance FROM kb_vec_{dim} WHERE embedding MATCH :q AND k = :n "
                "AND kb_id = :kb AND embedding_model = :m ORDER BY distance"
            ),
            {"q": pack(query), "n": min(limit, 4096), "kb": kb_id, "m": model},
        )
    else:
        rows = await conn.execute(
            text(
                "SELECT chunk_id, embedding <=> CAST(:q AS vector) AS distance FROM kb_chunk_vectors "
                "WHERE kb_id = :kb AND embedding_model = :m AND vector_dims(embedding) = :d "
                "ORDER BY distance, chunk_id LIMIT :n"
            ),
            {"q": pg_literal(query), "kb": kb_id, "m": model, "d": dim, "n": limit},
        )
    return [(r[0], 1.0 - float(r[1])) for r in rows]


async def create_schema(conn: AsyncConnection) -> None:
    """The PostgreSQL vector table (SQLite's are created per dimension on first write)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        await conn.execute(text(PG_TABLE_DDL))
        await conn.execute(text(PG_INDEX_DDL))
