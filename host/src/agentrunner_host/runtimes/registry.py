"""The live runtimes of this host process: registration, liveness, drain and placement.

A `Connection` is one runtime's session (`RuntimeService.Connect`) and its slots (waiting `ClaimRun`
streams). The registry validates a `hello` (runtime id, slots, labels, manifests as a dialed endpoint's,
what the credential may announce, who owns each runner id), supersedes a lost connection of the same
process, refuses a runtime id connected from another process, keeps liveness (a runtime without a
heartbeat for `offline_after` is ended and its runs fail) and places runs: among the accepting
runtimes that serve the runner id and carry the agent's `runtime_selector` labels, the one with the most
waiting slots (ties: the one placed on least recently). The database (`store/runtimes.py`) records every
step; this module decides.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import time
from collections.abc import Collection
from typing import Any

import grpc
import structlog
from google.protobuf import json_format

from agentrunner.errors import AgentRunnerError, AlreadyExistsError
from agentrunner.v1 import runtime_service_pb2
from agentrunner_host.config.model import HostConfig
from agentrunner_host.ports import utcnow
from agentrunner_host.registry.endpoints import RunnerRegistry
from agentrunner_host.runtimes import metrics
from agentrunner_host.runtimes.calls import FailedCall, RuntimeCall, RuntimeRunner, Slot
from agentrunner_host.runtimes.elsewhere import matches, replicas_serving
from agentrunner_host.runtimes.gate import RuntimeClient, RuntimeGate
from agentrunner_host.runtimes.hello import check_hello
from agentrunner_host.runtimes.session import Connection
from agentrunner_host.store.runtimes import OFFLINE, ConnectedRuntime, RuntimeStore

log = structlog.get_logger("agentrunner_host.runtimes")

#: runs whose runtime this process remembers without the database (the store writes claims in batches)
RECENT_RUNS = 10_000
#: how often a host re-reads the operator's drain of its runtimes (another replica may change it)
DRAIN_POLL_SECONDS = 2.0
#: how long a placement waits for a slot stream a runtime is (re)opening: it just connected, or a run of
#: it just ended (a slot the runtime announced and does not use, whose stream has not arrived yet)
PENDING_SLOT_WAIT = 0.5


def _as_dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _selector_text(selector: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))


class RuntimeRegistry:
    """The live runtimes of this host process (see the module docstring)."""

    def __init__(
        self, config: HostConfig, store: RuntimeStore, gate: RuntimeGate, endpoints: RunnerRegistry
    ) -> None:
        self.config = config.runtimes
        self.instance_id = config.instance_id
        self.store = store
        self.gate = gate
        self.endpoints = endpoints
        self.by_runtime: dict[str, Connection] = {}
        self.by_connection: dict[str, Connection] = {}
        #: runs placed by this process, most recent last: run id -> runtime id
        self.recent: collections.OrderedDict[str, str] = collections.OrderedDict()
        self.stopping = False
        self._task: asyncio.Task[None] | None = None
        #: set when a slot stream arrives (placements waiting for a pending slot wake up)
        self._slot_added = asyncio.Event()

    # -- registration ----------------------------------------------------------------------------------
    async def connect(
        self, hello: runtime_service_pb2.RuntimeHello, client: RuntimeClient, peer: str
    ) -> Connection:
        """Registers a runtime or raises its typed refusal (stored and audited by the caller)."""
        if self.stopping:
            from agentrunner.errors import RunnerUnavailableError

            raise RunnerUnavailableError("the host is shutting down")
        check_hello(hello, client, self.gate, self.endpoints)
        old = self.by_runtime.get(hello.runtime_id)
        if old is not None and old.instance_id != hello.instance_id:
            raise AlreadyExistsError(
                f"runtime {hello.runtime_id!r} is connected from another process (peer {old.peer}); give "
                "this one its own --runtime-id",
                metadata={"runtimeId": hello.runtime_id},
            )
        if old is None:
            await self._check_other_replicas(hello)
        conn = Connection(hello, client, peer)
        info = ConnectedRuntime(
            runtime_id=conn.runtime_id,
            client_id=conn.client_id,
            connection_id=conn.id,
            instance_id=conn.instance_id,
            host_instance_id=self.instance_id,
            peer=peer,
            machine=_as_dict(hello.machine),
            sdk=_as_dict(hello.sdk),
            labels=conn.labels,
            slots=conn.slots,
            runner_ids=sorted(conn.manifests),
            capabilities=[_as_dict(c) for c in hello.capabilities],
            heartbeat_interval_ms=int(self.config.heartbeat_interval_seconds * 1000),
            connected_at=conn.connected_at,
        )
        conn.drained = await self.store.connected(info, superseded=old.id if old is not None else "")
        if old is not None:
            self._forget(old, f"superseded by connection {conn.id} of the same runtime process")
            old.close(
                grpc.StatusCode.UNAVAILABLE, "superseded by a new connection of this runtime", "superseded"
            )
        self.by_runtime[conn.runtime_id] = conn
        self.by_connection[conn.id] = conn
        metrics.connected(conn)
        log.info(
            "runtime.connected",
            runtime_id=conn.runtime_id,
            client=conn.client_id,
            peer=peer,
            runners=sorted(conn.manifests),
            slots=conn.slots,
            drained=conn.drained,
        )
        return conn

    async def _check_other_replicas(self, hello: runtime_service_pb2.RuntimeHello) -> None:
        """A runtime id held by a live connection on another host replica is taken."""
        row = await self.store.get(hello.runtime_id)
        if row is None or row.status == OFFLINE or row.host_instance_id == self.instance_id:
            return
        # (the other replica writes heartbeats in batches: a row is live until twice the offline threshold)
        fresh = row.heartbeat_at is not None and (utcnow() - row.heartbeat_at).total_seconds() < (
            2 * self.config.offline_after_seconds
        )
        if fresh and row.instance_id != hello.instance_id:
            raise AlreadyExistsError(
                f"runtime {hello.runtime_id!r} is connected to host {row.host_instance_id!r} from another process",
                metadata={"runtimeId": hello.runtime_id},
            )

    def welcome(self, conn: Connection) -> runtime_service_pb2.ConnectResponse:
        welcome = runtime_service_pb2.RuntimeWelcome(
            connection_id=conn.id,
            runner_ids=sorted(conn.manifests),
            drained=conn.drained,
            host_instance_id=self.instance_id,
        )
        welcome.heartbeat_interval.FromTimedelta(dt.timedelta(seconds=self.config.heartbeat_interval_seconds))
        welcome.offline_after.FromTimedelta(dt.timedelta(seconds=self.config.offline_after_seconds))
        return runtime_service_pb2.ConnectResponse(welcome=welcome)

    def _forget(self, conn: Connection, reason: str) -> None:
        """The connection is over: its slots are given back and its open runs fail (stream broken)."""
        if not conn.alive:
            return
        conn.alive = False
        if self.by_runtime.get(conn.runtime_id) is conn:
            del self.by_runtime[conn.runtime_id]
        self.by_connection.pop(conn.id, None)
        conn.give_back_slots()
        for call in list(conn.running.values()):
            call.lost(f"runtime {conn.runtime_id!r} disconnected: {reason}")
        metrics.disconnected(conn)

    async def disconnected(self, conn: Connection, kind: str, reason: str) -> None:
        """The `Connect` stream ended (`kind`: disconnected, offline, superseded, host_stop)."""
        superseded = not conn.alive and kind == "superseded"
        self._forget(conn, reason)
        metrics.DISCONNECTS.labels(kind).inc()
        log.info(
            "runtime.disconnected",
            runtime_id=conn.runtime_id,
            kind=kind,
            reason=reason,
            connected_s=round(time.monotonic() - conn.started, 3),
        )
        if superseded:
            return  # (the new connection's registration ended it in the store)
        try:
            await self.store.disconnected(
                conn.runtime_id, conn.id, kind, reason, time.monotonic() - conn.started
            )
        except AgentRunnerError as exc:
            log.error("runtime.store_failed", runtime_id=conn.runtime_id, error=exc.message)

    # -- session messages ------------------------------------------------------------------------------
    def heartbeat(self, conn: Connection, beat: runtime_service_pb2.RuntimeHeartbeat) -> None:
        conn.last_beat = time.monotonic()
        conn.free_reported = beat.free_slots
        self.store.heartbeat(conn.runtime_id, conn.id, beat.free_slots)

    def leave(self, conn: Connection, reason: str) -> None:
        """The runtime drains itself (it is shutting down): no new runs, open ones finish."""
        conn.leaving = True
        conn.give_back_slots()
        metrics.slots(conn)
        log.info("runtime.leaving", runtime_id=conn.runtime_id, reason=reason, running=len(conn.running))

    def add_slot(self, conn: Connection, slot: Slot) -> bool:
        """A waiting `ClaimRun` stream; False when the runtime takes no runs now (the slot is given back)."""
        if not conn.accepting or self.stopping:
            return False
        conn.waiting.append(slot)
        metrics.slots(conn)
        self._slot_added.set()
        return True

    def drop_slot(self, conn: Connection, slot: Slot) -> None:
        slot.alive = False
        with contextlib.suppress(ValueError):
            conn.waiting.remove(slot)
        metrics.slots(conn)

    # -- drain -----------------------------------------------------------------------------------------
    def apply_drain(self, runtime_id: str, drained: bool, reason: str) -> None:
        """An operator's drain (or resume) of a runtime connected here."""
        conn = self.by_runtime.get(runtime_id)
        if conn is None or conn.drained == drained:
            return
        conn.drained = drained
        conn.outbox.put_nowait(
            runtime_service_pb2.ConnectResponse(
                drain=runtime_service_pb2.RuntimeDrainSignal(drained=drained, reason=reason)
            )
        )
        if drained:
            conn.give_back_slots()
        metrics.slots(conn)
        log.info("runtime.drained" if drained else "runtime.resumed", runtime_id=runtime_id, reason=reason)

    # -- placement -------------------------------------------------------------------------------------
    def serves(self, runner_id: str) -> bool:
        """Whether a connected runtime announced the runner id."""
        return any(runner_id in c.manifests for c in self.by_runtime.values())

    async def place(self, runner_id: str, selector: dict[str, str]) -> tuple[RuntimeRunner | None, str]:
        """The runtime a run of `runner_id` goes to, or why none can take it. When every slot is taken
        but one is on its way (`Connection.pending`), waits for it up to `PENDING_SLOT_WAIT`."""
        loop = asyncio.get_running_loop()
        until = loop.time() + PENDING_SLOT_WAIT
        while True:
            placed, why = self.place_now(runner_id, selector)
            left = until - loop.time()
            if placed is not None or left <= 0 or not self._pending(runner_id, selector):
                return placed, why
            self._slot_added.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._slot_added.wait(), left)

    async def takes(self, runner_id: str, selector: dict[str, str]) -> bool:
        """Whether a runtime connected here can take a run of `runner_id` now (`place` finds a slot)."""
        placed, _ = await self.place(runner_id, selector)
        return placed is not None

    async def elsewhere(self, runner_id: str, selector: dict[str, str], live: Collection[str]) -> list[str]:
        """The other live replicas whose runtimes can take the run (`runtimes/elsewhere.py`)."""
        return await replicas_serving(
            self.store, self.instance_id, runner_id, selector, live, self.config.offline_after_seconds
        )

    def _pending(self, runner_id: str, selector: dict[str, str]) -> bool:
        return any(
            c.pending()
            for c in self.by_runtime.values()
            if runner_id in c.manifests and matches(c.labels, selector)
        )

    def place_now(self, runner_id: str, selector: dict[str, str]) -> tuple[RuntimeRunner | None, str]:
        """`place` without waiting."""
        if self.stopping:
            return None, "the host is shutting down"
        serving = [c for c in self.by_runtime.values() if runner_id in c.manifests]
        if not serving:
            return None, f"no runtime serving {runner_id} is connected"
        matching = [c for c in serving if matches(c.labels, selector)]
        if not matching:
            return None, (
                f"no connected runtime serving {runner_id} has the labels {_selector_text(selector)} "
                f"(connected: {', '.join(sorted(c.runtime_id for c in serving))})"
            )
        accepting = [c for c in matching if c.accepting]
        if not accepting:
            return None, (
                f"the runtimes serving {runner_id} are draining: {', '.join(sorted(c.runtime_id for c in matching))}"
            )
        best = max(accepting, key=lambda c: (c.free(), -c.last_placed))
        if best.free() == 0:
            total = sum(c.slots for c in accepting)
            return None, f"all {total} slots of the runtimes serving {runner_id} are busy"
        return (
            RuntimeRunner(
                manifest=best.manifests[runner_id],
                endpoint_id=f"runtime:{best.runtime_id}",
                address=best.peer,
                refreshed_at=best.connected_at,
                runtime_id=best.runtime_id,
                selector=dict(selector),
                registry=self,
            ),
            "",
        )

    def start_call(
        self, runner: RuntimeRunner, claimed: runtime_service_pb2.ClaimedRun, timeout: float
    ) -> RuntimeCall:
        """Sends a placed run on a waiting slot: of the runtime it was placed on, else of the best one that
        qualifies now; a `FailedCall` (UNAVAILABLE) when none does."""
        conn = self.by_runtime.get(runner.runtime_id)
        if conn is None or conn.free() == 0 or runner.runner_id not in conn.manifests:
            again, reason = self.place_now(runner.runner_id, runner.selector)
            if again is None:
                return FailedCall(reason)
            conn = self.by_runtime[again.runtime_id]
        slot = conn.waiting.pop(0)
        call = RuntimeCall(slot, claimed, timeout, self._ended)
        conn.running[call.run_id] = call
        conn.last_placed = time.monotonic()
        self.recent[call.run_id] = conn.runtime_id
        if len(self.recent) > RECENT_RUNS:
            self.recent.popitem(last=False)
        slot.assigned.set_result(call)
        self.store.claimed(call.run_id, conn.runtime_id, conn.id, call.runner_id)
        metrics.claimed(conn)
        return call

    def _ended(self, call: RuntimeCall) -> None:
        conn = call.connection
        conn.running.pop(call.run_id, None)
        self.store.claim_ended(call.run_id, conn.runtime_id, call.outcome, time.monotonic() - call.started)
        metrics.slots(conn)

    def runtime_of(self, run_id: str) -> str:
        """The runtime a run placed by this process went to ('' when it is not one of them)."""
        return self.recent.get(run_id, "")

    # -- liveness --------------------------------------------------------------------------------------
    def check_liveness(self, now: float) -> None:
        limit = self.config.offline_after_seconds
        for conn in list(self.by_runtime.values()):
            silent = now - conn.last_beat
            if silent > limit:
                conn.close(grpc.StatusCode.UNAVAILABLE, f"no heartbeat for {silent:.1f} s", "offline")

    async def _poll_drains(self) -> None:
        drained = await self.store.drained(list(self.by_runtime))
        for runtime_id, value in drained.items():
            conn = self.by_runtime.get(runtime_id)
            if conn is not None and conn.drained != value:
                self.apply_drain(runtime_id, value, "drained on another host replica" if value else "resumed")

    async def run(self) -> None:
        tick = min(0.5, self.config.heartbeat_interval_seconds / 2)
        since_poll = 0.0
        while True:
            await asyncio.sleep(tick)
            self.check_liveness(time.monotonic())
            since_poll += tick
            if since_poll >= DRAIN_POLL_SECONDS and self.by_runtime:
                since_poll = 0.0
                try:
                    await self._poll_drains()
                except Exception as exc:  # the database is away for a moment: next poll
                    log.warning("runtime.drain_poll_failed", error=repr(exc))

    async def start(self) -> None:
        gone = await self.store.mark_host_gone(self.instance_id)
        if gone:
            log.warning("runtime.host_restarted", runtimes=gone)
        self.store.start()
        self._task = asyncio.create_task(self.run(), name="runtime-liveness")

    def stop_placing(self) -> None:
        """Host stop: no new runs on runtimes; waiting slots are given back."""
        self.stopping = True
        for conn in self.by_runtime.values():
            conn.give_back_slots()

    async def close(self) -> None:
        self.stop_placing()
        for conn in list(self.by_runtime.values()):
            conn.close(grpc.StatusCode.UNAVAILABLE, "the host is shutting down", "host_stop")
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for _ in range(20):  # the sessions' handlers record their ends
            if not self.by_runtime:
                break
            await asyncio.sleep(0.05)
        await self.store.close()
