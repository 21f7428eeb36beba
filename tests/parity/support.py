"""Helpers of the host parity suite: the runner process, an in-process host on port 0 (migrated SQLite
copied from a per-process template), request builders and stream readers."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc

from agentrunner.v1 import common_pb2, context_pb2, host_service_pb2, host_service_pb2_grpc
from agentrunner_host.config.model import parse_config
from agentrunner_host.server.app import HostApp

ROOT = Path(__file__).resolve().parents[2]
RUNNER = "tests.parity.parity_host_runner:ParityHostRunner"
RUNNER_ID = "plugin:test/parity-host/default"
CLI = [sys.executable, "-m", "agentrunner_host"]
Update = host_service_pb2.HostServiceRunResponse


class Proc:
    """A child process that printed `<marker> <value>` when ready."""

    def __init__(self, args: list[str], marker: str, timeout: float = 30) -> None:
        self.popen = subprocess.Popen(
            args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(os.environ)
        )
        assert self.popen.stdout is not None
        ready, _, _ = select.select([self.popen.stdout], [], [], timeout)
        line = self.popen.stdout.readline() if ready else ""
        if not line.startswith(marker):
            self.kill()
            raise RuntimeError(f"{args[2:5]} did not start: {line!r}")
        self.value = line.split()[1]

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=10)


def start_runner() -> Proc:
    return Proc(
        [sys.executable, "-m", "agentrunner", "serve", RUNNER, "--host", "127.0.0.1", "--port", "0"],
        "AGENTRUNNER_LISTENING",
    )


def host_config(runner_address: str, database: dict[str, Any]) -> dict[str, Any]:
    everything = ["get", "list", "events_page", "cancel", "append_result", "finalize"]
    return {
        "listen": {"address": "127.0.0.1:0"},
        "database": database,
        "registry": {
            "refresh_interval_seconds": 30,
            "retry_interval_seconds": 0.3,
            "describe_timeout_seconds": 5,
        },
        "limits": {"cancel_grace_seconds": 0.3, "post_terminal_drain_seconds": 0.2},
        "runners": [{"id": "parity", "address": runner_address}],
        "tools": {"native": {}},
        "agents": [
            {
                "id": "parity",
                "runner_id": RUNNER_ID,
                "resource_policy": {
                    "tools": ["current_time"],
                    "platform_actions": ["send_message", "group.mute"],
                },
                "event_types": ["*"],
                "timeout_seconds": 30,
                "skills": [{"name": "summarize", "description": "Summaries"}],
            },
            {
                "id": "parity-grant",
                "runner_id": RUNNER_ID,
                "resource_policy": {"runs": everything},
                "event_types": ["*"],
                "timeout_seconds": 30,
                "variables": {"region": "eu", "order_id": 2, "db_token": "pinned-secret"},
            },
        ],
        "bindings": [
            {"id": "messages", "event": "message.*", "target": {"agent": "parity"}},
            {"id": "answers", "event": "interaction.submitted", "target": {"agent": "parity"}},
            {"id": "schedules", "event": "schedule.*", "target": {"agent": "parity"}},
            {
                "id": "unanswered",
                "scope": {"type": "conversation", "id": "no-answers"},
                "event": "interaction.submitted",
                "target": {"discard": True},
            },
        ],
    }


FULL_CAPS = context_pb2.DeliveryContext(
    supports_streaming=True,
    interactions=common_pb2.InteractionCapabilities(
        field_types=[t for t in common_pb2.InteractionFieldType.values() if t],
        action_styles=[s for s in common_pb2.InteractionActionStyle.values() if s],
        supports_updates=True,
    ),
)


def run_request(
    text: str,
    *,
    conversation_id: str = "conv-1",
    event_id: str = "",
    agent_id: str = "",
    event_type: str = "message.received",
    streaming: bool = True,
    interactions: bool = True,
    variables: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
) -> host_service_pb2.HostServiceRunRequest:
    req = host_service_pb2.HostServiceRunRequest(agent_id=agent_id)
    ev = req.event
    ev.event_id = event_id
    ev.event_type = event_type
    ev.bot_id = "bot-1"
    if conversation_id:
        ev.conversation.conversation_id = conversation_id
    ev.actor.actor_type = "user"
    ev.actor.actor_id = "user-1"
    ev.input.text = text
    if interactions:
        ev.delivery.CopyFrom(FULL_CAPS)
    ev.delivery.supports_streaming = streaming
    if variables is not None:
        ev.variables.update(variables)
    if data is not None:
        ev.data.update(data)
    return req


class Host:
    def __init__(self, app: HostApp) -> None:
        self.app = app
        self.address = f"127.0.0.1:{app.port}"
        self.channel = grpc.aio.insecure_channel(self.address)
        self.stub = host_service_pb2_grpc.HostServiceStub(self.channel)

    async def run(self, text: str, **kwargs: Any) -> list[Update]:
        return [u async for u in self.stub.Run(run_request(text, **kwargs), timeout=30)]

    async def submit(self, interaction_id: str, **kwargs: Any) -> list[Any]:
        values = kwargs.pop("values", None)
        req = host_service_pb2.SubmitInteractionRequest(interaction_id=interaction_id, **kwargs)
        if values is not None:
            req.values.update(values)
        return [u async for u in self.stub.SubmitInteraction(req, timeout=30)]

    async def attach(self, run_id: str, after: int = 0) -> list[Any]:
        req = host_service_pb2.AttachRunRequest(run_id=run_id, after_sequence=after)
        return [u async for u in self.stub.AttachRun(req, timeout=30)]


async def open_host(runner_address: str, database: dict[str, Any]) -> Host:
    app = await HostApp.open(parse_config(host_config(runner_address, database)))
    await app.start("127.0.0.1:0")
    return Host(app)


def kinds(updates: list[Any]) -> list[str]:
    """`result:<payload>` / `reply:<MODE>` / `interaction` / `accepted` / `finished` per item."""
    out = []
    for u in updates:
        kind = u.WhichOneof("update")
        if kind == "result":
            out.append(f"result:{u.result.WhichOneof('payload')}")
        elif kind == "reply":
            out.append(f"reply:{common_pb2.ReplyMode.Name(u.reply.mode).removeprefix('REPLY_MODE_')}")
        else:
            out.append(kind)
    return out


def results_of(updates: list[Any]) -> list[Any]:
    return [u.result for u in updates if u.HasField("result")]


def replies_of(updates: list[Any]) -> list[Any]:
    return [u.reply for u in updates if u.HasField("reply")]


def finished(updates: list[Any]) -> Any:
    assert updates[-1].HasField("finished"), updates[-1]
    return updates[-1].finished


def completed_text(updates: list[Any]) -> str:
    for r in results_of(updates):
        if r.HasField("run_completed"):
            return r.run_completed.message.content
    raise AssertionError(f"no run.completed in {kinds(updates)}")
