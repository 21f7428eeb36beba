"""Followers: a second caller of a run's stream (`AttachRun`, a duplicate event, a steering caller).

A follower gets the run's stored results after `after_sequence` (with the delivered replies and
interactions replayed in order between them), then, while the run is open in this process, the results
handed out but not committed yet (`RunJournal.unstored`) and the live updates; a run open on another
replica is followed by polling the shared ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterable, Iterator
from typing import Final, Protocol

from google.protobuf import json_format

from agentrunner.errors import NotFoundError, RateLimitedError
from agentrunner.v1 import host_service_pb2, result_pb2
from agentrunner_host.delivery.channel import DeliveryHub, Replayer
from agentrunner_host.ports import TERMINAL_STATUSES, RunLedger, RunRecord
from agentrunner_host.run.journal import RunJournal

Update = host_service_pb2.HostServiceRunResponse
#: how often a follower of a run open on another replica polls the shared ledger
POLL_SECONDS = 0.2


#: a follower's default bound (`limits.follower_queue_max`)
QUEUE_MAX = 4096
#: what a follower's queue gets instead of the update that would pass its bound
OVERFLOWED: Final = Update()


class Followers:
    """The live subscribers of one open run: each gets every update the run publishes, in a queue of
    at most `queue_max` updates. A follower that falls further behind (its client stopped reading) is
    dropped: its queue ends with `OVERFLOWED` and `follow` answers RESOURCE_EXHAUSTED, so no client can
    make the host buffer a run without bound."""

    __slots__ = ("queues",)

    def __init__(self) -> None:
        self.queues: list[tuple[asyncio.Queue[Update], int]] = []

    def __bool__(self) -> bool:
        return bool(self.queues)

    def subscribe(self, queue_max: int = QUEUE_MAX) -> asyncio.Queue[Update]:
        queue: asyncio.Queue[Update] = asyncio.Queue()
        self.queues.append((queue, queue_max))
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Update]) -> None:
        self.queues = [entry for entry in self.queues if entry[0] is not queue]

    def publish(self, update: Update) -> None:
        overflowed = False
        for queue, queue_max in self.queues:
            if queue.qsize() < queue_max:
                queue.put_nowait(update)
            else:
                queue.put_nowait(OVERFLOWED)
                overflowed = True
        if overflowed:
            self.queues = [(q, m) for q, m in self.queues if q.qsize() <= m]


def accepted_of(record: RunRecord, *, attached: bool) -> Update:
    return Update(
        accepted=host_service_pb2.RunAccepted(
            run_id=record.run_id,
            runner_id=record.runner_id,
            binding_id=record.binding_id,
            agent_id=record.agent_id,
            attached=attached,
            trace_id=record.trace_id,
            event_id=record.event_id,
        )
    )


def finished_of(record: RunRecord | None, run_id: str) -> Update:
    finished = host_service_pb2.RunFinished(run_id=run_id)
    if record is not None:
        finished.status = record.status
        finished.reason = record.status_reason
        if record.usage:
            json_format.ParseDict(record.usage, finished.usage, ignore_unknown_fields=True)
    return Update(finished=finished)


class LiveRun(Protocol):
    """A run open in this process as its followers see it (`run.execution.RunExecution`)."""

    followers: Followers
    #: what the run handed out but has not committed yet (`RunJournal.unstored`)
    journal: RunJournal

    @property
    def finished(self) -> bool: ...


class _Cursor:
    """Where a follower is in the run's stream: the last result it got and the delivered items it was
    replayed (`delivery.channel.Replayer`)."""

    __slots__ = ("last", "replay")

    def __init__(self, replay: Replayer, after_sequence: int) -> None:
        self.replay = replay
        self.last = after_sequence

    def stored(self, results: Iterable[result_pb2.RunResult]) -> Iterator[Update]:
        """Stored results after `last` (in order), each after the delivered items that preceded it."""
        for result in results:
            self.last = result.sequence
            yield from self.replay.before(result.sequence)
            yield Update(result=result)

    def caught_up(
        self, results: Iterable[result_pb2.RunResult], unstored: Iterable[result_pb2.RunResult]
    ) -> Iterator[Update]:
        """A live run so far: its stored results, those handed out but not committed yet
        (`RunJournal.unstored`, taken before the store was read), then the delivered items left."""
        yield from self.stored(results)
        for result in unstored:
            if result.sequence > self.last:
                self.last = result.sequence
                yield Update(result=result)
        yield from self.replay.rest()

    def fresh(self, update: Update) -> bool:
        """Whether a live update is new to this follower: not a result it has, not an item it was
        replayed (remembered as seen from now on)."""
        if update.HasField("result"):
            if update.result.sequence <= self.last:
                return False
            self.last = update.result.sequence
            return True
        return update.HasField("finished") or not self.replay.seen(update)


@contextlib.contextmanager
def _subscribed(live: LiveRun | None, queue_max: int) -> Iterator[asyncio.Queue[Update] | None]:
    """A live run's updates for this follower, queued while it follows (None: the run is not live)."""
    if live is None:
        yield None
        return
    queue = live.followers.subscribe(queue_max)
    try:
        yield queue
    finally:
        live.followers.unsubscribe(queue)


