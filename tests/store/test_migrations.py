"""Migrations: an empty database upgrades to head; serving refuses an un-migrated database."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from agentrunner.v1 import result_pb2
from agentrunner_host.ports import RunRecord
from agentrunner_host.store.db import Database
from agentrunner_host.store.fact_stores import FactStores, FactStoreSettings
from agentrunner_host.store.migrate import (
    DatabaseNotMigratedError,
    current_revisions,
    downgrade,
    ensure_current,
    head_revisions,
    migrate_cli,
    upgrade,
)
from tests.store.conftest import add_run


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    factory: Callable[..., str] = request.getfixturevalue("postgres_database")
    return factory()


def test_ensure_current_refuses_an_unmigrated_database_with_the_command(empty_url: str) -> None:
    with pytest.raises(DatabaseNotMigratedError) as info:
        ensure_current(empty_url)
    message = str(info.value)
    assert "agentrunner-host db upgrade" in message
    assert "empty schema" in message


def test_migrate_cli_upgrades_an_empty_database_and_is_idempotent(empty_url: str, tmp_path: Path) -> None:
    lines: list[str] = []
    migrate_cli(empty_url, echo=lines.append)
    assert any("applied 0001_initial" in line for line in lines)
    ensure_current(empty_url)  # no error
    assert current_revisions(empty_url) == head_revisions()
    lines.clear()
    migrate_cli(empty_url, echo=lines.append)
    assert "already at head; nothing to do" in lines

    async def usable() -> list[str]:
        db = Database(empty_url)
        try:
            stores = await FactStores.open(db, FactStoreSettings(artifact_dir=tmp_path / "a"))
            row = await stores.transcript.append(conversation_id="c", role="user", content="hello")
            assert row.seq == 1
            async with db.engine.connect() as conn:
                return await conn.run_sync(lambda c: inspect(c).get_table_names())
        finally:
            await db.dispose()

    tables = asyncio.run(usable())
    assert {"event_log", "runs", "run_results", "transcript_items", "artifacts", "state_entries"} <= set(
        tables
    )


def test_downgrade_to_base_and_upgrade_again(empty_url: str) -> None:
    migrate_cli(empty_url, echo=lambda _: None)
    downgrade(empty_url, "base")
    with pytest.raises(DatabaseNotMigratedError):
        ensure_current(empty_url)
    migrate_cli(empty_url, echo=lambda _: None)
    ensure_current(empty_url)


def test_upgrade_from_the_previous_revision_keeps_existing_data(empty_url: str, tmp_path: Path) -> None:
    """A database at the previous release's revision upgrades to head without losing what it holds."""
    heads = sorted(head_revisions())
    assert heads == ["0007_kb_vectors"], "update this test's previous revision when adding a migration"
    upgrade(empty_url, "0006_agent_state_leases")
    with pytest.raises(DatabaseNotMigratedError):
        ensure_current(empty_url)  # serving refuses a database one revision behind

    async def write_then_read(step: str) -> list[tuple[int, str]]:
        db = Database(empty_url)
        try:
            stores = await FactStores.open(db, FactStoreSettings(artifact_dir=tmp_path / "a"))
            if step == "write":
                for text in ("before upgrade 1", "before upgrade 2"):
                    await stores.transcript.append(conversation_id="c-old", role="user", content=text)
            async with db.engine.connect() as conn:
                rows = await conn.exec_driver_sql(
                    "SELECT seq, content FROM transcript_items WHERE conversation_id = 'c-old' ORDER BY seq"
                )
                found = [(int(r[0]), str(r[1])) for r in rows]  # type: ignore[misc]  # untyped driver rows
            if step == "read":  # full-text search finds each row once (indexed before, not again after)
                hits = await stores.transcript.search(conversation_id="c-old", query="upgrade")
                assert sorted(h.content for h in hits) == [text for _, text in found]
                if db.is_sqlite:  # and the index holds exactly the rows (raises otherwise)
                    async with db.engine.begin() as conn:
                        await conn.exec_driver_sql(
                            "INSERT INTO transcript_fts(transcript_fts, rank) VALUES ('integrity-check', 1)"
                        )
            return found
        finally:
            await db.dispose()

    before = asyncio.run(write_then_read("write"))
    migrate_cli(empty_url, echo=lambda _: None)
    ensure_current(empty_url)
    assert current_revisions(empty_url) == head_revisions()
    assert (
        asyncio.run(write_then_read("read")) == before == [(1, "before upgrade 1"), (2, "before upgrade 2")]
    )


