"""`result_queue.ResultQueue`: a run's results between the runner and its stream, bounded and in order."""

from __future__ import annotations

import asyncio

import pytest

from agentrunner import results
from agentrunner.result_queue import ResultQueue

pytestmark = pytest.mark.asyncio


def _texts(items: list) -> list[str]:  # type: ignore[type-arg]
    return [r.message_delta.text for r in items]


async def test_a_writer_waits_while_the_queue_is_full_and_results_keep_their_order() -> None:
    queue = ResultQueue(2)
    await queue.put(results.delta("a"))
    await queue.put(results.delta("b"))
    with pytest.raises(asyncio.QueueFull):
        queue.put_nowait(results.delta("x"))
    third = asyncio.create_task(queue.put(results.delta("c")))
    await asyncio.sleep(0.01)
    assert not third.done()  # held back: two results wait unread
    got = [await queue.get()]
    await asyncio.wait_for(third, 1)  # the read made room
    got += [await queue.get(), await queue.get()]
    assert _texts(got) == ["a", "b", "c"]


async def test_a_reader_waits_for_the_next_result() -> None:
    queue = ResultQueue(2)
    reader = asyncio.create_task(queue.get())
    await asyncio.sleep(0.01)
    assert not reader.done()
    queue.put_nowait(results.delta("late"))
    assert (await asyncio.wait_for(reader, 1)).message_delta.text == "late"


async def test_a_cancelled_waiting_writer_hands_its_room_to_the_next() -> None:
    queue = ResultQueue(1)
    queue.put_nowait(results.delta("a"))
    first = asyncio.create_task(queue.put(results.delta("b")))
    second = asyncio.create_task(queue.put(results.delta("c")))
    await asyncio.sleep(0.01)
    assert (await queue.get()).message_delta.text == "a"  # wakes the first writer...
    first.cancel()  # ...which is cancelled before it could use the room
    await asyncio.sleep(0.01)
    assert second.done() and first.cancelled()
    assert (await asyncio.wait_for(queue.get(), 1)).message_delta.text == "c"
