"""The per-run control channel behind `ProxyService.Control` (hello/welcome, cancel, steering, acks).

The run path pushes signals by run id; the proxy servicer owns the gRPC stream and drains the
channel's queue. Signals pushed before the runner said hello are queued and delivered after welcome.
Steering inputs are also kept for `PullSteering` (each delivered once, by whichever path comes first).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

from agentrunner.v1 import proxy_service_pb2


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

    @property
    def queue(self) -> asyncio.Queue[proxy_service_pb2.ControlResponse | None]:
        """The signals for the runner's control stream, in order; `None` ends it (the run ended)."""
        if self._queue is None:
            self._queue = asyncio.Queue()
            if self.closed:
                self._queue.put_nowait(None)
        return self._queue


class ControlHub:
    def __init__(self) -> None:
        self._channels: dict[str, ControlChannel] = {}

    def open(self, run_id: str) -> ControlChannel:
        """Called when a run starts: signals can be queued before the runner connects."""
        return self._channels.setdefault(run_id, ControlChannel(run_id))

    def get(self, run_id: str) -> ControlChannel | None:
        return self._channels.get(run_id)

    def close(self, run_id: str) -> None:
        """The run ended: the control stream is closed by the servicer."""
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
        channel.queue.put_nowait(signal)
        return signal.signal_id

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
