"""The fleet suite's parts: a PostgreSQL cluster of its own (stopped and started by a test), the fleet
runner as its own process, and host replicas as `agentrunner-host serve` processes on fixed ports (so a
replica can advertise another one's address to its runners: every proxy call and control stream of its
runs then reaches that other replica, as a load balancer in front would have them do)."""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
import time
from typing import TYPE_CHECKING, Any

import grpc

from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from tests.hardening.conftest import OwnPostgres, Proc

if TYPE_CHECKING:
    from agentrunner.v1.host_service_pb2_grpc import HostServiceAsyncStub

HERE = pathlib.Path(__file__).parent
RUNNER_ID = "plugin:test/fleet/default"
#: the fleet's timing in these tests: lost replicas are taken over within LEASE + SWEEP seconds
LEASE, POLL, SWEEP = 3.0, 0.5, 0.25


def free_port() -> int:
    from tests.conftest import _free_port

    return _free_port()


def start_runner(tmp: pathlib.Path) -> Proc:
    return Proc(
        [sys.executable, "-m", "agentrunner", "serve", "tests.fleet.fleet_runner:FleetRunner", "--port", "0"],
        "AGENTRUNNER_LISTENING",
        env={"FLEET_RUNNER_LOG": str(tmp / "runner.jsonl")},
        log=tmp / "runner.err",
    )


def runner_runs(tmp: pathlib.Path) -> list[dict[str, Any]]:
    path = tmp / "runner.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def runner_run(tmp: pathlib.Path, run_id: str, wait: float = 20) -> dict[str, Any]:
    """What the runner reported of run `run_id` (its token, its proxy endpoint)."""
    until = time.monotonic() + wait
    while time.monotonic() < until:
        for entry in runner_runs(tmp):
            if entry["run_id"] == run_id:
                return entry
        await asyncio.sleep(0.05)
    raise AssertionError(f"the runner never reported run {run_id}")


def replica_config(name: str, port: int, url: str, runner: str, advertise: str | None) -> dict[str, Any]:
    return {
        "instance_id": name,
        "listen": {"address": f"127.0.0.1:{port}", **({"advertise_address": advertise} if advertise else {})},
        "database": {"url": url, "artifact_dir": "artifacts"},
        "fleet": {"lease_seconds": LEASE, "poll_seconds": POLL, "sweep_seconds": SWEEP},
        "registry": {"retry_interval_seconds": 0.3, "describe_timeout_seconds": 3},
        "limits": {"cancel_grace_seconds": 3.0, "post_terminal_drain_seconds": 0.2},
        "runners": [{"id": "fleet", "address": runner}],
        "agents": [
            {
                "id": "fleet-agent",
                "runner_id": RUNNER_ID,
                "event_types": ["*"],
                "timeout_seconds": 120,
                "resource_policy": {
                    "steering": True,
                    "runs": ["get", "list", "events_page", "cancel", "append_result", "finalize"],
                    "platform_actions": ["send_message"],
                },
            }
        ],
        "bindings": [{"id": "all", "event": "*", "target": {"agent": "fleet-agent"}}],
    }


#: the runtime key of `runtime_replica_config`'s runtime client, and the runtime's runner
RUNTIME_KEY = "fleet-runtime-key"
RUNTIME_TARGET = "tests.fleet.fleet_runner:FleetRunner"


def runtime_replica_config(name: str, port: int, url: str) -> dict[str, Any]:
    """A replica whose runs go to runtimes only (the fleet runner, connected with `RUNTIME_KEY`)."""
    import hashlib

    config = replica_config(name, port, url, "127.0.0.1:1", None)
    del config["runners"]
    # (heartbeats reach the database in batches; on a loaded machine a tighter bound makes other
    # replicas skip a live runtime as stale)
    config["runtimes"] = {
        "heartbeat_interval_seconds": 1.0,
        "offline_after_seconds": 5.0,
        "clients": [
            {"id": "fleet", "api_key_sha256": [hashlib.sha256(RUNTIME_KEY.encode()).hexdigest()],
             "runner_ids": [RUNNER_ID]}
        ],
    }  # fmt: skip
    return config


