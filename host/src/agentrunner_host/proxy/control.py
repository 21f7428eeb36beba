"""The per-run control channel behind `ProxyService.Control` (hello/welcome, cancel, steering, acks).

The run path pushes signals by run id; the proxy servicer owns the gRPC stream and drains the
channel's queue. Signals pushed before the runner said hello are queued and delivered after welcome.
Steering inputs are also kept for `PullSteering` (each delivered once, by whichever path comes first).

In a fleet the runner's control stream may reach another replica than the one running the run (a load
balancer in front). That replica asks the run's replica for the stream (`control_attach`: the signals
queued so far come back with the answer), and from then on the run's replica forwards each signal to
it (`control_signal`, in order) and ends it with the run (`control_close`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

import structlog

from agentrunner.errors import FailedPreconditionError
from agentrunner.v1 import proxy_service_pb2
from agentrunner_host.fleet.routing import Fleet
from agentrunner_host.ports import TERMINAL_STATUSES, RunLedger

log = structlog.get_logger("agentrunner_host.proxy")


@dataclasses.dataclass(slots=True)
class ControlChannel:
    run_id: str
    #: the signal queue, made by the first signal or the runner's control stream (`queue`): most runs
    #: never get either, and an empty `asyncio.Queue` is about 2 KiB per open run
    _queue: asyncio.Queue[proxy_service_pb2.ControlResponse | None] | None = None
    #: the run ended (`ControlHub.close`): a queue made after that holds the end marker
    closed: bool = False
    connected: bool = False
    last_heartbeat: float = 0.0
    last_sequence: int = 0
    acks: dict[str, proxy_service_pb2.ControlAck] = dataclasses.field(default_factory=dict)
    ack_waiters: dict[str, asyncio.Future[proxy_service_pb2.ControlAck]] = dataclasses.field(
        default_factory=dict
    )
    steering: list[proxy_service_pb2.SteeringInput] = dataclasses.field(default_factory=list)
    #: the stream of a run another replica runs (its signals come from there)
    remote: bool = False

    @property
    def queue(self) -> asyncio.Queue[proxy_service_pb2.ControlResponse | None]:
        """The signals for the runner's control stream, in order; `None` ends it (the run ended)."""
        if self._queue is None:
            self._queue = asyncio.Queue()
            if self.closed:
                self._queue.put_nowait(None)
        return self._queue


def _frames(signals: list[proxy_service_pb2.ControlResponse]) -> bytes:
    return b"".join(len(b).to_bytes(4, "big") + b for b in (s.SerializeToString() for s in signals))


def _unframe(data: bytes) -> list[proxy_service_pb2.ControlResponse]:
    out, at = [], 0
    while at < len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        out.append(proxy_service_pb2.ControlResponse.FromString(data[at + 4 : at + 4 + size]))
        at += 4 + size
    return out


