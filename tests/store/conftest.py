"""Store fixtures: every test runs once on SQLite and once on PostgreSQL, on a migrated database."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from agentrunner_host.ports import AuthorizationSnapshot, RunRecord
from agentrunner_host.store.db import Database
from agentrunner_host.store.fact_stores import FactStores, FactStoreSettings
from agentrunner_host.store.ledger import insert_run_sync, run_values
from agentrunner_host.store.migrate import upgrade
from tests.conftest import PostgresServer

ALL = frozenset


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_template(postgres_server: PostgresServer) -> str:
    name = postgres_server.create_database()
    upgrade(postgres_server.url(name))
    return name


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated database on each backend."""
    if request.param == "sqlite":
        target = tmp_path / "host.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), target)
        return f"sqlite+aiosqlite:///{target}"
    template = request.getfixturevalue("postgres_template")
    factory: Callable[..., str] = request.getfixturevalue("postgres_database")
    return factory(template)


@pytest.fixture
def settings(tmp_path: Path) -> FactStoreSettings:
    return FactStoreSettings(artifact_dir=tmp_path / "artifacts", owner="host-a")


@pytest_asyncio.fixture
async def stores(db_url: str, settings: FactStoreSettings) -> AsyncIterator[FactStores]:
    db = Database(db_url)
    try:
        yield await FactStores.open(db, settings)
    finally:
        await db.dispose()


def make_snapshot(**overrides: object) -> AuthorizationSnapshot:
    """A run in conversation c1 with every fact API granted (tests narrow it)."""
    base: dict[str, object] = {
        "run_id": "run_1",
        "runner_id": "plugin:acme/agent/default",
        "agent_id": "agent_1",
        "binding_id": "bind_1",
        "event_id": "evt_1",
        "conversation_id": "c1",
        "bot_id": "bot_1",
        "workspace_id": "ws_1",
        "actor_id": "user_1",
        "subject_id": "group_1",
        "history": ALL({"page", "search"}),
        "events": ALL({"get", "page"}),
        "artifacts": ALL({"metadata", "read"}),
        "state_scopes": ALL({"conversation", "actor", "subject", "runner", "binding", "workspace"}),
        "storage_areas": ALL({"plugin", "workspace", "binding"}),
        "runs": ALL({"get", "list", "events_page", "cancel"}),
        "prompt": True,
        "steering": True,
    }
    base.update(overrides)
    return AuthorizationSnapshot(**base)  # type: ignore[arg-type]


async def add_run(stores: FactStores, record: RunRecord) -> bool:
    """A run row alone, written as the run start writes it (`ledger.insert_run_sync`, the one writer of
    run rows; the start also records the event, which these tests do not want); False for a duplicate."""
    values = run_values(record, stores.settings.owner)
    return await stores.db.run_write(lambda conn: insert_run_sync(conn, values))
