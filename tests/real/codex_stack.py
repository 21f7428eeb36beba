"""The stack the real-Codex suite drives: the OpenAI Responses mock (in a thread of the test process),
the codex runner as its own process (SDK CLI, its log in a file), the host (CLI `serve`, SQLite), and
the real `codex` binary of `.ci/install-real-tools codex`, started by the runner for every turn.

Agents (one per way the runner is configured; a test picks one with `agent=`):
`app-server` / `exec` the defaults a user gets (only the transport chosen), `app-server-stdio` the stdio
MCP bridge, `*-fast` a user whose model provider retries once (an upstream 500 fails in seconds, not
Codex's default ~27 s), `tmp-cross-writes` a workspace root under `/tmp` with `exclude_slash_tmp` off.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psutil

from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from agentrunner_runners.testing.openai_responses_mock import ResponsesMock, codex_config
from tests.integration.conftest import CLI, ROOT, Proc, cli, run_request, write_config

CODEX = "agentrunner_runners.codex:CodexRunner"
CODEX_ID = "plugin:langbot/codex-agent/default"
API_KEY = "sk-mock-openai-key-that-must-not-leak-0123456789"
HOST_SECRET = "sk-host-secret-that-must-not-leak-123456"


@dataclass
class Stack:
    address: str
    db_file: Path
    root: Path
    tmp_root: Path
    mock: ResponsesMock
    runner: subprocess.Popen[bytes]
    runner_log: Path

    async def run(
        self, text: str, conversation: str, *, agent: str = "app-server"
    ) -> list[host_service_pb2.HostServiceRunResponse]:
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            return [u async for u in stub.Run(request(text, conversation, agent), timeout=90)]

    def stored_text(self, run_id: str) -> str:
        """Everything the host stored for a run (events, transcript items), as one text."""
        with contextlib.closing(sqlite3.connect(self.db_file)) as conn:
            rows = conn.execute("SELECT data FROM event_log WHERE run_id = ?", (run_id,)).fetchall()
            rows += conn.execute(
                "SELECT content FROM transcript_items WHERE run_id = ?", (run_id,)
            ).fetchall()
        return "\n".join(str(r[0]) for r in rows)

    def listening_ports(self) -> set[int]:
        """The TCP ports the runner process listens on (its gRPC port, and a run's HTTP MCP bridge)."""
        conns = psutil.Process(self.runner.pid).net_connections("tcp")
        return {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}


def request(text: str, conversation: str, agent: str) -> host_service_pb2.HostServiceRunRequest:
    req = run_request(text, conversation_id=conversation)
    req.agent_id = agent
    return req


def codex_processes(*roots: Path) -> list[psutil.Process]:
    """Live processes working in (or with a `CODEX_HOME` in) a workspace under one of `roots`: Codex,
    the commands it runs, the MCP servers it starts."""
    found = []
    for p in psutil.process_iter(["cwd", "status", "environ"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            where = (p.info["cwd"] or "", (p.info["environ"] or {}).get("CODEX_HOME", ""))
            if any(str(root) in place for root in roots for place in where):
                found.append(p)
        except psutil.Error:
            continue
    return found


def start_runner(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The runner process, its output (log lines included) in `log`; returns it and its address."""
    argv = [sys.executable, "-m", "agentrunner", "serve", CODEX, "--host", "127.0.0.1", "--port", "0"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}
        )
    end = time.monotonic() + 120
    while time.monotonic() < end:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("AGENTRUNNER_LISTENING"):
                return proc, line.split()[1]
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the codex runner did not start: {log.read_text(errors='replace')[-2000:]}")


def _agents(base: dict[str, Any], fast_home: Path, tmp_root: Path) -> list[dict[str, Any]]:
    def agent(agent_id: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": agent_id,
            "runner_id": CODEX_ID,
            "runner_config": {**base, **extra},
            "resource_policy": {"tools": ["current_time"], "steering": True},
            "timeout_seconds": 150,
        }

    cross = {"config-overrides-json": json.dumps({"sandbox_workspace_write.exclude_slash_tmp": False})}
    return [
        agent("app-server"),
        agent("exec", transport="exec"),
        agent("app-server-stdio", **{"mcp-bridge-transport": "stdio"}),
        agent("app-server-fast", **{"codex-home": str(fast_home)}),
        agent("exec-fast", transport="exec", **{"codex-home": str(fast_home)}),
        agent("tmp-cross-writes", workspace=str(tmp_root), **cross),
    ]


def start_stack(tmp: Path, codex: Path, mock: ResponsesMock) -> Iterator[Stack]:
    """Starts runner and host; yields the `Stack`; stops them."""
    root = tmp / "workspaces"
    home = codex_config(tmp / "codex-home", mock.url("/v1"))  # Codex's default retries
    fast_home = codex_config(tmp / "codex-home-fast", mock.url("/v1"), retries=1)
    tmp_root = Path(tempfile.mkdtemp(prefix="codex-real-", dir="/tmp"))
    env = {
        "AGENTRUNNER_HARNESS_ROOTS": os.pathsep.join([str(root), str(tmp_root)]),
        "OPENAI_API_KEY": API_KEY,
        "HOST_ONLY_SECRET": HOST_SECRET,
    }
    runner_log = tmp / "runner.log"
    runner, address = start_runner(env, runner_log)
    host: Proc | None = None
    try:
        db_file = tmp / "host.db"
        base = {"command": str(codex), "workspace": str(root), "codex-home": str(home), "timeout": 120}
        config = write_config(
            tmp / "host.yaml",
            {
                "instance_id": "codex-real",
                "listen": {"address": "127.0.0.1:0"},
                "database": {"url": f"sqlite+aiosqlite:///{db_file}", "artifact_dir": str(tmp / "artifacts")},
                "limits": {"cancel_grace_seconds": 5},
                "runners": [{"id": "codex", "address": address}],
                "agents": _agents(base, fast_home, tmp_root),
                "bindings": [{"id": "default", "event": "message.*", "target": {"agent": "app-server"}}],
            },
        )
        upgraded = cli("db", "upgrade", "--config", str(config))
        assert upgraded.returncode == 0, upgraded.stderr
        # (a busy machine can take a while to import the host)
        host = Proc(
            [*CLI, "serve", "--config", str(config), "--log-level", "WARNING"],
            "AGENTRUNNER_HOST_LISTENING",
            timeout=120,
        )
        yield Stack(host.value, db_file, root, tmp_root, mock, runner, runner_log)
    finally:
        if host is not None:
            host.kill()
        runner.send_signal(signal.SIGTERM)
        try:
            runner.wait(10)
        except subprocess.TimeoutExpired:
            runner.kill()
        subprocess.run(["rm", "-rf", str(tmp_root)], check=False)
