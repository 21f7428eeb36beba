"""Chunk vectors in the database's vector extension: `sqlite-vec` on SQLite, `pgvector` on PostgreSQL.

SQLite: one `vec0` virtual table per dimension, `kb_vec_<dim>` (chunk id primary key, `kb_id` partition
key, `embedding_model` metadata column, cosine distance), searched with sqlite-vec's KNN query. The
extension is registered once per process with SQLite's `sqlite3_auto_extension`, so every connection
opened afterwards has it (Python builds without `enable_load_extension` included); `register()` must
run before the database's first connection: importing the knowledge module does it.
PostgreSQL: `kb_chunk_vectors` with a dimensionless `vector` column (one knowledge base may change
models), searched by exact cosine distance (`<=>`) within the knowledge base and model.
Vectors are stored as sent by the model; scores are cosine similarities (1 - distance).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import sqlite3
import struct
import threading
from collections.abc import Sequence

import sqlite_vec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

PG_TABLE_DDL = (
    "CREATE TABLE IF NOT EXISTS kb_chunk_vectors ("
    "chunk_id VARCHAR(80) PRIMARY KEY REFERENCES kb_chunks(id) ON DELETE CASCADE, "
    "kb_id VARCHAR(128) NOT NULL, embedding_model VARCHAR(128) NOT NULL, embedding vector NOT NULL)"
)
PG_INDEX_DDL = (
    "CREATE INDEX IF NOT EXISTS ix_kb_chunk_vectors_kb ON kb_chunk_vectors (kb_id, embedding_model)"
)
_VEC_TABLE = re.compile(r"^kb_vec_(\d+)$")
_lock = threading.Lock()
_registered = False


class VectorExtensionMissing(RuntimeError):
    """The database cannot store vectors (sqlite-vec not loadable, pgvector not installed)."""


def _sqlite_library() -> ctypes.CDLL:
    """The SQLite library the `sqlite3` module is linked with (dlopen returns the loaded copy)."""
    import _sqlite3

    for name in ("libsqlite3.so.0", ctypes.util.find_library("sqlite3"), _sqlite3.__file__):
        if name:
            try:
                lib = ctypes.CDLL(name)
                lib.sqlite3_auto_extension  # noqa: B018  (raises AttributeError when absent)
                return lib
            except (OSError, AttributeError):
                continue
    raise VectorExtensionMissing("cannot find the SQLite library of this Python's sqlite3 module")


def register() -> None:
    """Makes sqlite-vec available on every SQLite connection this process opens from now on."""
    global _registered
    with _lock:
        if _registered:
            return
        lib = _sqlite_library()
        ext = ctypes.CDLL(sqlite_vec.loadable_path() + ".so")
        lib.sqlite3_auto_extension.argtypes = [ctypes.c_void_p]
        if lib.sqlite3_auto_extension(ctypes.cast(ext.sqlite3_vec_init, ctypes.c_void_p)) != 0:
            raise VectorExtensionMissing("SQLite refused to register sqlite-vec")
        probe = sqlite3.connect(":memory:")
        try:
            probe.execute("SELECT vec_version()")
        except sqlite3.OperationalError as exc:  # a Python with its own statically linked SQLite
            raise VectorExtensionMissing(
                f"sqlite-vec is not available to this Python's sqlite3 module ({exc})"
            ) from None
        finally:
            probe.close()
        _registered = True


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
    """Removes the vectors of chunks (PostgreSQL's cascade does it too; vec0 tables need it)."""
    if not chunk_ids or conn.dialect.name != "sqlite":
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
