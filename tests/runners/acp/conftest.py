"""Fixtures of the acp suite: the scripted ACP agent (`fake_acp`, a real subprocess) as a custom
provider, workspace roots, its session store and its log in temp dirs (parallel-safe), a host double."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import pytest_asyncio

from agentrunner.testing import HostDouble
from agentrunner_runners.acp import AcpRunner
from agentrunner_runners.testing import install_fake


@dataclass
class Fake:
    agent: Path
    root: Path
    log: Path

    def invocations(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def config(self, **extra: Any) -> dict[str, Any]:
        return {
            "provider": "custom",
            "acp-command": str(self.agent),
            "workspace": str(self.root),
            "enable-langbot-mcp": False,
            **extra,
        }


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    agent = install_fake(tmp_path / "bin", "acp", as_name="fake-acp")
    root, log = tmp_path / "workspaces", tmp_path / "acp.log"
    monkeypatch.setenv("AGENTRUNNER_HARNESS_ROOTS", str(root))
    monkeypatch.setenv("FAKE_ACP_LOG", str(log))
    monkeypatch.setenv("FAKE_ACP_HOME", str(tmp_path / "sessions"))
    monkeypatch.setenv("AGENTRUNNER_HARNESS_ENV_PASSTHROUGH", "FAKE_ACP_LOG,FAKE_ACP_HOME")
    return Fake(agent, root, log)


@pytest_asyncio.fixture
async def host() -> AsyncIterator[HostDouble]:
    async with HostDouble(heartbeat_interval=0.1) as double:
        yield double


async def run(
    host: HostDouble, fake: Fake, text: str, *, config: dict[str, Any] | None = None, **kwargs: Any
) -> Any:
    kwargs.setdefault("timeout", 60)
    return await host.run(AcpRunner, text, config=fake.config(**(config or {})), **kwargs)


def processes_in(directory: Path) -> list[psutil.Process]:
    """Live processes whose working directory lies under `directory`."""
    out = []
    for p in psutil.process_iter(["status", "cwd"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and str(directory) in (p.info["cwd"] or ""):
                out.append(p)
        except psutil.Error:
            continue
    return out
