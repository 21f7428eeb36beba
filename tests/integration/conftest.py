"""Integration fixtures: every part a separate process on loopback. The host is started through its
CLI (`db upgrade`, `kb ingest`, `serve`); runners with the SDK CLI; the OpenAI-compatible mock and the
MCP servers as their own processes."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "capabilities" / "corpus"
PROBE = "tests.integration.probe_runner:ProbeRunner"
PROBE_ID = "plugin:test/probe/default"
REFERENCE = "agentrunner_runners.reference:ReferenceRunner"
REFERENCE_ID = "plugin:langbot/reference/default"
CLI = [sys.executable, "-m", "agentrunner_host"]


class Proc:
    """A child process that printed `<marker> <address-or-port>` when ready."""

    def __init__(
        self, args: list[str], marker: str, env: dict[str, str] | None = None, timeout: float = 30
    ) -> None:
        self.args = args
        self.popen = subprocess.Popen(
            args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        assert self.popen.stdout is not None
        ready, _, _ = select.select([self.popen.stdout], [], [], timeout)
        line = self.popen.stdout.readline() if ready else ""
        if not line.startswith(marker):
            self.kill()
            raise RuntimeError(f"{args[2:5]} did not start: {line!r}")
        self.value = line.split()[1]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=5)


def start_runner(target: str) -> Proc:
    return Proc(
        [sys.executable, "-m", "agentrunner", "serve", target, "--host", "127.0.0.1", "--port", "0"],
        "AGENTRUNNER_LISTENING",
    )


def start_host(config: Path, env: dict[str, str] | None = None) -> Proc:
    return Proc(
        [*CLI, "serve", "--config", str(config), "--log-level", "WARNING"], "AGENTRUNNER_HOST_LISTENING", env
    )


def cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_request(
    text: str,
    *,
    conversation_id: str = "conv-1",
    event_id: str = "",
    attachments: list[dict[str, Any]] | None = None,
) -> host_service_pb2.HostServiceRunRequest:
    req = host_service_pb2.HostServiceRunRequest()
    ev = req.event
    ev.event_id = event_id
    ev.event_type = "message.received"
    ev.bot_id = "bot-1"
    ev.conversation.conversation_id = conversation_id
    ev.actor.actor_type = "user"
    ev.actor.actor_id = "user-1"
    ev.input.text = text
    for a in attachments or []:
        ev.input.attachments.add(**a)
    ev.delivery.supports_streaming = True
    return req


async def run(address: str, text: str, **kwargs: Any) -> list[host_service_pb2.HostServiceRunResponse]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        return [u async for u in stub.Run(run_request(text, **kwargs), timeout=60)]


def completed(
    updates: Sequence[host_service_pb2.HostServiceRunResponse | host_service_pb2.SubmitInteractionResponse],
) -> Any:
    for u in updates:
        if u.HasField("result") and u.result.HasField("run_completed"):
            return u.result.run_completed
    raise AssertionError(f"no run.completed in {updates}")


async def probe(address: str, steps: list[dict[str, Any]], **kwargs: Any) -> tuple[dict[str, Any], str]:
    """Runs the probe runner with `steps`; returns its report and the run id."""
    updates = await run(address, json.dumps(steps), **kwargs)
    return json.loads(completed(updates).message.content), updates[0].accepted.run_id


def audit_outcomes(db_file: Path, run_id: str, method: str) -> list[str]:
    with contextlib.closing(sqlite3.connect(db_file)) as conn:
        rows = conn.execute(
            "SELECT data FROM event_log WHERE kind = 'audit' AND run_id = ? AND event_type = ? ORDER BY seq",
            (run_id, method),
        ).fetchall()
    return [json.loads(r[0]).get("outcome", "") for r in rows]


def http_json(url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read() or b"null")


@pytest.fixture(scope="module")
def probe_runner() -> Iterator[Proc]:
    proc = start_runner(PROBE)
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def reference_runner() -> Iterator[Proc]:
    proc = start_runner(REFERENCE)
    yield proc
    proc.kill()
