"""A host process that never calls a model, a tool or an HTML parser does not import their libraries:
`openai` alone costs more start-up CPU than the rest of the host, and every host and CLI process
would pay it (the first model call imports it, off the event loop)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from agentrunner_host.store.migrate import upgrade

HEAVY = ("openai", "httpx2", "tenacity", "jsonschema", "lxml", "html_text", "frontmatter", "sqlite_vec")


def test_starting_a_host_or_its_cli_imports_none_of_the_call_time_libraries() -> None:
    script = (
        "import sys\n"
        "import agentrunner_host.server.app, agentrunner_host.cli, agentrunner_host.config.model\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


#: what a host with the default configuration (SQLite, no console, no OTLP endpoint) never needs
UNCONFIGURED = ("alembic", "psycopg", "psycopg_pool", "uvicorn", "starlette", "httpx", "mcp")


def test_a_started_host_with_the_default_configuration_imports_no_unconfigured_stack(
    tmp_path: pathlib.Path,
) -> None:
    """Issue 37: a host on SQLite without a console or tools to fetch with serves without Alembic (the
    schema check reads the version table), the PostgreSQL driver, the console's web stack, httpx or the
    MCP client: each costs megabytes of every idle host's memory."""
    database = tmp_path / "host.db"
    upgrade(f"sqlite:///{database}")
    script = (
        "import asyncio, sys\n"
        "from agentrunner_host.config.model import parse_config\n"
        "from agentrunner_host.server.app import HostApp\n"
        "async def main():\n"
        "    config = {'listen': {'address': '127.0.0.1:0'},\n"
        f"              'database': {{'url': 'sqlite+aiosqlite:///{database}'}}}}\n"
        "    host = await HostApp.open(parse_config(config))\n"
        "    await host.start(None)\n"
        f"    print(sorted(m for m in {UNCONFIGURED!r} if m in sys.modules))\n"
        "    await host.stop(0)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
