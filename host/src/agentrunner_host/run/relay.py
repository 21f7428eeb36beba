"""The run path's side of a fleet (`fleet/`): what other replicas ask of the runs open here, and how
this replica asks them about theirs.

Inbound (handlers on the fleet bus, each the same code path a client of this replica takes):
`cancel` (`RunService.cancel_run`: the control stream's cancel signal, then the runner call cancelled
after the grace, the ledger's cancel request), `append` (`AppendRunResult` through the run's own read
loop), `steer` (new input queued into a steerable run, answering the sequence its follower starts
after), `watch` (a follower on another replica: it is woken each time this replica commits something
of the run).

Outbound: the same operations for a run whose ledger row names another replica as its owner, and
`steerable_elsewhere` (an event for a conversation whose steerable run is open on another replica).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol

import structlog

from agentrunner.errors import AgentRunnerError
from agentrunner.v1 import host_service_pb2, result_pb2
from agentrunner_host.fleet.routing import Fleet
from agentrunner_host.ports import TERMINAL_STATUSES, RunLedger, RunRecord
from agentrunner_host.run.steering import Steerable

log = structlog.get_logger("agentrunner_host.run")

#: `AppendRunResult`'s three answers as they cross the fleet (`_encode_append`)
_NOT_OPEN, _DROPPED, _STORED = b"", b"\x00", b"\x01"


class LocalRuns(Protocol):
    """What the relay uses of `run.service.RunService` (a protocol: the service imports this module)."""

    async def cancel_run(self, run_id: str, reason: str = "") -> RunRecord: ...

    async def append_to_open_run(
        self, run_id: str, result: result_pb2.RunResult
    ) -> result_pb2.RunResult | bool | None: ...

    async def steer(self, run_id: str, event: host_service_pb2.EventEnvelope) -> str | None: ...

    def open_run(self, run_id: str) -> Steerable | None: ...


def _encode_append(joined: result_pb2.RunResult | bool | None) -> bytes:
    if joined is None:
        return _DROPPED
    if isinstance(joined, result_pb2.RunResult):
        return _STORED + joined.SerializeToString()
    return _NOT_OPEN


def _decode_append(data: bytes) -> result_pb2.RunResult | bool | None:
    if data[:1] == _STORED:
        return result_pb2.RunResult.FromString(data[1:])
    return None if data == _DROPPED else False


class RunRelay:
    """See the module docstring. `stored(run_id)` is called for every commit of a run open here."""

    def __init__(self, runs: LocalRuns, fleet: Fleet, ledger: RunLedger) -> None:
        self.runs = runs
        self.fleet = fleet
        self.ledger = ledger
        #: run id -> the replicas following it (woken at each commit of the run)
        self.watchers: dict[str, set[str]] = {}
        bus = fleet.bus
        bus.handle("cancel", self._on_cancel)
        bus.handle("append", self._on_append)
        bus.handle("steer", self._on_steer)
        bus.handle("watch", self._on_watch)

    # -- inbound ---------------------------------------------------------------------------------------
    async def _on_cancel(self, origin: str, run_id: str, body: bytes) -> bytes:
        await self.runs.cancel_run(run_id, body.decode())
        return b""

    async def _on_append(self, origin: str, run_id: str, body: bytes) -> bytes:
        return _encode_append(
            await self.runs.append_to_open_run(run_id, result_pb2.RunResult.FromString(body))
        )

    async def _on_steer(self, origin: str, run_id: str, body: bytes) -> bytes:
        """Steers the event into the run if it is open here and still takes steering; the sequence its
        caller follows after (empty: it does not, start a run of its own)."""
        run = self.runs.open_run(run_id)
        if run is None or not run.steerable():
            return b""
        after = run.last_sequence()
        await self.runs.steer(run_id, host_service_pb2.EventEnvelope.FromString(body))
        return str(after).encode()

    async def _on_watch(self, origin: str, run_id: str, body: bytes) -> bytes:
        if self.runs.open_run(run_id) is not None:
            self.watchers.setdefault(run_id, set()).add(origin)
        return b""

    def stored(self, run_id: str) -> None:
        """Something of the run was committed: its followers on other replicas read the ledger again."""
        for replica in self.watchers.get(run_id, ()):
            task = asyncio.get_running_loop().create_task(self._wake(replica, run_id))
            task.add_done_callback(_quiet)

    def forget(self, run_id: str) -> None:
        """The run left this replica: a last wake-up, then no more watchers."""
        if run_id in self.watchers:
            self.stored(run_id)
            del self.watchers[run_id]

    async def _wake(self, replica: str, run_id: str) -> None:
        await self.fleet.bus.wake(replica, run_id)

    # -- outbound --------------------------------------------------------------------------------------
    async def cancel(self, record: RunRecord, reason: str) -> None:
        await self.fleet.call(record, "cancel", reason.encode())

    async def append(
        self, record: RunRecord, result: result_pb2.RunResult
    ) -> result_pb2.RunResult | bool | None:
        return _decode_append(await self.fleet.call(record, "append", result.SerializeToString()))

    async def steerable_elsewhere(
        self, event: host_service_pb2.EventEnvelope, agent_id: str
    ) -> tuple[str, int] | None:
        """Steers `event` into an open run of its conversation, thread and agent on another replica, if
        one takes it: (its run id, the sequence to follow after); None: start a run here."""
        conv = event.conversation
        if not conv.conversation_id or not self.fleet.has_peers():
            return None
        for record in await self.ledger.open_runs_in(conv.conversation_id, conv.thread_id, agent_id):
            if not self.fleet.elsewhere(record):
                continue
            try:
                answer = await self.fleet.call(record, "steer", event.SerializeToString())
            except AgentRunnerError as exc:  # that replica is gone or busy: the event starts a run here
                log.warning("run.steer_elsewhere_failed", run_id=record.run_id, error=exc.message)
                continue
            if answer:
                return record.run_id, int(answer)
        return None

    @contextlib.asynccontextmanager
    async def tail(self, record: RunRecord) -> AsyncIterator[asyncio.Event | None]:
        """For a follower of a run open on another replica: an event set whenever that replica commits
        something of the run (None for a run not open elsewhere). The watch is registered in the
        background: the follower reads the ledger at once and polls meanwhile."""
        if not self.fleet.elsewhere(record) or record.status in TERMINAL_STATUSES:
            yield None
            return
        bus = self.fleet.bus
        event = bus.subscribe(record.run_id)
        watch = asyncio.create_task(bus.send(record.owner, "watch", record.run_id))
        watch.add_done_callback(_quiet)
        try:
            yield event
        finally:
            bus.unsubscribe(record.run_id, event)


def _quiet(task: asyncio.Task[None]) -> None:
    """A wake-up or watch that failed is only a slower follower (it polls): logged, never raised."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("fleet.wake_failed", error=repr(task.exception())[:200])
