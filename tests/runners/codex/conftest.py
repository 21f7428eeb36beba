"""Fixtures of the codex suite: the fake `codex` installed in a temp bin, workspace roots, the user's
codex home and the fake's log in temp dirs (parallel-safe), and a host double per test."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agentrunner.testing import HostDouble
from agentrunner_runners.codex import CodexRunner
from agentrunner_runners.testing import install_fake


@dataclass
class Fake:
    codex: Path
    root: Path
    log: Path
    home: Path
    transport: str = "app-server"

    def invocations(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def config(self, **extra: Any) -> dict[str, Any]:
        return {
            "command": str(self.codex),
            "workspace": str(self.root),
            "codex-home": str(self.home),
            "enable-langbot-mcp": False,
            "transport": self.transport,
            **extra,
        }


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    codex = install_fake(tmp_path / "bin", "codex")
    root, log, home = tmp_path / "workspaces", tmp_path / "codex.log", tmp_path / "codex-home"
    home.mkdir()
    (home / "auth.json").write_text('{"OPENAI_API_KEY": null, "tokens": {"id_token": "x"}}')
    (home / "config.toml").write_text('model = "gpt-fake"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n')
    monkeypatch.setenv("AGENTRUNNER_HARNESS_ROOTS", str(root))
    monkeypatch.setenv("FAKE_CODEX_LOG", str(log))
    monkeypatch.setenv("AGENTRUNNER_HARNESS_ENV_PASSTHROUGH", "FAKE_CODEX_LOG")
    return Fake(codex, root, log, home)


@pytest_asyncio.fixture
async def host() -> AsyncIterator[HostDouble]:
    async with HostDouble(heartbeat_interval=0.1) as double:
        yield double


async def run(
    host: HostDouble, fake: Fake, text: str, *, config: dict[str, Any] | None = None, **kwargs: Any
) -> Any:
    kwargs.setdefault("timeout", 60)
    return await host.run(CodexRunner, text, config=fake.config(**(config or {})), **kwargs)