class ControlHub:
    def __init__(self) -> None:
        self._channels: dict[str, ControlChannel] = {}
        self.fleet: Fleet | None = None
        self.ledger: RunLedger | None = None
        #: run open here -> the replica holding its runner's control stream
        self._remote: dict[str, str] = {}
        #: run open here -> the last forwarding of a signal (the next one waits for it: in order)
        self._forwarding: dict[str, asyncio.Task[None]] = {}

    def attach_fleet(self, fleet: Fleet, ledger: RunLedger) -> None:
        self.fleet, self.ledger = fleet, ledger
        fleet.bus.handle("control_attach", self._on_attach)
        fleet.bus.handle("control_signal", self._on_signal)
        fleet.bus.handle("control_close", self._on_close)

    def open(self, run_id: str) -> ControlChannel:
        """Called when a run starts: signals can be queued before the runner connects."""
        return self._channels.setdefault(run_id, ControlChannel(run_id))

    def get(self, run_id: str) -> ControlChannel | None:
        return self._channels.get(run_id)

    def close(self, run_id: str) -> None:
        """The run ended: the control stream is closed by the servicer (on another replica: there)."""
        if run_id in self._remote:
            self._forward(run_id, None)
        channel = self._channels.pop(run_id, None)
        if channel is not None:
            channel.closed = True
            if channel._queue is not None:
                channel._queue.put_nowait(None)
            for fut in channel.ack_waiters.values():
                if not fut.done():
                    fut.cancel()

    def _push(self, run_id: str, signal: proxy_service_pb2.ControlResponse) -> str | None:
        channel = self._channels.get(run_id)
        if channel is None:
            return None
        signal.signal_id = signal.signal_id or f"sig_{uuid.uuid4().hex[:16]}"
        if run_id in self._remote:
            self._forward(run_id, signal)
        else:
            channel.queue.put_nowait(signal)
        return signal.signal_id

    # -- a fleet: the control stream on another replica ------------------------------------------------
    def here(self, run_id: str) -> None:
        """The runner's control stream connected to this replica, which runs the run: no forwarding."""
        self._remote.pop(run_id, None)

    async def attach_remote(self, run_id: str) -> ControlChannel | None:
        """A control stream for a run another replica runs: a channel here fed by that replica (None:
        no replica runs it)."""
        fleet, ledger = self.fleet, self.ledger
        record = await ledger.get_run(run_id) if fleet is not None and ledger is not None else None
        if (
            record is None
            or fleet is None
            or record.status in TERMINAL_STATUSES
            or not fleet.elsewhere(record)
        ):
            return None
        queued = _unframe(await fleet.call(record, "control_attach"))
        channel = self._channels[run_id] = ControlChannel(run_id, remote=True)
        for signal in queued:
            channel.queue.put_nowait(signal)
        return channel

    def detach(self, channel: ControlChannel) -> None:
        """A remote channel's stream ended."""
        if channel.remote and self._channels.get(channel.run_id) is channel:
            del self._channels[channel.run_id]

    def _forward(self, run_id: str, signal: proxy_service_pb2.ControlResponse | None) -> None:
        """Sends a signal (None: the end) to the replica holding the run's stream, after the previous one."""
        fleet, target = self.fleet, self._remote.get(run_id)
        if fleet is None or target is None:
            return
        previous = self._forwarding.get(run_id)

        async def forward() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            if signal is None:
                await fleet.bus.send(target, "control_close", run_id)
            else:
                await fleet.bus.send(target, "control_signal", run_id, signal.SerializeToString())

        task = self._forwarding[run_id] = asyncio.get_running_loop().create_task(forward())
        task.add_done_callback(lambda done: self._forwarded(run_id, done))

    def _forwarded(self, run_id: str, task: asyncio.Task[None]) -> None:
        if self._forwarding.get(run_id) is task:
            del self._forwarding[run_id]
            if run_id not in self._channels:
                self._remote.pop(run_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("control.forward_failed", run_id=run_id, error=repr(task.exception())[:200])

    async def _on_attach(self, origin: str, run_id: str, body: bytes) -> bytes:
        channel = self._channels.get(run_id)
        if channel is None or channel.remote:
            raise FailedPreconditionError("the run is not open on this host", metadata={"runId": run_id})
        self._remote[run_id] = origin
        queued: list[proxy_service_pb2.ControlResponse] = []
        while not channel.queue.empty():
            item = channel.queue.get_nowait()
            if item is not None:
                queued.append(item)
        return _frames(queued)

    async def _on_signal(self, origin: str, run_id: str, body: bytes) -> bytes:
        channel = self._channels.get(run_id)
        if channel is not None and channel.remote:
            channel.queue.put_nowait(proxy_service_pb2.ControlResponse.FromString(body))
        return b""

    async def _on_close(self, origin: str, run_id: str, body: bytes) -> bytes:
        channel = self._channels.get(run_id)
        if channel is not None and channel.remote:
            channel.queue.put_nowait(None)
        return b""

    def send_cancel(self, run_id: str, reason: str, grace_seconds: float) -> str | None:
        signal = proxy_service_pb2.ControlResponse()
        signal.cancel.reason = reason
        signal.cancel.grace_period.FromMilliseconds(int(grace_seconds * 1000))
        return self._push(run_id, signal)

    def send_steering(self, run_id: str, steering: proxy_service_pb2.SteeringInput) -> str | None:
        channel = self._channels.get(run_id)
        if channel is None:
            return None
        channel.steering.append(steering)
        signal = proxy_service_pb2.ControlResponse(signal_id=steering.steering_id)
        signal.steering.CopyFrom(steering)
        return self._push(run_id, signal)

    def take_steering(self, run_id: str, limit: int = 0) -> list[proxy_service_pb2.SteeringInput]:
        """For `PullSteering`: the queued inputs not yet acknowledged on the control stream."""
        channel = self._channels.get(run_id)
        if channel is None:
            return []
        items = channel.steering if limit <= 0 else channel.steering[:limit]
        channel.steering = channel.steering[len(items) :]
        return list(items)

    def record_ack(self, run_id: str, ack: proxy_service_pb2.ControlAck) -> None:
        channel = self._channels.get(run_id)
        if channel is None:
            return
        channel.acks[ack.signal_id] = ack
        channel.steering = [s for s in channel.steering if s.steering_id != ack.signal_id]
        fut = channel.ack_waiters.pop(ack.signal_id, None)
        if fut is not None and not fut.done():
            fut.set_result(ack)

    def record_heartbeat(self, run_id: str, last_sequence: int) -> None:
        channel = self._channels.get(run_id)
        if channel is not None:
            channel.last_heartbeat = time.monotonic()
            channel.last_sequence = last_sequence

    async def wait_ack(
        self, run_id: str, signal_id: str, within: float
    ) -> proxy_service_pb2.ControlAck | None:
        channel = self._channels.get(run_id)
        if channel is None:
            return None
        if signal_id in channel.acks:
            return channel.acks[signal_id]
        fut = channel.ack_waiters.setdefault(signal_id, asyncio.get_running_loop().create_future())
        try:
            return await asyncio.wait_for(asyncio.shield(fut), within)
        except TimeoutError:
            return None
        except asyncio.CancelledError:
            if fut.cancelled():  # the run ended while waiting
                return None
            raise
