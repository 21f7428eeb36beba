"""Runs on runtimes connected to another replica (issue 36 item 3): a run lives where its runtime is.

A run of a runner that no endpoint or runtime of the replica the client reached (B) can take now, but a
runtime connected to another live replica (A) can (`runtimes/elsewhere.py`), is opened ON A: B hands A
the request through the fleet bus (`open`); A resolves the binding from its config (the fleet's replicas
share one), places the run on its runtime, records it with itself as the run's owner, drives it (the
runner call on the runtime's slot, validation, the journal) and answers the stream's first item. From
then on it is an ordinary run of A: cancel, steering, replies, interaction answers, `AppendRunResult`,
`AttachRun` reach A from any replica as they do for any run another replica holds. B relays the run to
its client as a follower of the shared ledger (gap-free; deltas in the batches A commits). A client that
leaves B before the run ended (even before its first item: the `RunStream` it returns) has A abandon it (`abandon`: it
ends `cancelled`, as any run whose client left). When the runtime disconnects the run fails on A (`runner.stream_broken`); when A is lost another
replica's takeover ends it `interrupted`: B's client sees either terminal. A replica that cannot take
the run after all (its runtime's slots filled meanwhile) refuses with `RUNNER_UNAVAILABLE`: B tries the
next replica, then starts the run itself (failing it `runner.unavailable` as a single host would, with
the refusals in its message: `Refusals`).

Each hand-over carries a token of its own (the `open` operation's key). When B stops waiting for the
answer (A slower than `fleet.call_timeout_seconds`: B's client gets UNAVAILABLE; or B's client left
meanwhile), B withdraws the token (`withdraw`): a run A opened for it is abandoned as above, and a
hand-over A has not opened yet is refused when it comes, so no run drives with nobody to read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from agentrunner.errors import RunnerUnavailableError
from agentrunner.v1 import host_service_pb2
from agentrunner_host.config.model import AgentConfig
from agentrunner_host.fleet.routing import Fleet
from agentrunner_host.ports import UpdateStream
from agentrunner_host.registry.endpoints import RunnerRegistry
from agentrunner_host.run.streams import RunStream

log = structlog.get_logger("agentrunner_host.run")

Update = host_service_pb2.HostServiceRunResponse
Request = host_service_pb2.HostServiceRunRequest

#: how long a replica remembers a hand-over withdrawn before it opened (far beyond any call timeout)
WITHDRAWN_KEEP_SECONDS = 600.0


@dataclass
class Refusals:
    """Every replica a run was handed to refused it (its runtime could not take the run after all)."""

    reasons: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """For the `runner.unavailable` failure of the run the client's replica then starts itself."""
        listed = "; ".join(f"{replica}: {why}" for replica, why in self.reasons.items())
        return f"the runtimes on host replicas {', '.join(self.reasons)} refused the run ({listed})"


class ForwardedRuns(Protocol):
    """What forwarding uses of `run.service.RunService` (a protocol: the service imports this module)."""

    async def open_here(self, request: Request) -> UpdateStream[Update]: ...

    def follow(
        self, run_id: str, after_sequence: int = 0, attached: bool = False
    ) -> AsyncGenerator[Update, None]: ...


