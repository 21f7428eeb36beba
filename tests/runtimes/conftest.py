"""Fixtures of the runtime suites: a migrated SQLite database in-process hosts start from."""

from __future__ import annotations

import pathlib

import pytest

from agentrunner_host.store.migrate import upgrade


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A migrated SQLite database each in-process host of a module starts from (a copy)."""
    path = tmp_path_factory.mktemp("template") / "host.db"
    upgrade(f"sqlite:///{path}")
    return path