def test_downgrade_unpacks_packed_delta_rows_without_losing_a_result(empty_url: str, tmp_path: Path) -> None:
    """0004 packs consecutive deltas into one ledger row; going back to 0003 gives every result its own
    row again (same sequences, same bytes), and upgrading once more reads them all back."""
    migrate_cli(empty_url, echo=lambda _: None)
    run_id = "run_packed"

    def delta(seq: int) -> result_pb2.RunResult:
        result = result_pb2.RunResult(run_id=run_id, sequence=seq)
        result.message_delta.text = f"part {seq} "
        return result

    async def write() -> list[bytes]:
        db = Database(empty_url)
        try:
            stores = await FactStores.open(db, FactStoreSettings(artifact_dir=tmp_path / "a"))
            await add_run(
                stores,
                RunRecord(run_id=run_id, event_id="evt_packed", agent_id="a", binding_id="b", runner_id="r"),
            )
            await stores.record_deltas([(run_id, [delta(s) for s in range(1, 6)])])
            await stores.record_deltas([(run_id, [delta(s) for s in range(6, 8)])])
            return [r.SerializeToString() for r in await stores.ledger.list_results(run_id)]
        finally:
            await db.dispose()

    async def rows() -> list[tuple[int, str]]:
        db = Database(empty_url)
        try:
            async with db.engine.connect() as conn:
                found = await conn.exec_driver_sql(
                    f"SELECT sequence, result_type FROM run_results WHERE run_id = '{run_id}' ORDER BY sequence"
                )
                return [(int(r[0]), str(r[1])) for r in found]  # type: ignore[misc]  # untyped driver rows
        finally:
            await db.dispose()

    async def read() -> list[bytes]:
        db = Database(empty_url)
        try:
            stores = await FactStores.open(db, FactStoreSettings(artifact_dir=tmp_path / "a"))
            return [r.SerializeToString() for r in await stores.ledger.list_results(run_id)]
        finally:
            await db.dispose()

    stored = asyncio.run(write())
    assert [result_pb2.RunResult.FromString(b).sequence for b in stored] == [1, 2, 3, 4, 5, 6, 7]
    assert asyncio.run(rows()) == [(5, "message.delta"), (7, "message.delta")]  # two packed rows
    downgrade(empty_url, "0003_interactions")
    assert asyncio.run(rows()) == [(s, "message.delta") for s in range(1, 8)]
    migrate_cli(empty_url, echo=lambda _: None)
    assert asyncio.run(read()) == stored


def test_upgrade_moves_conversation_state_from_bindings_to_their_agent(
    empty_url: str, tmp_path: Path
) -> None:
    """0006 namespaces conversation state by agent: values two bindings of one agent kept apart become
    one (the newest wins), readable by a run of that agent routed by any binding; nothing else moves."""
    upgrade(empty_url, "0005_deferred_fts")
    sep = "\x1e"
    engine = (
        create_engine(make_url(empty_url).set(drivername="sqlite+pysqlite"))
        if "sqlite" in empty_url
        else (create_engine(empty_url))
    )
    rows = [  # (run, binding, key, value, updated_at)
        ("run_a", "questions", "pending", '"old question"', "2026-01-01 10:00:00"),
        ("run_b", "answers", "pending", '"new question"', "2026-01-01 11:00:00"),
        ("run_a", "questions", "turns", "3", "2026-01-01 10:00:00"),
    ]
    with engine.begin() as conn:
        for run_id, binding in (("run_a", "questions"), ("run_b", "answers")):
            conn.execute(
                text("INSERT INTO runs (run_id, event_id, agent_id, binding_id, runner_id, status, status_reason, "
                     "conversation_id, thread_id, bot_id, workspace_id, trace_id, owner, created_at, usage, "
                     "last_sequence, metadata) VALUES (:r, :e, 'asker', :b, 'plugin:x/y/z', 3, '', 'c1', '', '', "
                     "'', '', '', '2026-01-01 09:00:00', '{}', 0, '{}')"),
                {"r": run_id, "e": f"evt_{run_id}", "b": binding},
            )  # fmt: skip
        for run_id, binding, key, value, at in rows:
            conn.execute(
                text("INSERT INTO state_entries (scope, owner_key, key, value, size_bytes, updated_by_run, "
                     "updated_at) VALUES ('conversation', :o, :k, :v, 1, :r, :at)"),
                {"o": sep.join(("plugin:x/y/z", binding, "c1\x1f")), "k": key, "v": value, "r": run_id, "at": at},
            )  # fmt: skip
    migrate_cli(empty_url, echo=lambda _: None)
    with engine.connect() as conn:
        moved = conn.execute(text("SELECT owner_key, key, value FROM state_entries ORDER BY key")).all()
    engine.dispose()
    owner = sep.join(("plugin:x/y/z", "a:asker", "c1\x1f"))

    def decode(
        v: object,
    ) -> object:  # JSON text on SQLite (a number may come back as one), JSONB on PostgreSQL
        return json.loads(v) if isinstance(v, str) and "sqlite" in empty_url else v

    assert [(o, k, decode(v)) for o, k, v in moved] == [
        (owner, "pending", "new question"),
        (owner, "turns", 3),
    ]


def test_the_migrations_import_nothing_above_the_store() -> None:
    """The migrations are not a package, so the import-layer contract (`lint-imports`) does not see them:
    an import from them up to `delivery/`, `capabilities/` or `auth/` would load the upper layers into
    every `db upgrade` and tie the schema's history to their code. They reach only `store/` (the schema,
    the vector statements) and the SDK."""
    import ast

    import agentrunner_host.store

    migrations = Path(agentrunner_host.store.__file__).parent / "migrations"
    scripts = sorted(migrations.rglob("*.py"))
    assert len(scripts) >= 8  # env.py and the revisions
    upward = []
    for script in scripts:
        for node in ast.walk(ast.parse(script.read_text(), str(script))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            upward += [
                f"{script.relative_to(migrations)}: {name}"
                for name in names
                if name.startswith("agentrunner_host") and not name.startswith("agentrunner_host.store")
            ]
    assert upward == []


def test_the_start_up_check_reads_the_same_heads_as_alembic() -> None:
    """`ensure_current` skips Alembic when the version files' heads match the database's: that shortcut
    is right only while the files' `revision` / `down_revision` say what Alembic reads from them."""
    from agentrunner_host.store.migrate import file_heads

    assert file_heads() == head_revisions()