class Replica(Proc):
    """`agentrunner-host serve` for one replica (its config and stderr under `tmp/<name>/`)."""

    def __init__(self, tmp: pathlib.Path, name: str, config: dict[str, Any]) -> None:
        import yaml

        self.name, self.config = name, config
        self.dir = tmp / name
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / "host.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        super().__init__(
            [sys.executable, "-m", "agentrunner_host", "serve", "--config", str(path), "--log-level", "INFO"],
            "AGENTRUNNER_HOST_LISTENING",
            log=self.dir / "host.err",
        )

    def channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(self.address)

    def stub(self, channel: grpc.aio.Channel) -> HostServiceAsyncStub:
        return host_service_pb2_grpc.HostServiceStub(channel)


class Fleet:
    """Three replicas (`a`, `b`, `c`) and one runner on one PostgreSQL database. Replica `a` advertises
    replica `b`'s address: its runs' proxy calls and control streams all reach `b`."""

    def __init__(self, tmp: pathlib.Path, pg: OwnPostgres, url: str) -> None:
        self.tmp, self.pg, self.url = tmp, pg, url
        self.runner = start_runner(tmp)
        self.ports = {name: free_port() for name in "abc"}
        self.replicas: dict[str, Replica] = {}
        for name in "abc":
            self.start(name)

    def start(self, name: str) -> Replica:
        advertise = f"127.0.0.1:{self.ports['b']}" if name == "a" else None
        config = replica_config(name, self.ports[name], self.url, self.runner.address, advertise)
        replica = self.replicas[name] = Replica(self.tmp, name, config)
        return replica

    def __getitem__(self, name: str) -> Replica:
        return self.replicas[name]

    def live(self) -> list[str]:
        return [name for name, r in self.replicas.items() if r.alive()]

    def sql(self, query: str, **params: Any) -> list[Any]:
        from sqlalchemy import create_engine, text

        from agentrunner_host.store.db import sync_url

        engine = create_engine(sync_url(self.url))
        try:
            with engine.connect() as conn:
                return list(conn.execute(text(query), params).all())
        finally:
            engine.dispose()

    def close(self) -> None:
        for replica in self.replicas.values():
            replica.kill(15)
        self.runner.kill()


def run_request(
    text: str, conversation_id: str, event_id: str = "", thread_id: str = ""
) -> host_service_pb2.HostServiceRunRequest:
    req = host_service_pb2.HostServiceRunRequest()
    ev = req.event
    ev.event_id = event_id
    ev.bot_id = "bot-1"
    ev.conversation.conversation_id = conversation_id
    ev.conversation.thread_id = thread_id
    ev.input.text = text
    ev.delivery.supports_streaming = True
    ev.delivery.interactions.SetInParent()
    return req


def sequences(updates: list[Any]) -> list[int]:
    return [u.result.sequence for u in updates if u.HasField("result")]


def db_check(url: str, live: list[str]) -> Any:
    """`agentrunner-host db check` as the CLI runs it (its exit code and output)."""
    import subprocess

    return subprocess.run(
        [sys.executable, "-m", "agentrunner_host", "db", "check", "--database-url", url,
         *[arg for name in live for arg in ("--live", name)]],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


async def next_item(call: Any) -> host_service_pb2.HostServiceRunResponse:
    """The next item of a run stream (the stream must not have ended)."""
    item = await call.read()
    assert isinstance(item, host_service_pb2.HostServiceRunResponse), item
    return item


async def read_rest(call: Any) -> list[Any]:
    """The rest of a server stream read with `read()` (grpc.aio does not mix it with iteration)."""
    out: list[Any] = []
    while True:
        item = await call.read()
        if item is grpc.aio.EOF:
            return out
        out.append(item)
