"""A PostgreSQL cluster of the fleet suite's own (a test stops and starts it), and a fleet on it."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from agentrunner_host.store.migrate import upgrade
from tests.fleet.support import Fleet
from tests.hardening.conftest import OwnPostgres


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[OwnPostgres]:
    # (not under pytest's temp root: the cluster's owner, the postgres user, must reach the directory)
    root = pathlib.Path(tempfile.mkdtemp(prefix="agentrunner-fleet-pg-"))
    pg = OwnPostgres(root)
    yield pg
    pg.close()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def fleet(own_postgres: OwnPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three replicas and the fleet runner on one fresh database."""
    url = own_postgres.create_database()
    upgrade(url)
    running = Fleet(tmp_path_factory.mktemp("fleet"), own_postgres, url)
    yield running
    running.close()
