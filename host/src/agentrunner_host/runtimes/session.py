"""One connected runtime (`RuntimeService.Connect` session): what it announced, its waiting slot streams,
its runs, and how the host ends the session."""

from __future__ import annotations

import asyncio
import secrets
import time

import grpc

from agentrunner.v1 import runtime_pb2, runtime_service_pb2
from agentrunner_host.ports import utcnow
from agentrunner_host.runtimes.calls import RuntimeCall, Slot
from agentrunner_host.runtimes.gate import RuntimeClient


class Connection:
    """One connected runtime: what it announced, its slots, its runs (see the module docstring)."""

    def __init__(self, hello: runtime_service_pb2.RuntimeHello, client: RuntimeClient, peer: str) -> None:
        self.id = secrets.token_hex(12)
        self.hello = hello
        self.runtime_id = hello.runtime_id
        self.instance_id = hello.instance_id
        self.client_id = client.client_id
        self.peer = peer
        self.labels = dict(hello.labels)
        self.slots = hello.slots
        self.manifests = {m.id: m for m in hello.runners}
        self.connected_at = utcnow()
        self.started = time.monotonic()
        self.last_beat = self.started
        self.last_placed = 0.0
        self.free_reported = hello.slots
        #: an operator drained it / it drains itself (shutting down)
        self.drained = False
        self.leaving = False
        self.alive = True
        self.waiting: list[Slot] = []
        self.running: dict[str, RuntimeCall] = {}
        #: host -> runtime messages (drain signals), written by the `Connect` handler
        self.outbox: asyncio.Queue[runtime_service_pb2.ConnectResponse] = asyncio.Queue()
        #: the host ends the session: (status, details, audit kind)
        self.closing: asyncio.Future[tuple[grpc.StatusCode, str, str]] = (
            asyncio.get_running_loop().create_future()
        )

    @property
    def accepting(self) -> bool:
        return self.alive and not self.drained and not self.leaving

    def pending(self) -> int:
        """Announced slots neither waiting nor running: their streams are on their way."""
        return max(0, self.slots - len(self.running) - self.free()) if self.accepting else 0

    def free(self) -> int:
        """Waiting slots (0 unless accepting)."""
        if not self.accepting:
            return 0
        self.waiting = [s for s in self.waiting if s.alive and not s.assigned.done()]
        return len(self.waiting)

    def give_back_slots(self) -> None:
        for slot in self.waiting:
            slot.give_back()
        self.waiting.clear()

    def close(self, code: grpc.StatusCode, details: str, kind: str) -> None:
        if not self.closing.done():
            self.closing.set_result((code, details, kind))

    def status(self) -> runtime_pb2.RuntimeStatus.ValueType:
        if not self.alive:
            return runtime_pb2.RUNTIME_STATUS_OFFLINE
        return runtime_pb2.RUNTIME_STATUS_ONLINE if self.accepting else runtime_pb2.RUNTIME_STATUS_DRAINING
