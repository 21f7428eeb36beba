"""RAG: retrieve from the selected, authorized knowledge bases, optionally rerank, and format the context
that is inserted as a text element in front of the user's input (images and files stay untouched).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format

from agentrunner import RunContext
from agentrunner.errors import AgentRunnerError
from agentrunner.v1 import context_pb2, proxy_service_pb2
from agentrunner_runners.local_agent.config import LocalAgentConfig
from agentrunner_runners.local_agent.models import granted

CONTEXT_HEADER = (
    "Answer using the following knowledge base context when it is relevant. "
    "If it does not contain the answer, say so rather than guessing."
)


@dataclass
class Retrieval:
    chunks: list[proxy_service_pb2.KnowledgeChunk] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def context_text(self) -> str:
        if not self.chunks:
            return ""
        parts = [CONTEXT_HEADER, "<context>"]
        for i, chunk in enumerate(self.chunks, start=1):
            meta = json_format.MessageToDict(chunk.metadata) if chunk.HasField("metadata") else {}
            title = meta.get("title") or meta.get("path") or chunk.document_id
            head = f"[{i}]" + (f" {title}" if title else "")
            parts.append(f"{head}\n{chunk.content.strip()}")
        parts.append("</context>")
        return "\n\n".join(parts)


def knowledge_bases(ctx: RunContext, cfg: LocalAgentConfig) -> tuple[list[str], list[str]]:
    """(KB ids to query, configured ids the run may not retrieve from). Empty config: all authorized."""
    authorized = {
        kb.kb_id: kb
        for kb in ctx.resources.knowledge_bases
        if not kb.operations or "retrieve" in kb.operations
    }
    if not cfg.knowledge_bases:
        return list(authorized), []
    use = [k for k in cfg.knowledge_bases if k in authorized]
    denied = [k for k in cfg.knowledge_bases if k not in authorized]
    return use, denied


def _rerank_model(ctx: RunContext, model_id: str) -> context_pb2.ModelResource | None:
    for m in ctx.resources.models:
        if m.model_id == model_id and granted(m, "rerank"):
            return m
    return None


async def retrieve(
    ctx: RunContext, cfg: LocalAgentConfig, query: str, budget: Callable[[], float]
) -> Retrieval:
    """Chunks for `query`, best first; a failing knowledge base or reranker is reported, not fatal."""
    out = Retrieval()
    kb_ids, denied = knowledge_bases(ctx, cfg)
    if denied:
        out.info["kb_denied"] = denied
    if not kb_ids or not query.strip():
        return out
    out.info["kbs"] = kb_ids

    degraded: dict[str, str] = {}

    async def one(kb_id: str) -> list[proxy_service_pb2.KnowledgeChunk]:
        resp = await ctx.api.retrieve_knowledge(kb_id, query, top_k=cfg.retrieval_top_k, timeout=budget())
        if resp.degraded_reason:
            degraded[kb_id] = resp.degraded_reason
        return list(resp.results)

    answers = await asyncio.gather(*(one(k) for k in kb_ids), return_exceptions=True)
    chunks: list[proxy_service_pb2.KnowledgeChunk] = []
    errors: dict[str, str] = {}
    for kb_id, answer in zip(kb_ids, answers, strict=True):
        if isinstance(answer, AgentRunnerError):
            errors[kb_id] = answer.reason
        elif isinstance(answer, BaseException):
            raise answer
        else:
            chunks.extend(answer)
    if errors:
        out.info["kb_errors"] = errors
    if degraded:  # e.g. full-text results only: the embedding model was down
        out.info["kb_degraded"] = degraded
    chunks.sort(key=lambda c: c.score, reverse=True)
    out.info["retrieved"] = len(chunks)
    if not chunks:
        return out
    if cfg.rerank_model:
        model = _rerank_model(ctx, cfg.rerank_model)
        if model is None:
            out.info["rerank_error"] = "UNAUTHORIZED"
        else:
            try:
                resp = await ctx.api.rerank_documents(
                    model.model_id,
                    query,
                    [c.content for c in chunks],
                    top_k=cfg.rerank_top_k,
                    timeout=budget(),
                )
                ranked = [chunks[r.index] for r in resp.results if 0 <= r.index < len(chunks)]
                out.chunks = ranked[: cfg.rerank_top_k]
                out.info["reranked_by"] = model.model_id
                return out
            except AgentRunnerError as exc:
                out.info["rerank_error"] = exc.reason
    out.chunks = chunks[: cfg.retrieval_top_k]
    return out
