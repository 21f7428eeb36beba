"""Fixtures of the host parity suite: one runner process per module, one host per test module."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from agentrunner_host.store.migrate import upgrade
from tests.parity.support import Host, Proc, open_host, start_runner


@pytest.fixture(scope="session")
def db_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("parity-db") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="module")
def runner() -> Iterator[Proc]:
    proc = start_runner()
    yield proc
    proc.kill()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def host(
    runner: Proc, db_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Host]:
    directory = tmp_path_factory.mktemp("parity-host")
    target = directory / "host.db"
    shutil.copy(db_template, target)
    h = await open_host(
        runner.value, {"url": f"sqlite+aiosqlite:///{target}", "artifact_dir": str(directory / "a")}
    )
    yield h
    await h.channel.close()
    await h.app.stop(0.5)