def _dropped(run_id: str, queue_max: int, last: int) -> RateLimitedError:
    return RateLimitedError(
        f"this follower fell {queue_max} updates behind run {run_id!r} and was dropped: attach "
        f"again with after_sequence={last}",
        retry_delay=0.0,
        metadata={"runId": run_id, "afterSequence": last, "queueMax": queue_max},
    )


async def _from_ledger(ledger: RunLedger, cursor: _Cursor, run_id: str) -> AsyncGenerator[Update, None]:
    """A run not open in this process (it ended, or another replica runs it): its stored results, the
    shared ledger polled until the run ends, then the delivered items left and `finished`."""
    while True:
        for update in cursor.stored(await ledger.list_results(run_id, cursor.last)):
            yield update
        record = await ledger.get_run(run_id)
        if record is None or record.status in TERMINAL_STATUSES:
            break
        await asyncio.sleep(POLL_SECONDS)  # a run open on another replica: poll the shared ledger
        await cursor.replay.refresh()
    await cursor.replay.refresh()
    for update in cursor.stored(await ledger.list_results(run_id, cursor.last)):
        yield update
    for update in cursor.replay.rest():
        yield update
    yield finished_of(record, run_id)


async def follow(
    ledger: RunLedger,
    deliveries: DeliveryHub,
    run_id: str,
    open_run: LiveRun | None,
    after_sequence: int = 0,
    *,
    attached: bool = False,
    queue_max: int = QUEUE_MAX,
) -> AsyncGenerator[Update, None]:
    """A run's stream for a second caller (see the module docstring). Raises NOT_FOUND before the
    first update for an unknown run."""
    record = await ledger.get_run(run_id)
    if record is None:
        raise NotFoundError(f"run {run_id!r} does not exist", metadata={"runId": run_id})
    live = open_run if open_run is not None and not open_run.finished else None
    with _subscribed(live, queue_max) as queue:  # (before the store is read: no live update is missed)
        yield accepted_of(record, attached=attached)
        cursor = _Cursor(await deliveries.replayer(run_id, after_sequence), after_sequence)
        if live is None or queue is None:
            async for update in _from_ledger(ledger, cursor, run_id):
                yield update
            return
        # taken BEFORE reading the store: a write that commits meanwhile is in one of the two
        unstored = live.journal.unstored()
        for update in cursor.caught_up(await ledger.list_results(run_id, cursor.last), unstored):
            yield update
        while True:
            update = await queue.get()
            if update is OVERFLOWED:
                raise _dropped(run_id, queue_max, cursor.last)
            if cursor.fresh(update):
                yield update
                if update.HasField("finished"):
                    return
