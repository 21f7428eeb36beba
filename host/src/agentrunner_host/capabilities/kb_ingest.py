"""Ingestion of the built-in knowledge bases: sync the rows with a directory of files.

New and changed files are parsed, chunked (`kb_documents`) and embedded one document at a time, so a
document the embedding model cannot take (after the registry's retries) is reported and the others are
indexed. Their rows are written in batches of documents, one transaction per batch and one statement
per table for the whole batch (documents, chunks, vectors, full-text rows), because the per-statement
cost of the async driver, not SQLite or PostgreSQL, dominated a write per document.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import hashlib
import inspect
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import bindparam, delete, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentrunner.errors import AgentRunnerError, InvalidArgumentError
from agentrunner_host.capabilities.kb_documents import SUPPORTED_SUFFIXES, chunk_text, parse_document
from agentrunner_host.store import kb_vectors
from agentrunner_host.store.schema import KbChunk, KbDocument, table_of

log = structlog.get_logger(__name__)

Embedder = Callable[[Sequence[str]], Awaitable[list[list[float]]]]
Progress = Callable[[int, int, str], Any]

#: a batch is written once it holds this many files (stored or not: progress is reported per batch)
BATCH_FILES = 32
#: ... or this many chunks
BATCH_CHUNKS = 512
#: document ids per DELETE statement (well under SQLite's bound-parameter limit)
DELETE_IDS = 500
_EMBED_BATCH = 64


@dataclasses.dataclass(slots=True)
class IngestReport:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks: int = 0
    skipped: list[str] = dataclasses.field(default_factory=list)
    #: relative path -> why it was not (re)indexed this time (it is tried again on the next ingest)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    #: why documents were indexed without vectors although the knowledge base names a model
    degraded_reason: str = ""


@dataclasses.dataclass(slots=True)
class _Batch:
    """Files handled since the last write: the rows of those to (re)index, and every file's name for
    the progress callback, which is told about a file once its rows are committed."""

    replaced: list[str] = dataclasses.field(default_factory=list)  # ids of documents to remove first
    documents: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    chunks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    vectors: list[tuple[str, Sequence[float]]] = dataclasses.field(default_factory=list)
    files: list[str] = dataclasses.field(default_factory=list)

    def full(self) -> bool:
        return len(self.files) >= BATCH_FILES or len(self.chunks) >= BATCH_CHUNKS


async def ingest_directory(
    db: AsyncEngine,
    kb_id: str,
    path: str | Path,
    progress: Progress | None = None,
    *,
    embed: Embedder | None = None,
    embedding_model: str = "",
    chunk_chars: int = 800,
) -> IngestReport:
    """Syncs a knowledge base with the .txt/.md/.html files under `path`: new and changed files are
    (re)chunked and indexed, unchanged ones skipped, vanished ones removed. `progress(done, total,
    relative_path)` is called for each file once its batch is written (it may be async)."""
    root = Path(path)
    files = await asyncio.to_thread(_list_files, root)
    known, missing_vectors = await _indexed(db, kb_id, embedding_model if embed else None)
    report = IngestReport()
    batch = _Batch()
    done = 0
    for file in files:
        rel = file.relative_to(root).as_posix()
        batch.files.append(rel)
        data = await asyncio.to_thread(file.read_bytes)
        digest = hashlib.sha256(data).hexdigest()
        if known.get(rel) == digest and rel not in missing_vectors:
            report.unchanged += 1
        elif await _add_file(
            batch, report, kb_id, file, rel, data, digest, embed, embedding_model, chunk_chars
        ):
            if rel in known:
                report.updated += 1
                batch.replaced.append(document_id(kb_id, rel))
            else:
                report.added += 1
        if batch.full():
            done = await _flush(db, kb_id, embedding_model, batch, progress, done, len(files))
            batch = _Batch()
    done = await _flush(db, kb_id, embedding_model, batch, progress, done, len(files))
    seen = {f.relative_to(root).as_posix() for f in files}
    gone = [document_id(kb_id, p) for p in known if p not in seen]
    if gone:
        async with db.begin() as conn:
            await delete_documents(conn, gone)
        report.removed = len(gone)
    log.info(
        "kb_ingested",
        kb_id=kb_id,
        **{k: v for k, v in dataclasses.asdict(report).items() if k not in ("skipped", "failed")},
        failed=len(report.failed),
    )
    return report


async def _indexed(
    db: AsyncEngine, kb_id: str, embedding_model: str | None
) -> tuple[dict[str, str], set[str]]:
    """(path -> sha256 of every indexed document, paths whose chunks lack a vector of the model)."""
    async with db.connect() as conn:
        rows = (
            await conn.execute(select(KbDocument.path, KbDocument.sha256).where(KbDocument.kb_id == kb_id))
        ).all()
        missing: set[str] = set()
        if embedding_model is not None:
            missing = set(
                (
                    await conn.execute(
                        select(KbDocument.path)
                        .join(KbChunk, KbChunk.document_id == KbDocument.id)
                        .where(KbDocument.kb_id == kb_id)
                        .where(
                            KbChunk.embedding_model.is_(None) | (KbChunk.embedding_model != embedding_model)
                        )
                    )
                ).scalars()
            )
    return {r.path: r.sha256 for r in rows}, missing


async def _add_file(
    batch: _Batch,
    report: IngestReport,
    kb_id: str,
    file: Path,
    rel: str,
    data: bytes,
    digest: str,
    embed: Embedder | None,
    embedding_model: str,
    chunk_chars: int,
) -> bool:
    """Parses, chunks and embeds one file into the batch; False (and the reason in the report) when
    the embedding model failed it after its retries: the file waits for the next ingest."""
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError:
        raw = data.decode("latin-1")
    title, body, meta = parse_document(file, raw)
    chunks = chunk_text(body, chunk_chars)
    vectors: list[list[float]] | None = None
    if embed is not None:
        try:
            vectors = await _embed_all(embed, [f"{title}\n{c}" for c in chunks])
        except AgentRunnerError as exc:
            log.warning("kb_embed_failed", kb_id=kb_id, path=rel, reason=exc.reason, error=exc.message)
            report.failed[rel] = f"{exc.reason}: {exc.message}"
            return False
    doc_id = document_id(kb_id, rel)
    now = dt.datetime.now(dt.UTC)
    batch.documents.append(
        {
            "id": doc_id,
            "kb_id": kb_id,
            "path": rel,
            "title": title[:512],
            "mime_type": SUPPORTED_SUFFIXES[file.suffix.lower()],
            "sha256": digest,
            "metadata": {**meta, "title": title, "path": rel, "source": file.suffix.lower().lstrip(".")},
            "created_at": now,
            "updated_at": now,
        }
    )
    for seq, content in enumerate(chunks):
        chunk_id = f"{doc_id}:{seq}"
        batch.chunks.append(
            {
                "id": chunk_id,
                "kb_id": kb_id,
                "document_id": doc_id,
                "seq": seq,
                "title": title[:512],
                "content": content,
                "metadata": {"seq": seq},
                "embedding_model": embedding_model if vectors else None,
            }
        )
        if vectors:
            batch.vectors.append((chunk_id, vectors[seq]))
    report.chunks += len(chunks)
    return True


async def _flush(
    db: AsyncEngine,
    kb_id: str,
    embedding_model: str,
    batch: _Batch,
    progress: Progress | None,
    done: int,
    total: int,
) -> int:
    """Writes the batch in one transaction, then reports its files; returns the files done so far."""
    if batch.documents or batch.replaced:
        async with db.begin() as conn:
            if batch.replaced:
                await delete_documents(conn, batch.replaced)
            await conn.execute(table_of(KbDocument).insert(), batch.documents)
            if batch.chunks:
                await conn.execute(table_of(KbChunk).insert(), batch.chunks)
                await kb_vectors.store(conn, kb_id, embedding_model, batch.vectors)
                if conn.dialect.name == "sqlite":
                    await conn.execute(
                        text(
                            "INSERT INTO kb_chunks_fts (chunk_id, kb_id, title, content) "
                            "VALUES (:id, :kb_id, :title, :content)"
                        ),
                        [{k: r[k] for k in ("id", "kb_id", "title", "content")} for r in batch.chunks],
                    )
    for rel in batch.files:
        done += 1
        if progress is not None:
            result = progress(done, total, rel)
            if inspect.isawaitable(result):
                await result
    return done


def _list_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise InvalidArgumentError(f"{root} is not a directory", field="path")
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES)


async def _embed_all(embed: Embedder, texts: list[str]) -> list[list[float]]:
    out: list[list[float]] = []
    for i in range(0, len(texts), _EMBED_BATCH):
        out.extend(await embed(texts[i : i + _EMBED_BATCH]))
    return out


def document_id(kb_id: str, rel: str) -> str:
    return hashlib.sha256(f"{kb_id}\0{rel}".encode()).hexdigest()[:32]


async def delete_documents(conn: AsyncConnection, doc_ids: Sequence[str]) -> None:
    """Removes documents with their chunks, vectors and full-text rows, a few statements per
    `DELETE_IDS` documents."""
    for i in range(0, len(doc_ids), DELETE_IDS):
        ids = list(doc_ids[i : i + DELETE_IDS])
        chunk_ids = (
            (await conn.execute(select(KbChunk.id).where(KbChunk.document_id.in_(ids)))).scalars().all()
        )
        await kb_vectors.delete(conn, list(chunk_ids))
        if conn.dialect.name == "sqlite" and chunk_ids:
            await conn.execute(
                text(
                    "DELETE FROM kb_chunks_fts WHERE chunk_id IN "
                    "(SELECT id FROM kb_chunks WHERE document_id IN :ids)"
                ).bindparams(bindparam("ids", expanding=True)),
                {"ids": ids},
            )
        await conn.execute(delete(KbChunk).where(KbChunk.document_id.in_(ids)))
        await conn.execute(delete(KbDocument).where(KbDocument.id.in_(ids)))
