"""The streams `RunService.open` (`run/service.py`) returns besides a follower's: a new run's (opened
here or relayed from another replica), which releases the run when its caller closes it before
reading anything, and a discarded event's (`accepted`
then `finished(discarded)`); and the host's defaults an incoming event gets (`normalize_event`)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable

from agentrunner.v1 import common_pb2, context_pb2, host_service_pb2

Update = host_service_pb2.HostServiceRunResponse


def normalize_event(event: host_service_pb2.EventEnvelope) -> host_service_pb2.EventEnvelope:
    """A copy with the host's defaults filled in: an event id, `message.received`, the receive time and
    the API trigger source."""
    out = host_service_pb2.EventEnvelope()
    out.CopyFrom(event)
    if not out.event_id:
        out.event_id = f"evt_{uuid.uuid4().hex}"
    if not out.event_type:
        out.event_type = "message.received"
    if not out.HasField("event_time"):
        out.event_time.seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
        out.event_time.nanos = nanos - nanos % 1000  # (microseconds, as `GetCurrentTime` keeps)
    if not out.trigger_source:
        out.trigger_source = context_pb2.TRIGGER_SOURCE_API
    return out


@dataclasses.dataclass(slots=True)
class RunStream:
    """A new run's stream, opened here or relayed from the replica that drives it (`run/forwarding.py`):
    `on_unstarted` releases the run when the caller closes the stream before reading anything (the
    generator's own `finally` never runs then)."""

    stream: AsyncGenerator[Update, None]
    on_unstarted: Callable[[], Awaitable[None]] | None = None
    started: bool = False

    def __aiter__(self) -> RunStream:
        return self

    def __anext__(self) -> Awaitable[Update]:
        self.started = True
        return self.stream.__anext__()

    async def aclose(self) -> None:
        if not self.started:  # abandoned before anything streamed
            self.started = True
            if self.on_unstarted is not None:
                await self.on_unstarted()
        await self.stream.aclose()


async def discarded(binding_id: str, event_id: str) -> AsyncGenerator[Update, None]:
    yield Update(accepted=host_service_pb2.RunAccepted(binding_id=binding_id, event_id=event_id))
    yield Update(
        finished=host_service_pb2.RunFinished(
            status=common_pb2.RUN_STATUS_DISCARDED, reason="binding.discard"
        )
    )
