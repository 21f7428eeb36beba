"""An in-process host (`HostApp` on port 0, SQLite in a temp dir) and in-process runtimes (the SDK's
`Runtime` on the same event loop), for the runtime registry's own tests. The process-level suites
(`test_processes.py`, `test_netns.py`, ...) start everything as separate processes instead."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import pathlib
import shutil
from typing import Any

import grpc

from agentrunner.runtime import Runtime, RuntimeOptions
from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from agentrunner_host.config.model import HostEnv, parse_config
from agentrunner_host.server.app import HostApp
from agentrunner_host.store.migrate import upgrade
from agentrunner_runners.reference import ReferenceRunner

REFERENCE_ID = "plugin:langbot/reference/default"
KEY_A, KEY_B = "rt-key-a", "rt-key-b"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def host_config(tmp: pathlib.Path, **overrides: Any) -> dict[str, Any]:
    url = f"sqlite+aiosqlite:///{tmp / 'host.db'}"
    config: dict[str, Any] = {
        "instance_id": "host-1",
        "listen": {"address": "127.0.0.1:0"},
        "database": {"url": url, "artifact_dir": str(tmp / "artifacts")},
        "limits": {"cancel_grace_seconds": 0.3},
        "runtimes": {
            "heartbeat_interval_seconds": 0.2,
            "offline_after_seconds": 1.0,
            "clients": [
                {"id": "team-a", "api_key_sha256": [digest(KEY_A)], "runner_ids": [REFERENCE_ID]},
                {
                    "id": "team-b",
                    "api_key_sha256": [digest(KEY_B)],
                    "runner_ids": [REFERENCE_ID],
                    "labels": ["workspace=team-b", "gpu=*"],
                },
            ],
        },
        "agents": [
            {"id": "ref", "runner_id": REFERENCE_ID, "timeout_seconds": 20},
            {"id": "team-b-only", "runner_id": REFERENCE_ID, "runtime_selector": {"workspace": "team-b"}},
        ],
        "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "ref"}}],
    }
    config.update(overrides)
    return config


class Host:
    """An in-process host and a HostService stub to it."""

    def __init__(self, app: HostApp) -> None:
        self.app = app
        self.address = f"127.0.0.1:{app.port}"
        self.channel = grpc.aio.insecure_channel(self.address)
        self.stub = host_service_pb2_grpc.HostServiceStub(self.channel)

    @classmethod
    async def start(cls, tmp: pathlib.Path, template: pathlib.Path | None = None, **overrides: Any) -> Host:
        config = parse_config(host_config(tmp, **overrides), env=HostEnv())
        if template is not None:
            shutil.copy(template, tmp / "host.db")
        else:
            await asyncio.to_thread(upgrade, config.database.url)
        app = await HostApp.open(config)
        await app.start("127.0.0.1:0")
        return cls(app)

    async def stop(self) -> None:
        await self.channel.close()
        await self.app.stop(0.5)

    @property
    def runtimes(self) -> Any:
        assert self.app.runtimes is not None
        return self.app.runtimes

    def run_call(self, text: str, *, agent_id: str = "", conversation_id: str = "c1") -> Any:
        req = host_service_pb2.HostServiceRunRequest(agent_id=agent_id)
        req.event.event_type = "message.received"
        req.event.bot_id = "bot-1"
        req.event.conversation.conversation_id = conversation_id
        req.event.input.text = text
        req.event.delivery.supports_streaming = True
        return self.stub.Run(req, timeout=30)

    async def run(self, text: str, **kwargs: Any) -> list[host_service_pb2.HostServiceRunResponse]:
        return [u async for u in self.run_call(text, **kwargs)]


async def rest_of(call: Any) -> list[host_service_pb2.HostServiceRunResponse]:
    """What is left of a `Run` call read with `read()` so far."""
    out: list[host_service_pb2.HostServiceRunResponse] = []
    while True:
        update = await call.read()
        if update is grpc.aio.EOF:
            return out
        out.append(update)


def finished(updates: list[host_service_pb2.HostServiceRunResponse]) -> host_service_pb2.RunFinished:
    return next(u.finished for u in updates if u.HasField("finished"))


def failure(updates: list[host_service_pb2.HostServiceRunResponse]) -> Any:
    return next(
        u.result.run_failed for u in updates if u.HasField("result") and u.result.HasField("run_failed")
    )


class LocalRuntime:
    """An SDK runtime on this event loop (the reference runner), running until `stop()`."""

    def __init__(self, address: str, runtime_id: str, key: str = KEY_A, **options: Any) -> None:
        opts = RuntimeOptions(address=address, runtime_id=runtime_id, key=key, detect=[], **options)
        self.runtime = Runtime([ReferenceRunner], opts)
        self.task: asyncio.Task[None] = asyncio.create_task(self.runtime.run())

    async def stop(self) -> None:
        self.runtime.stop()
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task


async def until(predicate: Any, limit: float = 10.0, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + limit
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def connected(host: Host, runtime_id: str, slots: int = 1) -> None:
    """Waits until the runtime is connected with `slots` waiting slot streams."""

    def ready() -> bool:
        conn = host.runtimes.by_runtime.get(runtime_id)
        return conn is not None and conn.free() >= slots

    await until(ready, what=f"runtime {runtime_id} connected with {slots} free slots")
