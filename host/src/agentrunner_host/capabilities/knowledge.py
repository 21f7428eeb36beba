"""Built-in knowledge bases: ingest files, index them, retrieve chunks (PROTOCOL_V1 §8 "Knowledge").

Full-text search runs in the database (SQLite FTS5, PostgreSQL tsvector + GIN); when the knowledge base
names an embedding model, chunks also carry vectors in the database's vector extension (`kb_vectors`:
sqlite-vec, pgvector) and retrieval fuses both rankings (reciprocal rank fusion). When the embedding
model fails, or the database has no vector extension (a Python whose SQLite cannot take sqlite-vec),
retrieval answers with the full-text ranking alone and says so (`degraded_reason`); ingestion embeds
with the model registry's retries and reports a document it could not embed without giving up the
others. Files are read and chunked by `kb_documents` and written by `kb_ingest`. Any other retriever (an external RAG service, a
plugin) plugs in behind `Retriever`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import structlog
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentrunner.errors import AgentRunnerError, InvalidArgumentError, NotFoundError
from agentrunner_host.capabilities.kb_ingest import Embedder, IngestReport, Progress, ingest_directory
from agentrunner_host.store import kb_vectors
from agentrunner_host.store.schema.knowledge import (
    PG_TSV_EXPR,
    KbChunk,
    KbDocument,
    create_knowledge_schema,
)

__all__ = [
    "BuiltinRetriever",
    "Embedder",
    "ExternalKnowledgeBase",
    "IngestReport",
    "KnowledgeBaseConfig",
    "KnowledgeService",
    "Progress",
    "RetrievedChunk",
    "Retriever",
    "create_knowledge_schema",
    "fuse",
    "ingest_directory",
]

log = structlog.get_logger(__name__)

MAX_TOP_K = 50


# --------------------------------------------------------------------------- config and values


class KnowledgeBaseConfig(BaseModel):
    """One knowledge base of the host config."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str = ""
    kind: str = "builtin"
    description: str = ""
    #: embedding model id from the model registry; without one retrieval is full-text only
    embedding_model: str | None = None
    #: directory the CLI ingests when no path is given
    source_dir: str | None = None
    chunk_chars: int = Field(default=800, ge=100)


@dataclasses.dataclass(frozen=True, slots=True)
class KnowledgeBaseInfo:
    kb_id: str
    name: str
    kind: str
    description: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class RetrievedChunk:
    document_id: str
    chunk_id: str
    content: str
    score: float
    metadata: dict[str, Any]


class Retriever(Protocol):
    """Anything that answers a query with scored chunks, best first."""

    async def retrieve(self, query: str, top_k: int, filters: Mapping[str, Any]) -> list[RetrievedChunk]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Retrieval:
    """Chunks best first, and why the ranking is not the usual one (empty when it is)."""

    chunks: list[RetrievedChunk]
    degraded_reason: str = ""


# --------------------------------------------------------------------------- retrieval

_STOP = frozenset(
    "a an and are as at be by can do does for from how i if in into is it its me my of on or our "
    "should so than that the their then there these this to was we what when where which who why "
    "will with you your".split()
)


def query_terms(query: str) -> list[str]:
    terms = [t for t in re.findall(r"\w+", query.lower()) if t not in _STOP]
    return list(dict.fromkeys(terms))[:32]


def _matches(meta: Mapping[str, Any], filters: Mapping[str, Any]) -> bool:
    return all(meta.get(k) == v or str(meta.get(k)) == str(v) for k, v in filters.items())


