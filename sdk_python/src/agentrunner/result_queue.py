"""`ResultQueue`: a run's results on their way from the runner to its stream (`engine.RunExecution`)."""

from __future__ import annotations

import asyncio

from agentrunner.v1 import result_pb2


class ResultQueue:
    """A run's results on their way to its stream: at most `size` unread (`put` waits beyond, as
    `asyncio.Queue(size)` does), any number of writers (the runner task, `ctx.emit` from the runner's
    other tasks), one reader (`RunExecution.results`). Without `asyncio.Queue`'s four deques and event
    (~3 KiB per open run); waiting writers get a list only when the queue first fills."""

    __slots__ = ("_getter", "_items", "_putters", "_size")

    def __init__(self, size: int) -> None:
        self._items: list[result_pb2.RunResult] = []
        self._size = size
        self._getter: asyncio.Future[None] | None = None
        self._putters: list[asyncio.Future[None]] | None = None

    def empty(self) -> bool:
        """Whether no result waits unread."""
        return not self._items

    def put_nowait(self, item: result_pb2.RunResult) -> None:
        """Queues `item`; `asyncio.QueueFull` when `size` results wait unread."""
        if len(self._items) >= self._size:
            raise asyncio.QueueFull
        self._items.append(item)
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)

    async def put(self, item: result_pb2.RunResult) -> None:
        """Queues `item`, waiting while the queue is full."""
        while len(self._items) >= self._size:
            if self._putters is None:
                self._putters = []
            waiter = asyncio.get_running_loop().create_future()
            self._putters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done():  # woken and cancelled: the room goes to the next writer
                    self._wake_putter()
                raise
            finally:
                if waiter in self._putters:
                    self._putters.remove(waiter)
        self.put_nowait(item)

    def get_nowait(self) -> result_pb2.RunResult:
        """The oldest result (the queue must not be empty); a waiting writer gets its room."""
        item = self._items.pop(0)
        self._wake_putter()
        return item

    async def get(self) -> result_pb2.RunResult:
        """The oldest result, waiting for one."""
        while not self._items:
            self._getter = asyncio.get_running_loop().create_future()
            try:
                await self._getter
            finally:
                self._getter = None
        return self.get_nowait()

    def _wake_putter(self) -> None:
        for waiter in self._putters or ():
            if not waiter.done():
                waiter.set_result(None)
                return
