"""The runner call's reader without a transport: runner messages reach the run's outbox in order, at most
`READ_AHEAD` wait there unread, a failed read reaches the pump as its error, and replies delivered
meanwhile pass through untouched."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from agentrunner.v1 import host_service_pb2, result_pb2, runner_service_pb2
from agentrunner_host.delivery.channel import Outbox
from agentrunner_host.run.runner_call import READ_AHEAD, ReadFailed, RunnerCall

pytestmark = pytest.mark.asyncio


class FakeCall:
    """`grpc.aio.UnaryStreamCall`'s read side: `count` messages, then EOF (or `error`)."""

    def __init__(self, count: int, error: BaseException | None = None) -> None:
        self.left = count
        self.error = error
        self.reads = 0
        self.cancelled = False

    async def read(self) -> Any:
        await asyncio.sleep(0)
        if self.left == 0:
            if self.error is not None:
                raise self.error
            return grpc.aio.EOF
        self.left -= 1
        self.reads += 1
        return runner_service_pb2.RunResponse(result=result_pb2.RunResult(sequence=self.reads))

    def done(self) -> bool:
        return self.cancelled or self.left == 0

    def cancel(self) -> bool:
        self.cancelled = True
        return True


def reader(count: int, error: BaseException | None = None) -> tuple[RunnerCall, FakeCall]:
    fake = FakeCall(count, error)
    call = RunnerCall(fake, Outbox())  # type: ignore[arg-type]
    call.start_reading("read-test")
    return call, fake


async def test_at_most_read_ahead_messages_wait_unread_and_taking_one_reads_the_next() -> None:
    call, fake = reader(READ_AHEAD + 10)
    await asyncio.sleep(0.05)
    assert fake.reads == READ_AHEAD and len(call.outbox) == READ_AHEAD  # flow control: the reader waits
    item = call.take(call.outbox.get_nowait())
    assert isinstance(item, runner_service_pb2.RunResponse) and item.result.sequence == 1
    await asyncio.sleep(0.05)
    assert fake.reads == READ_AHEAD + 1
    call.stop_reading()


async def test_messages_arrive_in_order_then_eof() -> None:
    call, _ = reader(3)
    items = [call.take(await call.outbox.get()) for _ in range(4)]
    assert [i.result.sequence for i in items[:3]] == [1, 2, 3]  # type: ignore[attr-defined]
    assert items[3] is grpc.aio.EOF


async def test_a_failed_read_is_raised_to_the_pump() -> None:
    call, _ = reader(1, error=ValueError("stream broke"))
    call.take(await call.outbox.get())
    failed = await call.outbox.get()
    assert isinstance(failed, ReadFailed)
    with pytest.raises(ValueError, match="stream broke"):
        call.take(failed)


async def test_replies_pass_through_without_using_read_ahead_room() -> None:
    call, _ = reader(0)
    free = call.room.free
    reply = host_service_pb2.HostServiceRunResponse(reply=host_service_pb2.Reply(reply_id="r1"))
    assert call.take(reply) is reply and call.room.free == free
    call.stop_reading()
