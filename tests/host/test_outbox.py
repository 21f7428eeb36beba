"""The run loop's outbox (runner messages, replies and appended results in one queue): arrival order,
a waiting reader woken by the next item, and nothing lost when a waiting read is cancelled."""

from __future__ import annotations

import asyncio

import pytest

from agentrunner_host.delivery.channel import Outbox

pytestmark = pytest.mark.asyncio


async def test_items_come_out_in_arrival_order_and_a_waiting_reader_wakes_up() -> None:
    box = Outbox()
    box.put_nowait("a")
    box.put_nowait("b")
    assert len(box) == 2 and box.get_nowait() == "a" and await box.get() == "b"
    assert box.empty()
    reader = asyncio.create_task(box.get())
    await asyncio.sleep(0)
    assert not reader.done()
    box.put_nowait("c")
    assert await asyncio.wait_for(reader, 1) == "c"
    with pytest.raises(IndexError):
        box.get_nowait()


async def test_a_cancelled_read_loses_nothing() -> None:
    box = Outbox()
    reader = asyncio.create_task(box.get())
    await asyncio.sleep(0)
    box.put_nowait("kept")  # wakes the reader, which is cancelled before it runs
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert await asyncio.wait_for(box.get(), 1) == "kept"


async def test_an_outbox_never_written_to_reads_as_empty_and_wakes_its_reader() -> None:
    """The deque is made by the first put (issue 37: most open runs wait without an item): until then
    the outbox is empty and a waiting reader still wakes on the first item."""
    box = Outbox()
    assert len(box) == 0 and box.empty()
    with pytest.raises(IndexError):
        box.get_nowait()
    reader = asyncio.create_task(box.get())
    await asyncio.sleep(0)
    assert not reader.done()
    box.put_nowait("first")
    assert await asyncio.wait_for(reader, 1) == "first"
    assert box.empty()
