"""Fixtures of the claude-code suite: the fake `claude` installed in a temp bin, workspace roots and the
fake's logs in temp dirs (parallel-safe), and a host double per test."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agentrunner.testing import HostDouble
from agentrunner_runners.claude_code import ClaudeCodeRunner
from agentrunner_runners.testing import install_fake


@dataclass
class Fake:
    bin: Path
    claude: Path
    root: Path
    log: Path
    home: Path

    def invocations(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def config(self, **extra: Any) -> dict[str, Any]:
        return {
            "command": str(self.claude),
            "workspace": str(self.root),
            "enable-langbot-mcp": False,
            **extra,
        }


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    bin_dir = tmp_path / "bin"
    claude = install_fake(bin_dir, "claude")
    root = tmp_path / "workspaces"
    log = tmp_path / "claude.log"
    home = tmp_path / "claude-home"
    monkeypatch.setenv("AGENTRUNNER_HARNESS_ROOTS", str(root))
    monkeypatch.setenv("FAKE_CLAUDE_LOG", str(log))
    monkeypatch.setenv("FAKE_CLAUDE_HOME", str(home))
    monkeypatch.setenv("AGENTRUNNER_HARNESS_ENV_PASSTHROUGH", "FAKE_CLAUDE_LOG,FAKE_CLAUDE_HOME")
    return Fake(bin_dir, claude, root, log, home)


@pytest_asyncio.fixture
async def host() -> AsyncIterator[HostDouble]:
    async with HostDouble(heartbeat_interval=0.1) as double:
        yield double


async def run(
    host: HostDouble, fake: Fake, text: str, *, config: dict[str, Any] | None = None, **kwargs: Any
) -> Any:
    kwargs.setdefault("timeout", 60)
    return await host.run(ClaudeCodeRunner, text, config=fake.config(**(config or {})), **kwargs)