class RunForwarding:
    """See the module docstring: `open` on the client's replica, the `open` / `abandon` handlers on the
    runtime's."""

    def __init__(self, runs: ForwardedRuns, fleet: Fleet, registry: RunnerRegistry) -> None:
        self.runs = runs
        self.fleet = fleet
        self.registry = registry
        #: runs other replicas opened here, driven by this replica (their clients follow elsewhere)
        self.driving: dict[str, asyncio.Task[None]] = {}
        #: hand-over token -> the run opened for it, while driven here
        self.handovers: dict[str, str] = {}
        #: hand-over tokens withdrawn before their run opened here (-> when, to forget them)
        self.withdrawn: dict[str, float] = {}
        self._sending: set[asyncio.Task[None]] = set()
        fleet.bus.handle("open", self._on_open)
        fleet.bus.handle("abandon", self._on_abandon)
        fleet.bus.handle("withdraw", self._on_withdraw)

    # -- the client's replica ------------------------------------------------------------------------
    async def replicas_for(self, agent: AgentConfig) -> list[str]:
        """The replicas to hand a run of `agent` to ([]: it starts here)."""
        runtimes = self.registry.runtimes
        if runtimes is None or not self.fleet.has_peers():
            return []
        runner_id, selector = agent.runner_id, dict(agent.runtime_selector)
        if not selector and self.registry.get(runner_id) is not None:
            return []  # (a dialed endpoint that is up comes first, as on one host)
        if await runtimes.takes(runner_id, selector):
            return []
        return await runtimes.elsewhere(runner_id, selector, set(self.fleet.replicas.live))

    async def open(
        self, request: Request, event_id: str, agent: AgentConfig
    ) -> UpdateStream[Update] | Refusals | None:
        """The run's stream when a replica whose runtime takes it opened it; else None (no replica to
        hand it to) or the `Refusals` of those tried: start it here. `event_id`: the event's id as this
        replica filled it in (a retry then finds the same run). Raises the hand-over's error (UNAVAILABLE
        when a replica did not answer in time), after withdrawing it."""
        replicas = await self.replicas_for(agent)
        if not replicas:
            return None
        forwarded = Request()
        forwarded.CopyFrom(request)
        forwarded.event.event_id = event_id
        body = forwarded.SerializeToString()
        refusals = Refusals()
        for replica in replicas:
            token = f"handover_{uuid.uuid4().hex}"
            try:
                answer = await self.fleet.bus.call(replica, "open", token, body)
            except RunnerUnavailableError as exc:  # its runtime's slots filled meanwhile: the next one
                log.info("run.forward_refused", replica=replica, event_id=event_id, reason=exc.message)
                refusals.reasons[replica] = exc.message
                continue
            except BaseException:  # no answer in time, or this client left: A must not drive it alone
                self._send(replica, "withdraw", token)
                raise
            first = Update.FromString(answer)
            log.info("run.forwarded", replica=replica, run_id=first.accepted.run_id, event_id=event_id)
            run_id = first.accepted.run_id
            abandon = None if first.accepted.attached else functools.partial(self._abandon, replica, run_id)
            return RunStream(self._relay(first, replica), abandon)
        return refusals

    async def _abandon(self, replica: str, run_id: str) -> None:
        """A relayed run's client left before its first item: A abandons the run (sent, not awaited)."""
        self._send(replica, "abandon", run_id)

    async def _relay(self, first: Update, replica: str) -> AsyncGenerator[Update, None]:
        """The run's stream on this replica: the first item A answered, then the ledger followed."""
        run_id, attached = first.accepted.run_id, first.accepted.attached
        ended = False
        try:
            yield first
            async for update in self.runs.follow(run_id, 0, attached=attached):
                if update.HasField("accepted"):
                    continue
                ended = ended or update.HasField("finished")
                yield update
        finally:
            if not ended and not attached:  # the client left: the run is abandoned where it runs
                self._send(replica, "abandon", run_id)

    def _send(self, replica: str, kind: str, key: str) -> None:
        task = asyncio.get_running_loop().create_task(self.fleet.bus.send(replica, kind, key))
        self._sending.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("run.forward_signal_failed", error=repr(task.exception())[:200])

    # -- the runtime's replica -----------------------------------------------------------------------
    async def _on_open(self, origin: str, token: str, body: bytes) -> bytes:
        """Opens the run here and drives it; answers its first item (`accepted`). A hand-over withdrawn
        before (or while) it opened leaves no run driving (see the module docstring)."""
        if token in self.withdrawn:
            raise RunnerUnavailableError(
                f"the hand-over from host replica {origin!r} was withdrawn before it opened",
                metadata={"replica": self.fleet.instance_id},
            )
        stream = await self.runs.open_here(Request.FromString(body))
        try:
            first = await anext(stream)
        except BaseException:
            await stream.aclose()
            raise
        run_id = first.accepted.run_id
        if first.accepted.attached or not run_id:  # (a retried event: its run, elsewhere)
            await stream.aclose()
        elif self.withdrawn.pop(token, None) is not None:  # nobody waits for it: it ends as abandoned
            log.info("run.forward_withdrawn", run_id=run_id, origin=origin)
            await stream.aclose()
        else:
            task = asyncio.create_task(self._drive(run_id, stream), name=f"forwarded-{run_id}")
            self.driving[run_id] = task
            self.handovers[token] = run_id
            task.add_done_callback(lambda _: self.handovers.pop(token, None))
        return bytes(first.SerializeToString())

    async def _drive(self, run_id: str, stream: UpdateStream[Update]) -> None:
        """Reads the run's stream to its end, as a client of this replica would (nobody here needs it:
        the client's replica follows the ledger)."""
        try:
            async with contextlib.aclosing(stream):
                async for _ in stream:
                    pass
        except Exception as exc:
            log.error("run.forwarded_failed", run_id=run_id, error=repr(exc)[:200])
        finally:
            self.driving.pop(run_id, None)

    async def _on_abandon(self, origin: str, run_id: str, body: bytes) -> bytes:
        """The client left the replica that relayed the run: the run ends as if it had left here."""
        task = self.driving.get(run_id)
        if task is not None:
            task.cancel()
        return b""

    async def _on_withdraw(self, origin: str, token: str, body: bytes) -> bytes:
        """The client's replica stopped waiting for the hand-over `token`: its run is abandoned, or
        refused when it comes (see the module docstring)."""
        run_id = self.handovers.get(token)
        if run_id is not None:
            return await self._on_abandon(origin, run_id, body)
        now = time.monotonic()
        for old in [t for t, at in self.withdrawn.items() if now - at > WITHDRAWN_KEEP_SECONDS]:
            del self.withdrawn[old]
        self.withdrawn[token] = now
        return b""

    async def close(self) -> None:
        """Host stop: the runs still driven here end with their own stream (cancelled: client gone)."""
        tasks = [*self.driving.values(), *self._sending]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