class BuiltinRetriever:
    """Hybrid retrieval over one built-in knowledge base."""

    RRF_K = 60

    def __init__(
        self, db: AsyncEngine, kb_id: str, embed: Embedder | None = None, embedding_model: str = ""
    ) -> None:
        self.db = db
        self.kb_id = kb_id
        self.embed = embed
        self.embedding_model = embedding_model

    async def retrieve(self, query: str, top_k: int, filters: Mapping[str, Any]) -> list[RetrievedChunk]:
        return (await self.search(query, top_k, filters)).chunks

    async def search(self, query: str, top_k: int, filters: Mapping[str, Any]) -> Retrieval:
        """Fused full-text and vector ranking; the full-text one alone (flagged) when the embedding
        model fails, so a RAG turn still gets the chunks that match its words."""
        pool = 400 if filters else max(top_k * 5, 50)
        qvec: list[float] | None = None
        degraded = ""
        unusable = kb_vectors.unavailable_reason(self.db.dialect.name) if self.embed is not None else ""
        if unusable:
            degraded = f"vector search is unavailable ({unusable}): full-text results only"
        elif self.embed is not None:
            try:
                (qvec,) = await self.embed([query])
            except AgentRunnerError as exc:
                degraded = (
                    f"embedding model {self.embedding_model} failed ({exc.reason}): full-text results only"
                )
                log.warning("kb_embed_failed", kb_id=self.kb_id, reason=exc.reason, error=exc.message)
        async with self.db.connect() as conn:
            lexical = await self._full_text(conn, query, pool)
            semantic: list[tuple[str, float]] = []
            if qvec is not None:
                semantic = [
                    s
                    for s in await kb_vectors.nearest(conn, self.kb_id, self.embedding_model, qvec, pool)
                    if s[1] > 0
                ]
            ranked = fuse(lexical, semantic, self.RRF_K)
            if not ranked:
                return Retrieval([], degraded)
            ids = [cid for cid, _ in ranked]
            rows = (
                await conn.execute(
                    select(KbChunk.id, KbChunk.document_id, KbChunk.content, KbChunk.meta, KbDocument.meta)
                    .join(KbDocument, KbDocument.id == KbChunk.document_id)
                    .where(KbChunk.id.in_(ids))
                )
            ).all()
        by_id = {r[0]: r for r in rows}
        out: list[RetrievedChunk] = []
        for chunk_id, score in ranked:
            row = by_id.get(chunk_id)
            if row is None:
                continue
            meta = {**(row[4] or {}), **(row[3] or {})}
            if filters and not _matches(meta, filters):
                continue
            out.append(RetrievedChunk(row[1], chunk_id, row[2], score, meta))
            if len(out) >= top_k:
                break
        return Retrieval(out, degraded)

    async def _full_text(self, conn: AsyncConnection, query: str, limit: int) -> list[tuple[str, float]]:
        terms = query_terms(query)
        if not terms:
            return []
        if conn.dialect.name == "sqlite":
            match = " OR ".join('"' + t.replace('"', "") + '"' for t in terms)
            rows = await conn.execute(
                text(
                    "SELECT chunk_id, bm25(kb_chunks_fts, 0.0, 0.0, 2.0, 1.0) AS rank FROM kb_chunks_fts "
                    "WHERE kb_chunks_fts MATCH :q AND kb_id = :kb ORDER BY rank LIMIT :n"
                ),
                {"q": match, "kb": self.kb_id, "n": limit},
            )
            return [(r[0], -float(r[1])) for r in rows]
        if conn.dialect.name == "postgresql":
            tsquery = " | ".join(re.sub(r"\W", "", t) for t in terms if re.sub(r"\W", "", t))
            if not tsquery:
                return []
            rows = await conn.execute(
                text(
                    f"SELECT id, ts_rank({PG_TSV_EXPR}, to_tsquery('english', :q)) AS score FROM kb_chunks "
                    f"WHERE kb_id = :kb AND ({PG_TSV_EXPR}) @@ to_tsquery('english', :q) "
                    "ORDER BY score DESC, id LIMIT :n"
                ),
                {"q": tsquery, "kb": self.kb_id, "n": limit},
            )
            return [(r[0], float(r[1])) for r in rows]
        raise NotImplementedError(f"full-text search on {conn.dialect.name}")


def fuse(
    lexical: list[tuple[str, float]], semantic: list[tuple[str, float]], k: int = 60
) -> list[tuple[str, float]]:
    """Reciprocal rank fusion (Cormack et al., 2009): score(d) = sum over rankings of 1 / (k + rank),
    rank from 1; a ranking alone is returned as it is. Ties keep the order of first appearance."""
    if not semantic:
        return lexical
    if not lexical:
        return semantic
    scores: dict[str, float] = {}
    for ranking in (lexical, semantic):
        for rank, (cid, _) in enumerate(ranking, start=1):
            scores[cid] = scores.get(cid, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])


# --------------------------------------------------------------------------- service


