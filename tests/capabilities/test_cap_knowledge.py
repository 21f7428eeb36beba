"""Knowledge RPCs end to end: files ingested into a real SQLite database (FTS5, and vectors from the
mock embedding endpoint), retrieved through the handler table."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from google.protobuf import json_format, struct_pb2

from agentrunner.errors import InvalidArgumentError, UnauthorizedError
from agentrunner.v1 import manifest_pb2
from agentrunner.v1 import proxy_service_pb2 as pb
from agentrunner_host.capabilities.knowledge import (
    ExternalKnowledgeBase,
    KnowledgeBaseConfig,
    KnowledgeService,
    RetrievedChunk,
    ingest_directory,
)
from agentrunner_host.proxy.capabilities import Backends, project_resources
from agentrunner_host.proxy.selectors import resolve_selectors
from tests.capabilities.conftest import CORPUS, make_proxy, make_snapshot

pytestmark = pytest.mark.asyncio

# query -> the document that must rank first
QUERIES = {
    "I forgot my password, how do I get a reset link?": "password-reset.md",
    "can I get my money back for an annual subscription": "billing-refunds.md",
    "where do I download an invoice PDF with our VAT number": "invoices.md",
    "set up an authenticator app and recovery codes": "two-factor.md",
    "the API returns 429 too many requests": "api-rate-limits.md",
    "how to verify the HMAC signature of a webhook delivery": "webhooks.md",
    "export all my conversations as a zip archive": "data-export.txt",
    "how long does international delivery of my order take": "shipping.txt",
    "install the Android app from the Play Store": "mobile-app.html",
    "which key opens the command palette": "keyboard-shortcuts.html",
    "invite a teammate to the workspace by email": "team-invites.md",
    "switch to the dark theme at sunset": "dark-mode.txt",
}
KB_GRANT = frozenset({"list", "retrieve"})


async def assert_ranking(proxy, snapshot, kb_id: str) -> None:
    misses = []
    for query, expected in QUERIES.items():
        response = await proxy.unary(
            "RetrieveKnowledge", pb.RetrieveKnowledgeRequest(kb_id=kb_id, query_text=query, top_k=3), snapshot
        )
        top = json_format.MessageToDict(response.results[0].metadata)["path"] if response.results else None
        if top != expected:
            misses.append((query, expected, top))
    assert not misses


async def test_fulltext_retrieval_ranks_the_expected_document_first(sqlite_engine, models) -> None:
    progress: list[tuple[int, int, str]] = []
    report = await ingest_directory(
        sqlite_engine, "docs", CORPUS, progress=lambda d, t, p: progress.append((d, t, p))
    )
    assert (report.added, report.chunks >= 12) == (12, True)
    assert progress[-1][:2] == (12, 12) and {p[2] for p in progress} == set(QUERIES.values())
    knowledge = KnowledgeService(sqlite_engine, [KnowledgeBaseConfig(id="docs", name="Help center")])
    proxy = make_proxy(models, None, knowledge)
    await assert_ranking(proxy, make_snapshot(knowledge_bases={"docs": KB_GRANT}), "docs")


async def test_hybrid_retrieval_with_embeddings(sqlite_engine, models, openai_mock) -> None:
    config = KnowledgeBaseConfig(id="docs", name="Help", embedding_model="embed")
    knowledge = KnowledgeService(sqlite_engine, [config], embedder_for=models.embedder)
    await knowledge.ingest("docs", CORPUS)
    embed_calls = [r for r in openai_mock.state.requests if r["path"] == "/v1/embeddings"]
    assert embed_calls and embed_calls[0]["body"]["model"] == "mock-embed"
    proxy = make_proxy(models, None, knowledge)
    await assert_ranking(proxy, make_snapshot(knowledge_bases={"docs": KB_GRANT}), "docs")
    # a query with no word in common with the text still finds it by vector (same hashed words)
    response = await proxy.unary(
        "RetrieveKnowledge", pb.RetrieveKnowledgeRequest(kb_id="docs", query_text="Ctrl+K palette"),
        make_snapshot(knowledge_bases={"docs": KB_GRANT}),
    )  # fmt: skip
    assert json_format.MessageToDict(response.results[0].metadata)["path"] == "keyboard-shortcuts.html"


async def test_results_carry_ids_scores_metadata_and_honour_filters_and_top_k(sqlite_engine, models) -> None:
    await ingest_directory(sqlite_engine, "docs", CORPUS)
    knowledge = KnowledgeService(sqlite_engine, [KnowledgeBaseConfig(id="docs")])
    proxy = make_proxy(models, None, knowledge)
    snapshot = make_snapshot(knowledge_bases={"docs": KB_GRANT})
    response = await proxy.unary(
        "RetrieveKnowledge",
        pb.RetrieveKnowledgeRequest(kb_id="docs", query_text="invoice billing refund", top_k=2),
        snapshot,
    )
    assert len(response.results) == 2
    first = response.results[0]
    assert first.document_id and first.chunk_id.startswith(first.document_id)
    assert response.results[0].score >= response.results[1].score > 0
    meta = json_format.MessageToDict(first.metadata)
    assert meta["category"] == "billing" and meta["title"] in {"Refund policy", "Downloading invoices"}
    filters = struct_pb2.Struct()
    filters.update({"category": "account"})
    filtered = await proxy.unary(
        "RetrieveKnowledge",
        pb.RetrieveKnowledgeRequest(kb_id="docs", query_text="invoice billing refund seat", filters=filters),
        snapshot,
    )
    assert filtered.results and {json_format.MessageToDict(r.metadata)["path"] for r in filtered.results} == {
        "team-invites.md"
    }
    html = await proxy.unary(
        "RetrieveKnowledge", pb.RetrieveKnowledgeRequest(kb_id="docs", query_text="tracking"), snapshot
    )
    assert "var tracking" not in " ".join(r.content for r in html.results)  # scripts are not indexed
    with pytest.raises(InvalidArgumentError):
        await proxy.unary(
            "RetrieveKnowledge", pb.RetrieveKnowledgeRequest(kb_id="docs", query_text="  "), snapshot
        )


async def test_reingest_skips_unchanged_updates_changed_removes_vanished(
    sqlite_engine, models, tmp_path: Path
) -> None:
    src = tmp_path / "kb"
    shutil.copytree(CORPUS, src)
    await ingest_directory(sqlite_engine, "docs", src)
    again = await ingest_directory(sqlite_engine, "docs", src)
    assert (again.added, again.updated, again.unchanged, again.removed) == (0, 0, 12, 0)
    (src / "dark-mode.txt").write_text("Dark mode\n\nThe night palette is called aubergine.")
    (src / "shipping.txt").unlink()
    third = await ingest_directory(sqlite_engine, "docs", src)
    assert (third.updated, third.removed, third.unchanged) == (1, 1, 10)
    knowledge = KnowledgeService(sqlite_engine, [KnowledgeBaseConfig(id="docs")])
    assert (await knowledge.retrieve("docs", "aubergine"))[0].metadata["path"] == "dark-mode.txt"
    assert await knowledge.retrieve("docs", "warehouse customs parcel") == []


async def test_ungranted_kb_is_unauthorized_and_listing_shows_only_granted(sqlite_engine, models) -> None:
    await ingest_directory(sqlite_engine, "docs", CORPUS)
    knowledge = KnowledgeService(
        sqlite_engine, [KnowledgeBaseConfig(id="docs", name="Docs"), KnowledgeBaseConfig(id="hr", name="HR")]
    )
    proxy = make_proxy(models, None, knowledge)
    with pytest.raises(UnauthorizedError):
        await proxy.unary(
            "RetrieveKnowledge",
            pb.RetrieveKnowledgeRequest(kb_id="hr", query_text="x"),
            make_snapshot(knowledge_bases={"docs": KB_GRANT}),
        )
    with pytest.raises(UnauthorizedError):
        await proxy.unary("RetrieveKnowledge", pb.RetrieveKnowledgeRequest(kb_id="docs", query_text="x"),
                          make_snapshot(knowledge_bases={"docs": frozenset({"list"})}))  # fmt: skip
    with pytest.raises(UnauthorizedError):
        await proxy.unary("ListKnowledgeBases", pb.ListKnowledgeBasesRequest(), make_snapshot())
    listed = await proxy.unary("ListKnowledgeBases", pb.ListKnowledgeBasesRequest(),
                               make_snapshot(knowledge_bases={"docs": KB_GRANT, "hr": frozenset({"retrieve"})}))  # fmt: skip
    assert [(k.kb_id, k.kb_name, k.kb_type, list(k.operations)) for k in listed.knowledge_bases] == [
        ("docs", "Docs", "builtin", ["list", "retrieve"])
    ]


class KeywordRetriever:
    """An external retriever: a fixed answer table."""

    async def retrieve(self, query, top_k, filters):
        return [RetrievedChunk("ext-doc", "ext-doc#1", f"answer to {query}", 0.9, {"source": "external"})][
            :top_k
        ]


async def test_external_retriever_plugs_in_behind_the_same_rpc(sqlite_engine, models) -> None:
    knowledge = KnowledgeService(
        sqlite_engine, external=[ExternalKnowledgeBase("wiki", "Wiki", "external-http", KeywordRetriever())]
    )
    proxy = make_proxy(models, None, knowledge)
    response = await proxy.unary("RetrieveKnowledge", pb.RetrieveKnowledgeRequest(kb_id="wiki", query_text="vpn"),
                                 make_snapshot(knowledge_bases={"wiki": KB_GRANT}))  # fmt: skip
    assert [(r.document_id, r.content) for r in response.results] == [("ext-doc", "answer to vpn")]


async def test_selectors_resolve_against_backends_and_project_resources(sqlite_engine, models) -> None:
    knowledge = KnowledgeService(sqlite_engine, [KnowledgeBaseConfig(id="docs", name="Docs")])
    schema = [
        manifest_pb2.ConfigField(name="model", type=manifest_pb2.CONFIG_FIELD_TYPE_MODEL_FALLBACK_SELECTOR),
        manifest_pb2.ConfigField(
            name="rerank-model", type=manifest_pb2.CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR
        ),
        {"name": "knowledge-bases", "type": "knowledge-base-multi-selector"},
        {"name": "summary-model", "type": "llm-model-selector", "default": "chat-text"},
        {"name": "prompt", "type": "text"},
    ]
    config = {"model": {"primary": "chat", "fallbacks": ["chat-fast-timeout", "missing"]},
              "rerank-model": "rerank", "knowledge-bases": ["docs", "gone"], "prompt": "chat"}  # fmt: skip
    backends = Backends(models, None, knowledge)
    selected = resolve_selectors(schema, config, backends)
    assert selected.llm_models == ["chat", "chat-fast-timeout", "chat-text"]
    assert selected.rerank_models == ["rerank"] and selected.knowledge_bases == ["docs"]
    assert sorted(selected.unknown) == ["gone", "missing"]
    resources = project_resources(
        backends,
        models={"chat": frozenset({"invoke", "stream", "rerank"}), "rerank": frozenset({"rerank"})},
        knowledge_bases={"docs": frozenset({"retrieve"})},
    )
    chat, rerank = resources.models
    assert (chat.model_id, chat.model_type, list(chat.operations), chat.vision, chat.context_window_tokens) == (
        "chat", "llm", ["invoke", "stream"], True, 128000)  # fmt: skip
    assert (rerank.model_type, list(rerank.operations)) == ("rerank", ["rerank"])
    assert [(k.kb_id, k.kb_name) for k in resources.knowledge_bases] == [("docs", "Docs")]


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def test_migrated_schema_ingests_and_ranks(backend, request, tmp_path: Path, models) -> None:
    """Migration 0002 (on top of 0001) builds the schema the retriever needs, on both databases."""
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    from agentrunner_host.store import migrate as store_db

    if backend == "sqlite":
        sync_url, async_url = f"sqlite:///{tmp_path / 'm.db'}", f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"
    else:
        async_url = sync_url = request.getfixturevalue("postgres_database")()
    await asyncio.to_thread(store_db.upgrade, sync_url)
    engine = create_async_engine(async_url)
    try:
        await ingest_directory(engine, "docs", CORPUS)
        knowledge = KnowledgeService(engine, [KnowledgeBaseConfig(id="docs")])
        await assert_ranking(
            make_proxy(models, None, knowledge), make_snapshot(knowledge_bases={"docs": KB_GRANT}), "docs"
        )
        assert (await ingest_directory(engine, "docs", CORPUS)).unchanged == 12
    finally:
        await engine.dispose()
    await asyncio.to_thread(store_db.downgrade, sync_url, "0001_initial")
