"""The schema's Alembic history: upgrade, downgrade and the "is it migrated?" check the host makes
before it serves (sync: from async code use `await asyncio.to_thread(upgrade, url)`).

Alembic (about 10 MiB of a process's memory, with Mako) is imported by the functions that migrate, not
by this module: a host that starts on a database already at head checks it without Alembic
(`_at_head`: the revision ids in the version files against the `alembic_version` table) and never
loads it; any other answer is Alembic's own (`ensure_current`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from agentrunner_host.store.db import normalize_url, safe_url, sync_url

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
#: The command users run to migrate (the host CLI exposes `migrate_cli` under this name).
UPGRADE_COMMAND = "agentrunner-host db upgrade"


class DatabaseNotMigratedError(RuntimeError):
    """The database schema is not at the head revision; the message says what to run."""


def _alembic_config(url: str | URL) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute, not an ini option: a URL's '%' would break ini interpolation.
    cfg.attributes["url"] = sync_url(url)
    return cfg


def head_revisions() -> set[str]:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    # (the script directory alone: a config with a URL would create that SQLite file's directory)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return set(ScriptDirectory.from_config(cfg).get_heads())


def current_revisions(url: str | URL) -> set[str]:
    from alembic.runtime.migration import MigrationContext

    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            return set(MigrationContext.configure(conn).get_current_heads())
    finally:
        engine.dispose()


def upgrade(url: str | URL, revision: str = "head", *, progress: Callable[[str], None] | None = None) -> None:
    """Upgrades the schema (sync; from async code use `await asyncio.to_thread(upgrade, url)`)."""
    from alembic import command

    cfg = _alembic_config(url)
    if progress is not None:
        cfg.attributes["progress"] = progress
    command.upgrade(cfg, revision)
    if normalize_url(url).drivername.startswith("sqlite"):
        # WAL is a property of the file: switch it here, while nothing else has the database open
        # (switching needs it alone, and connections only switch a database that is not WAL yet).
        engine = create_engine(sync_url(url))
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        finally:
            engine.dispose()


def downgrade(url: str | URL, revision: str) -> None:
    from alembic import command

    command.downgrade(_alembic_config(url), revision)


def file_heads() -> set[str]:
    """The head revisions by the version files' `revision` / `down_revision` assignments (read, not
    imported): the revisions no other revision names as its parent. `head_revisions` is Alembic's
    answer to the same question (a test keeps the two equal)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.AnnAssign) or node.value is None:
                continue
            target = node.target
            if isinstance(target, ast.Name) and target.id in ("revision", "down_revision"):
                value = ast.literal_eval(node.value)
                names = {value} if isinstance(value, str) else set(value or ())
                (revisions if target.id == "revision" else parents).update(names)
    return revisions - parents


def _at_head(url: str | URL) -> bool:
    """Whether the database's `alembic_version` rows are exactly the head revisions (False when that
    cannot be told without Alembic: no such table, an error; `ensure_current` then asks Alembic)."""
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            current = {row[0] for row in conn.execute(text("SELECT version_num FROM alembic_version"))}
    except DBAPIError:
        return False
    finally:
        engine.dispose()
    return bool(current) and current == file_heads()


def ensure_current(url: str | URL, *, command_hint: str = UPGRADE_COMMAND) -> None:
    """Raises `DatabaseNotMigratedError` unless the schema is at head (call before serving)."""
    if _at_head(url):
        return
    heads = head_revisions()
    try:
        current = current_revisions(url)
    except DBAPIError as exc:
        raise DatabaseNotMigratedError(
            f"cannot open database {safe_url(url)}: {type(exc.orig).__name__}: {exc.orig}"
        ) from exc
    if current != heads:
        at = ", ".join(sorted(current)) or "an empty schema"
        raise DatabaseNotMigratedError(
            f"database {safe_url(url)} is at {at}, but this host needs revision "
            f"{', '.join(sorted(heads))}. Run `{command_hint} --database-url '{safe_url(url)}'` "
            "to migrate it, then start the host again."
        )


def migrate_cli(url: str | URL, *, echo: Callable[[str], None] = print) -> None:
    """The body of the CLI's upgrade command: migrates and prints each step."""
    before = current_revisions(url)
    echo(f"database: {safe_url(url)}")
    echo(f"current revision: {', '.join(sorted(before)) or '(empty)'}")
    upgrade(url, progress=lambda step: echo(f"  applied {step}"))
    after = current_revisions(url)
    if after == before:
        echo("already at head; nothing to do")
    else:
        echo(f"upgraded to {', '.join(sorted(after))}")