@dataclasses.dataclass(frozen=True, slots=True)
class ExternalKnowledgeBase:
    """A knowledge base served by something other than the host's database."""

    kb_id: str
    name: str
    kind: str
    retriever: Retriever
    description: str = ""


class KnowledgeService:
    """Every knowledge base of the host, built-in or external, behind one retrieve call."""

    def __init__(
        self,
        db: AsyncEngine,
        configs: Sequence[KnowledgeBaseConfig] = (),
        *,
        embedder_for: Callable[[str], Embedder] | None = None,
        external: Sequence[ExternalKnowledgeBase] = (),
        max_top_k: int = MAX_TOP_K,
    ) -> None:
        self.db = db
        self.max_top_k = max_top_k
        self._configs = {c.id: c for c in configs}
        self._infos: dict[str, KnowledgeBaseInfo] = {}
        self._retrievers: dict[str, Retriever] = {}
        self._embedder_for = embedder_for
        for c in configs:
            embed = embedder_for(c.embedding_model) if (c.embedding_model and embedder_for) else None
            if c.embedding_model and embed is None:
                raise ValueError(
                    f"knowledge base {c.id}: embedding model {c.embedding_model} is not available"
                )
            self._infos[c.id] = KnowledgeBaseInfo(c.id, c.name or c.id, c.kind, c.description)
            self._retrievers[c.id] = BuiltinRetriever(db, c.id, embed, c.embedding_model or "")
        for ext in external:
            if ext.kb_id in self._infos:
                raise ValueError(f"duplicate knowledge base id {ext.kb_id}")
            self._infos[ext.kb_id] = KnowledgeBaseInfo(ext.kb_id, ext.name, ext.kind, ext.description)
            self._retrievers[ext.kb_id] = ext.retriever

    def list_bases(self) -> list[KnowledgeBaseInfo]:
        return list(self._infos.values())

    def get(self, kb_id: str) -> KnowledgeBaseInfo:
        info = self._infos.get(kb_id)
        if info is None:
            raise NotFoundError(f"knowledge base {kb_id!r} does not exist", metadata={"kbId": kb_id})
        return info

    async def retrieve(
        self, kb_id: str, query: str, top_k: int = 5, filters: Mapping[str, Any] | None = None
    ) -> list[RetrievedChunk]:
        return (await self.search(kb_id, query, top_k, filters)).chunks

    async def search(
        self, kb_id: str, query: str, top_k: int = 5, filters: Mapping[str, Any] | None = None
    ) -> Retrieval:
        """Chunks best first, with the reason when the ranking is degraded (built-in bases)."""
        self.get(kb_id)
        if not query.strip():
            raise InvalidArgumentError("query_text must not be empty", field="query_text")
        top_k = min(top_k if top_k > 0 else 5, self.max_top_k)
        retriever = self._retrievers[kb_id]
        if isinstance(retriever, BuiltinRetriever):
            return await retriever.search(query, top_k, dict(filters or {}))
        return Retrieval(await retriever.retrieve(query, top_k, dict(filters or {})))

    async def ingest(
        self, kb_id: str, path: str | Path | None = None, progress: Progress | None = None
    ) -> IngestReport:
        """Ingests a built-in knowledge base from `path` (default: its configured `source_dir`)."""
        config = self._configs.get(kb_id)
        if config is None:
            raise NotFoundError(f"built-in knowledge base {kb_id!r} does not exist")
        source = path or config.source_dir
        if not source:
            raise InvalidArgumentError(f"knowledge base {kb_id} has no source_dir; give a path", field="path")
        embed = None
        if config.embedding_model and self._embedder_for:
            embed = self._embedder_for(config.embedding_model)
        unusable = kb_vectors.unavailable_reason(self.db.dialect.name) if embed is not None else ""
        if unusable:  # index the text; the next ingest with vectors available embeds every document
            log.warning("kb_ingest_without_vectors", kb_id=kb_id, reason=unusable)
            embed = None
        report = await ingest_directory(
            self.db, kb_id, source, progress, embed=embed,
            embedding_model=config.embedding_model or "", chunk_chars=config.chunk_chars,
        )  # fmt: skip
        if unusable:
            report.degraded_reason = (
                f"vectors are unavailable ({unusable}): indexed for full-text search only"
            )
        return report
