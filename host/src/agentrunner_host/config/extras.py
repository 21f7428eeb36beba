"""Which of the host package's extras a configuration needs, and which of those are not installed.

`pip install langbot-agentrunner-host` serves runs on SQLite; PostgreSQL, OTLP export, the web console
and MCP tool servers each come with an extra (host/pyproject.toml). `serve` refuses a config whose
extra is missing with the line that installs it, instead of failing later inside a run.
"""

from __future__ import annotations

import importlib.util

from agentrunner.telemetry import otlp_endpoint
from agentrunner_host.config.model import HostConfig

PACKAGE = "langbot-agentrunner-host"
#: extra -> the modules it installs that the host imports
MODULES: dict[str, tuple[str, ...]] = {
    "postgres": ("psycopg", "psycopg_pool"),
    "otlp": ("opentelemetry.exporter.otlp.proto.grpc",),
    "console": ("starlette", "sse_starlette", "uvicorn"),
    "harness": ("mcp",),
}


def needed(config: HostConfig) -> dict[str, str]:
    """extra -> the setting that needs it."""
    found = {}
    if config.database.url.startswith(("postgresql", "postgres:")):
        found["postgres"] = "database.url is a PostgreSQL URL"
    if otlp_endpoint(config.telemetry.otlp_endpoint) or otlp_endpoint(
        config.telemetry.otlp_endpoint, "metrics"
    ):
        found["otlp"] = "an OTLP endpoint is set (telemetry.otlp_endpoint or OTEL_EXPORTER_OTLP_*)"
    if config.console.address:
        found["console"] = "console.address is set"
    if config.tools.mcp_servers:
        found["harness"] = "tools.mcp_servers is not empty"
    return found


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def missing(config: HostConfig) -> list[str]:
    """One line per extra the config needs and this installation lacks (empty: nothing missing)."""
    lines = []
    for extra, why in needed(config).items():
        absent = [m for m in MODULES[extra] if not _installed(m)]
        if absent:
            lines.append(f"{why}: pip install '{PACKAGE}[{extra}]' ({absent[0]} is not installed)")
    return lines
