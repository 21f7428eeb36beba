"""Knowledge vectors in the databases' extensions (sqlite-vec, pgvector), the migration that moves old
vectors there, rank fusion against a reference, and what happens when the embedding model misbehaves."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from google.protobuf import json_format
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from agentrunner.v1 import proxy_service_pb2 as pb
from agentrunner_host.capabilities import kb_ingest
from agentrunner_host.capabilities.knowledge import KnowledgeBaseConfig, KnowledgeService, fuse
from agentrunner_host.store import kb_vectors, sqlite_vec
from agentrunner_host.store import migrate as store_db
from tests.capabilities.conftest import CORPUS, make_proxy, make_snapshot
from tests.capabilities.test_cap_knowledge import KB_GRANT, assert_ranking
from tests.mocks.openai_server import hashed_embedding

pytestmark = pytest.mark.asyncio
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
GRANT = make_snapshot(knowledge_bases={"docs": KB_GRANT})


def urls(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'kb.db'}", f"sqlite+aiosqlite:///{tmp_path / 'kb.db'}"
    url = request.getfixturevalue("postgres_database")()
    return url, url


async def vector_rows(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            tables = await kb_vectors.sqlite_tables(conn)
            return sum(
                [(await conn.execute(sa.text(f"SELECT count(*) FROM {t}"))).scalar_one() for t in tables]
            )
        return (await conn.execute(sa.text("SELECT count(*) FROM kb_chunk_vectors"))).scalar_one()


def service(engine: AsyncEngine, models) -> KnowledgeService:
    config = KnowledgeBaseConfig(id="docs", name="Help", embedding_model="embed")
    return KnowledgeService(engine, [config], embedder_for=models.embedder)


async def retrieve(knowledge: KnowledgeService, models, query: str) -> pb.RetrieveKnowledgeResponse:
    return await make_proxy(models, None, knowledge).unary(
        "RetrieveKnowledge", pb.RetrieveKnowledgeRequest(kb_id="docs", query_text=query, top_k=3), GRANT
    )


def top_path(response: pb.RetrieveKnowledgeResponse) -> str:
    return json_format.MessageToDict(response.results[0].metadata)["path"] if response.results else ""


@pytest.mark.parametrize("backend", BACKENDS)
async def test_vectors_live_in_the_extension_and_rank_on_both_backends(
    backend, request, tmp_path: Path, models
) -> None:
    sync_url, async_url = urls(backend, request, tmp_path)
    await asyncio.to_thread(store_db.upgrade, sync_url)
    engine = create_async_engine(async_url)
    try:
        knowledge = service(engine, models)
        report = await knowledge.ingest("docs", CORPUS)
        assert report.added == 12 and not report.failed
        assert await vector_rows(engine) == report.chunks
        await assert_ranking(make_proxy(models, None, knowledge), GRANT, "docs")
        found = await retrieve(knowledge, models, "Ctrl+K palette")  # no word in common: by vector only
        assert top_path(found) == "keyboard-shortcuts.html" and not found.degraded_reason
        (CORPUS_COPY := tmp_path / "c").mkdir()
        for f in CORPUS.iterdir():
            if f.name != "keyboard-shortcuts.html":
                (CORPUS_COPY / f.name).write_bytes(f.read_bytes())
        assert (await knowledge.ingest("docs", CORPUS_COPY)).removed == 1
        assert await vector_rows(engine) < report.chunks  # the removed document's vectors went with it
        assert top_path(await retrieve(knowledge, models, "Ctrl+K palette")) != "keyboard-shortcuts.html"
    finally:
        await engine.dispose()


async def index_counts(engine: AsyncEngine) -> tuple[int, int, int]:
    """(documents, chunks, full-text rows: the chunks again on PostgreSQL, where it is an index)."""
    async with engine.connect() as conn:
        docs = (await conn.execute(sa.text("SELECT count(*) FROM kb_documents"))).scalar_one()
        chunks = (await conn.execute(sa.text("SELECT count(*) FROM kb_chunks"))).scalar_one()
        fts = chunks
        if conn.dialect.name == "sqlite":
            fts = (await conn.execute(sa.text("SELECT count(*) FROM kb_chunks_fts"))).scalar_one()
    return docs, chunks, fts


@pytest.mark.parametrize("backend", BACKENDS)
async def test_batched_writes_report_each_file_once_committed_and_replace_across_batches(
    backend, request, tmp_path: Path, models, monkeypatch
) -> None:
    monkeypatch.setattr(kb_ingest, "BATCH_FILES", 5)  # 12 files: batches of 5, 5 and 2
    sync_url, async_url = urls(backend, request, tmp_path)
    await asyncio.to_thread(store_db.upgrade, sync_url)
    engine = create_async_engine(async_url)
    src = tmp_path / "kb"
    shutil.copytree(CORPUS, src)
    progress: list[tuple[int, int, str, bool]] = []

    async def step(done: int, total: int, rel: str) -> None:
        async with engine.connect() as conn:  # another connection: sees only committed rows
            stored = await conn.scalar(
                sa.text("SELECT count(*) FROM kb_documents WHERE path = :p"), {"p": rel}
            )
        progress.append((done, total, rel, stored == 1))

    try:
        knowledge = service(engine, models)
        report = await knowledge.ingest("docs", src, step)
        assert [p[:2] for p in progress] == [(i, 12) for i in range(1, 13)] and all(p[3] for p in progress)
        assert await index_counts(engine) == (12, report.chunks, report.chunks)
        assert await vector_rows(engine) == report.chunks
        # changed files in the first and the last batch, one gone from the middle one
        (src / "api-rate-limits.md").write_text("# Limits\n\nThe quota resets at the aubergine hour.\n")
        (src / "webhooks.md").write_text("# Hooks\n\nDeliveries are signed with a zucchini key.\n")
        (src / "keyboard-shortcuts.html").unlink()
        again = await knowledge.ingest("docs", src)
        assert (again.updated, again.removed, again.unchanged, again.added) == (2, 1, 9, 0)
        docs, chunks, fts = await index_counts(engine)
        assert (docs, fts) == (11, chunks) and await vector_rows(engine) == chunks < report.chunks
        assert top_path(await retrieve(knowledge, models, "aubergine quota")) == "api-rate-limits.md"
        assert top_path(await retrieve(knowledge, models, "zucchini")) == "webhooks.md"
        assert top_path(await retrieve(knowledge, models, "Ctrl+K palette")) != "keyboard-shortcuts.html"
    finally:
        await engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_migration_0007_moves_existing_vectors_and_back(
    backend, request, tmp_path: Path, models
) -> None:
    sync_url, async_url = urls(backend, request, tmp_path)
    await asyncio.to_thread(store_db.upgrade, sync_url, "0006_agent_state_leases")
    engine = create_async_engine(async_url)
    text = "Press Ctrl+K to open the command palette."
    now = dt.datetime.now(dt.UTC)
    try:
        async with engine.begin() as conn:  # what a 0006 host wrote: float32 blobs in kb_chunks
            await conn.execute(
                sa.text(
                    "INSERT INTO kb_documents (id, kb_id, path, title, mime_type, sha256, metadata, created_at,"
                    " updated_at) VALUES ('d1', 'docs', 'keys.md', 'Keys', 'text/markdown', 'x', :m, :t, :t)"
                ),
                {"m": '{"path": "keys.md"}', "t": now},
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO kb_chunks (id, kb_id, document_id, seq, title, content, metadata, embedding,"
                    " embedding_model) VALUES ('d1:0', 'docs', 'd1', 0, 'Keys', :c, '{}', :e, 'embed')"
                ),
                {"c": text, "e": kb_vectors.pack(hashed_embedding(f"Keys\n{text}"))},
            )
        await engine.dispose()
        await asyncio.to_thread(store_db.upgrade, sync_url)
        assert await vector_rows(engine) == 1
        if backend == "sqlite":  # the FTS row of an ingest before 0007 is not there in this hand-made row
            async with engine.begin() as conn:
                await conn.execute(
                    sa.text("INSERT INTO kb_chunks_fts VALUES ('d1:0', 'docs', 'Keys', :c)"), {"c": text}
                )
        found = await retrieve(service(engine, models), models, "palette shortcut")
        assert [r.chunk_id for r in found.results] == ["d1:0"]
        await engine.dispose()
        await asyncio.to_thread(store_db.downgrade, sync_url, "0006_agent_state_leases")
        async with engine.connect() as conn:
            blob = (
                await conn.execute(sa.text("SELECT embedding FROM kb_chunks WHERE id = 'd1:0'"))
            ).scalar_one()
        assert kb_vectors.unpack(bytes(blob)) == pytest.approx(hashed_embedding(f"Keys\n{text}"), abs=1e-6)
    finally:
        await engine.dispose()


def reference_rrf(rankings: list[list[str]], k: int = 60) -> list[tuple[str, float]]:
    """Cormack, Clarke & Buettcher (SIGIR 2009): RRFscore(d) = sum over rankings r of 1 / (k + r(d))."""
    docs: list[str] = []
    for ranking in rankings:
        docs.extend(d for d in ranking if d not in docs)
    score = {d: sum(1 / (k + r.index(d) + 1) for r in rankings if d in r) for d in docs}
    return sorted(((d, score[d]) for d in docs), key=lambda ds: -ds[1])


async def test_rank_fusion_matches_the_reference_formula() -> None:
    # by hand: a is 1st and 3rd -> 1/61 + 1/63; b 2nd and 1st -> 1/62 + 1/61; c only 3rd; d only 2nd
    fused = fuse([("a", 9.0), ("b", 5.0), ("c", 1.0)], [("b", 0.9), ("d", 0.8), ("a", 0.7)])
    assert [d for d, _ in fused] == ["b", "a", "d", "c"]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61) and fused[3][1] == pytest.approx(1 / 63)
    rng = random.Random(23)
    for _ in range(200):
        pool = [f"doc{i}" for i in range(rng.randint(1, 30))]
        lexical, semantic = (
            rng.sample(pool, rng.randint(1, len(pool))),
            rng.sample(pool, rng.randint(1, len(pool))),
        )
        got = fuse([(d, 0.0) for d in lexical], [(d, 0.0) for d in semantic])
        want = reference_rrf([lexical, semantic])
        assert [round(s, 12) for _, s in got] == [round(s, 12) for _, s in want]
        assert {d for d, _ in got} == set(lexical) | set(semantic)


async def test_a_flaky_embedding_model_still_completes_the_ingest(sqlite_engine, models, openai_mock) -> None:
    openai_mock.state.script_embeddings(
        {"status": 429, "retry_after_ms": 50}, {}, {"status": 500}, {}, {"drop_after": 0}
    )
    knowledge = service(sqlite_engine, models)
    report = await knowledge.ingest("docs", CORPUS)
    assert (report.added, report.failed) == (12, {})
    assert len(openai_mock.state.attempts("embeddings")) == 12 + 3  # three retried batches
    assert await vector_rows(sqlite_engine) == report.chunks


async def test_a_document_that_cannot_be_embedded_is_reported_and_the_rest_indexed(
    sqlite_engine, models, openai_mock
) -> None:
    openai_mock.state.script_embeddings({"status": 503, "times": 3, "error_message": "overloaded"})
    knowledge = service(sqlite_engine, models)
    report = await knowledge.ingest("docs", CORPUS)
    (path,) = report.failed
    assert report.added == 11 and "overloaded" in report.failed[path]
    again = await knowledge.ingest("docs", CORPUS)
    assert (again.added, again.unchanged, again.failed) == (1, 11, {})


async def test_retrieval_falls_back_to_full_text_when_the_embedding_model_is_down(
    sqlite_engine, models, openai_mock
) -> None:
    knowledge = service(sqlite_engine, models)
    await knowledge.ingest("docs", CORPUS)
    openai_mock.state.script_embeddings({"status": 503, "times": 0})
    found = await retrieve(knowledge, models, "I forgot my password, how do I get a reset link?")
    assert top_path(found) == "password-reset.md"
    assert "full-text results only" in found.degraded_reason and "RUNTIME_ERROR" in found.degraded_reason
    openai_mock.state.reset()
    assert not (await retrieve(knowledge, models, "reset link")).degraded_reason


async def test_without_sqlite_vec_ingest_and_retrieval_use_full_text_and_say_so(
    sqlite_engine, models, openai_mock, monkeypatch
) -> None:
    knowledge = service(sqlite_engine, models)
    monkeypatch.setattr(sqlite_vec, "unavailable_reason", lambda: "no vec0 here")
    report = await knowledge.ingest("docs", CORPUS)
    assert report.added == 12 and "no vec0 here" in report.degraded_reason
    assert openai_mock.state.attempts("embeddings") == []  # no vector to store: nothing embedded
    assert await vector_rows(sqlite_engine) == 0
    found = await retrieve(knowledge, models, "I forgot my password, how do I get a reset link?")
    assert top_path(found) == "password-reset.md"
    assert found.degraded_reason == "vector search is unavailable (no vec0 here): full-text results only"
    monkeypatch.undo()  # sqlite-vec is back (another Python, say): the next ingest embeds everything
    again = await knowledge.ingest("docs", CORPUS)
    assert (again.updated, again.degraded_reason) == (12, "")
    assert await vector_rows(sqlite_engine) == again.chunks
    assert not (await retrieve(knowledge, models, "Ctrl+K palette")).degraded_reason


async def test_sqlite_vec_registration_failure_is_logged_once_and_the_database_still_opens(
    tmp_path: Path,
) -> None:
    script = (
        "import sqlite_vec; sqlite_vec.loadable_path = lambda: '/nonexistent/vec0'\n"
        "from agentrunner_host.store import sqlite_vec as sv, db, migrate\n"
        "import asyncio, sqlalchemy as sa\n"
        f"url = 'sqlite:///{tmp_path / 'x.db'}'\n"
        "migrate.upgrade(url)\n"
        "async def main():\n"
        "    d = db.Database(url)\n"
        "    async with d.engine.connect() as c:\n"
        "        print('tables', (await c.execute(sa.text('SELECT count(*) FROM kb_chunks'))).scalar_one())\n"
        "    await d.dispose()\n"
        "asyncio.run(main())\n"
        "print('reason', sv.register() == sv.unavailable_reason() != '')\n"
    )
    cmd = [sys.executable, "-c", script]
    done = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "tables 0" in done.stdout and "reason True" in done.stdout
    out = done.stdout + done.stderr
    assert out.count("sqlite_vec_unavailable") == 1 and "/nonexistent/vec0" in out
