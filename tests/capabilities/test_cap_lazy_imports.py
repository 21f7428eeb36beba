"""A host process that never calls a model, a tool or an HTML parser does not import their libraries:
`openai` alone costs more start-up CPU than the rest of the host, and every host and CLI process
would pay it (the first model call imports it, off the event loop)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

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


#: what a host with the default configuration (SQLite, no console, no OTLP endpoint) never needs: the
#: unconfigured stacks, and (issue 37, idle RSS) rich and pygments (structlog loads them for tracebacks
#: these logs never render) and the OpenTelemetry SDK (span ids without an exporter need none of it)
UNCONFIGURED = (
    "alembic",
    "psycopg",
    "psycopg_pool",
    "uvicorn",
    "starlette",
    "httpx",
    "mcp",
    "rich",
    "pygments",
    "opentelemetry.sdk",
    "pydantic_settings",
    "prometheus_client",
    # the PostgreSQL dialect (~2.1 MiB): JSONB and `postgresql.insert` load it when a database is one
    "sqlalchemy.dialects.postgresql",
)


def test_a_started_host_with_the_default_configuration_imports_no_unconfigured_stack(
    tmp_path: pathlib.Path,
) -> None:
    """Issue 37: a host on SQLite without a console or tools to fetch with serves without Alembic (the
    schema check reads the version table), the PostgreSQL driver, the console's web stack, httpx, the
    MCP client, rich or the OpenTelemetry SDK: each costs megabytes of every idle host's memory."""
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


#: what a runner served by `python -m agentrunner serve` (or `serve()`) never needs: the CLI toolkits
#: (typer loads pydantic and rich when it parses), rich and pygments (see above), the OpenTelemetry SDK
RUNNER_NEVER = ("typer", "click", "rich", "pygments", "pydantic", "opentelemetry.sdk")

PROBE_RUNNER = f"""
import atexit, sys
from agentrunner import Runner, results
atexit.register(lambda: print("LOADED", sorted(m for m in {RUNNER_NEVER!r} if m in sys.modules), flush=True))
class Echo(Runner):
    manifest = {{"id": "plugin:probe/echo/default", "label": "Echo", "description": "Echoes.",
                 "capabilities": []}}
    async def run(self, ctx):
        yield results.completed(ctx.input.to_text())
"""


def test_a_runner_served_from_the_command_line_imports_no_cli_toolkit(tmp_path: pathlib.Path) -> None:
    """Issue 37: an idle SDK runner held ~59 MiB, ~14 of them typer, pydantic, rich and pygments that
    serving never uses. The runner process (the SDK's CLI, as the host's runner endpoints start them)
    listens, is stopped with SIGTERM, and reports what it had loaded."""
    (tmp_path / "probe_runner.py").write_text(textwrap.dedent(PROBE_RUNNER))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrunner", "serve", "probe_runner:Echo", "--port", "0", "--grace", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("AGENTRUNNER_LISTENING")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "LOADED []" in out.splitlines(), out


def test_a_host_served_from_the_command_line_imports_no_rich(tmp_path: pathlib.Path) -> None:
    """`agentrunner-host serve` prints no table: rich (and pygments) stay out of the served host, as the
    unconfigured stacks do (the CLI commands that print load rich when they print)."""
    database = tmp_path / "host.db"
    upgrade(f"sqlite:///{database}")
    config = tmp_path / "host.yaml"
    config.write_text(
        f"listen: {{address: '127.0.0.1:0'}}\ndatabase: {{url: 'sqlite+aiosqlite:///{database}'}}\n"
    )
    never = (
        "rich",
        "pygments",
        "opentelemetry.sdk",
        "pydantic_settings",
        "prometheus_client",
        "alembic",
        "psycopg",
        "sqlalchemy.dialects.postgresql",
        # `serve` with options parsed in full runs without the CLI toolkit (~1.4 MiB)
        "typer",
        "click",
    )
    script = (
        "import atexit, sys\n"
        f"atexit.register(lambda: print('LOADED', sorted(m for m in {never!r} if m in sys.modules), flush=True))\n"
        f"sys.argv = ['agentrunner-host', 'serve', '--config', {str(config)!r}, '--log-level', 'WARNING']\n"
        "from agentrunner_host.cli import main\n"
        "main()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("AGENTRUNNER_HOST_LISTENING")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "LOADED []" in out.splitlines(), out
