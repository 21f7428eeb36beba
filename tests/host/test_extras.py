"""The host package's extras: a config that needs a missing one is refused at start-up with the line
that installs it; `config init` writes the examples the wheel carries."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from agentrunner_host.cli.examples import write_examples
from agentrunner_host.config import extras
from agentrunner_host.config.model import parse_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASE: dict[str, Any] = {
    "database": {"url": "sqlite+aiosqlite:///./var/x.db"},
    "agents": [{"id": "a", "runner_id": "plugin:acme/echo/default"}],
}


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """This installation behaves as if `modules` (and their submodules) were not installed."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        if any(name == m or name.startswith(m + ".") for m in modules):
            return None
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)  # (extras looks it up per call)


def test_a_sqlite_config_needs_no_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    ):
        monkeypatch.delenv(var, raising=False)
    _without(
        monkeypatch,
        "psycopg",
        "psycopg_pool",
        "starlette",
        "sse_starlette",
        "uvicorn",
        "mcp",
        "opentelemetry.exporter",
    )
    assert extras.needed(parse_config(BASE)) == {}
    assert extras.missing(parse_config(BASE)) == []


def test_each_setting_names_the_extra_it_needs_when_that_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    config = parse_config(
        {
            **BASE,
            "database": {"url": "postgresql+psycopg://u@127.0.0.1/db"},
            "console": {"address": "127.0.0.1:0"},
            "telemetry": {"otlp_endpoint": "http://127.0.0.1:4317"},
            "tools": {"mcp_servers": [{"name": "fs", "transport": "stdio", "command": "true"}]},
        }
    )
    assert set(extras.needed(config)) == {"postgres", "console", "otlp", "harness"}
    assert extras.missing(config) == []  # the workspace installs every extra
    _without(monkeypatch, "psycopg_pool", "sse_starlette", "mcp", "opentelemetry.exporter")
    lines = extras.missing(config)
    assert lines == [
        "database.url is a PostgreSQL URL: pip install 'langbot-agentrunner-host[postgres]' (psycopg_pool is not installed)",
        "an OTLP endpoint is set (telemetry.otlp_endpoint or OTEL_EXPORTER_OTLP_*): "
        "pip install 'langbot-agentrunner-host[otlp]' (opentelemetry.exporter.otlp.proto.grpc is not installed)",
        "console.address is set: pip install 'langbot-agentrunner-host[console]' (sse_starlette is not installed)",
        "tools.mcp_servers is not empty: pip install 'langbot-agentrunner-host[harness]' (mcp is not installed)",
    ]


def test_serve_refuses_a_config_whose_extra_is_missing(tmp_path: pathlib.Path) -> None:
    """Through the CLI, in a process where the console's packages cannot be imported."""
    config = tmp_path / "host.yaml"
    config.write_text(
        "database: {url: 'sqlite+aiosqlite:///%s'}\nconsole: {address: 127.0.0.1:0}\n" % (tmp_path / "h.db")
    )
    hide = tmp_path / "hide"
    hide.mkdir()
    # a meta path finder that hides starlette: what an installation without the console extra sees
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('starlette', 'sse_starlette'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(hide), "COLUMNS": "300"}
    out = subprocess.run(
        [sys.executable, "-m", "agentrunner_host", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 3, out.stderr
    assert out.stderr.strip() == (
        "refusing to serve: console.address is set: pip install 'langbot-agentrunner-host[console]' "
        "(starlette is not installed)"
    )


def test_config_init_writes_the_examples_and_refuses_to_overwrite(tmp_path: pathlib.Path) -> None:
    written = write_examples(tmp_path)
    names = sorted(str(p.relative_to(tmp_path)) for p in written)
    assert "examples/host.yaml" in names and "examples/knowledge/onboarding.md" in names
    assert (tmp_path / "examples" / "host.yaml").read_text() == (ROOT / "examples" / "host.yaml").read_text()
    with pytest.raises(FileExistsError, match=r"host\.yaml exists"):
        write_examples(tmp_path)
