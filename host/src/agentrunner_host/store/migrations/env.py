"""Alembic environment of the host schema (sync drivers: migrations need no event loop).

Used programmatically by `agentrunner_host.store.migrate.upgrade`; the URL arrives as a config attribute.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from alembic import context
from alembic.runtime.migration import MigrationContext, MigrationInfo
from alembic.script import Script
from sqlalchemy import create_engine, pool

from agentrunner_host.store import sqlite_vec
from agentrunner_host.store.schema import Base  # (the package registers every table on Base.metadata)

config = context.config
target_metadata = Base.metadata


def _on_version_apply(
    ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]
) -> None:
    progress = config.attributes.get("progress")
    if progress is not None:
        script = step.up_revision  # (the revision applied, or undone by a downgrade step)
        revision = ", ".join(step.up_revision_ids if step.is_upgrade else step.down_revision_ids) or "base"
        progress(f"{revision} ({script.doc if isinstance(script, Script) else ''})")


def run_migrations_online() -> None:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("the migrations were given no database URL")
    if str(url).startswith("sqlite"):
        sqlite_vec.register()  # before the migration's connection opens (0007 writes vectors)
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=connection.dialect.name == "sqlite",
                on_version_apply=_on_version_apply,
                transaction_per_migration=True,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():  # pragma: no cover - offline SQL generation is not supported
    raise SystemExit("offline migrations are not supported; run against a database")
run_migrations_online()
