"""Durability of a run's results: what the client has seen is pending, being written, or stored.

Every validated result goes through its run's `RunJournal` before the client sees it:

- `message.delta` results stream at once. They wait in `pending` until the host-wide `DeltaBatcher`
  takes them (when `DELTA_BATCH` deltas of all runs are pending, or `DELTA_BATCH_SECONDS` after the
  oldest arrived) into ONE write shared by every run with pending deltas; while that write runs they are
  `writing`. Writes end in the order they began, so a run's later deltas never commit before its
  earlier ones.
- Any other result is committed before the client sees it, together with the run's pending deltas, in
  order, after the shared write holding its earlier deltas (`record`); a terminal result is committed
  with the run's final status and the revoked run token in one transaction.
- A shared write that fails fails every run with deltas in it: the journal is marked failed and the
  next step of each of those runs raises `RecordFailed`. The rolled-back deltas go back to the front of
  `pending`, so the run's next write (its terminal failure) commits them first, in order: a result the
  client saw is never skipped by the numbering. What the run could not write at all comes out of
  `take_unwritten`, for the ending written once the database is back (`RunHost.settle_later`).

`unstored()` is what a follower reads besides the store: the results handed out but not committed, in
order and gap-free (taken BEFORE the follower reads the store: a write that commits meanwhile is then in
one of the two, never in neither).

The module talks to the store through `ResultSink` only, so its tests need no database or transport.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeAlias

import structlog
from google.protobuf import json_format

from agentrunner.errors import AgentRunnerError
from agentrunner.v1 import common_pb2, result_pb2
from agentrunner_host.ports import AuthorizationSnapshot, RunRecord
from agentrunner_host.run.outcomes import status_of

log = structlog.get_logger("agentrunner_host.run")

#: pending deltas (of all runs) that start a shared write; a non-delta result flushes its run at once.
#: Large on purpose: each run's deltas in a batch share one ledger row, and with many runs streaming a
#: batch writes about one index page per run whatever its size (docs/performance.md).
DELTA_BATCH = 2048
#: a delta streamed to the client is committed at the latest this long after it arrived (the window in
#: which it is not yet durable; README "Durability"): the batch holding it is started early enough
#: for its commit to end within the bound (`DeltaBatcher.window`)
DELTA_BATCH_SECONDS = 0.25
#: how fast the estimate of a batch's write time forgets a slow one (per batch written), and where it
#: starts (before the first write is measured)
_SLOW_DECAY, _SLOW_FIRST = 0.9, 0.02

RunStatus: TypeAlias = common_pb2.RunStatus.ValueType


class RecordFailed(Exception):
    """Recording a run's results failed (the write was rolled back whole); the run ends with
    `host.store_error`."""


class ResultSink(Protocol):
    """The writes the journal makes (`agentrunner_host.ports.RunStore` provides them)."""

    async def record_results(
        self, snapshot: AuthorizationSnapshot, results: Sequence[result_pb2.RunResult]
    ) -> None: ...

    async def record_deltas(self, batches: Sequence[tuple[str, Sequence[result_pb2.RunResult]]]) -> None: ...

    async def finish_run(
        self,
        snapshot: AuthorizationSnapshot,
        results: Sequence[result_pb2.RunResult],
        status: RunStatus,
        reason: str,
        usage: dict[str, Any] | None = None,
    ) -> RunRecord | None: ...


@dataclasses.dataclass(eq=False, slots=True)
class RunJournal:
    """One run's results on their way to the store (see the module docstring)."""

    run_id: str
    #: the snapshot results are written under (a minimal one when the run fails before it has one)
    snapshot: AuthorizationSnapshot
    batcher: DeltaBatcher
    #: handed out, not yet taken by a write, oldest first
    pending: list[result_pb2.RunResult] = dataclasses.field(default_factory=list)
    #: taken by shared delta writes not committed yet, oldest first
    writing: list[result_pb2.RunResult] = dataclasses.field(default_factory=list)
    #: the shared write holding this run's latest deltas (awaited before the run's next write)
    inflight: asyncio.Task[None] | None = None
    #: a shared write holding this run's deltas failed
    failed: bool = False
    #: the terminal result is committed (with the final status and the revoked run token)
    concluded: bool = False
    #: the ledger record committed with the terminal result
    finished: RunRecord | None = None

    def unstored(self) -> list[result_pb2.RunResult]:
        """The results handed out and not committed yet, in order (see the module docstring)."""
        return [*self.writing, *self.pending]

    def add_delta(self, delta: result_pb2.RunResult) -> bool:
        """Queues a `message.delta` (no await: the per-delta path); True when the shared write is due
        now (`write_deltas`)."""
        self.pending.append(delta)
        return self.batcher.add(self)

    async def write_deltas(self) -> None:
        """Starts the shared write now and waits for it (back-pressure on the busiest producer)."""
        await asyncio.shield(self.batcher.flush())
        self._raise_if_failed("the delta batch was rolled back")

    async def record(self, result: result_pb2.RunResult, finish: tuple[RunStatus, str] | None = None) -> None:
        """Commits a non-delta result with the run's pending deltas, after the shared write holding its
        earlier ones; a terminal result also with the final status (`finish`, else the one the terminal
        implies) and the revoked token. A delta is queued (`add_delta`). Raises `RecordFailed` (nothing
        of it is stored; it stays pending, numbered, for the run's ending)."""
        if result.WhichOneof("payload") == "message_delta" and not self.failed:
            if self.add_delta(result):
                await self.write_deltas()
            return
        self.pending.append(result)
        self.batcher.discard(self)  # this run's pending deltas go with this result, in order
        self._raise_if_failed("an earlier delta batch was rolled back")
        if self.inflight is not None:
            await asyncio.wait([self.inflight])
        self._raise_if_failed("an earlier delta batch was rolled back")
        batch = list(self.pending)
        sink = self.batcher.sink
        try:
            if result.WhichOneof("payload") in ("run_completed", "run_failed"):
                status, reason = finish or status_of(result)
                usage = json_format.MessageToDict(result.usage) if result.HasField("usage") else None
                self.finished = await sink.finish_run(self.snapshot, batch, status, reason, usage)
                self.concluded = True
            else:
                await sink.record_results(self.snapshot, batch)
        except AgentRunnerError as exc:
            raise RecordFailed(f"recording results failed: {exc.reason}: {exc.message}") from exc
        except Exception as exc:  # a value the store cannot encode: the batch was not written either
            raise RecordFailed(f"recording results failed: {type(exc).__name__}") from exc
        del self.pending[: len(batch)]
        if self.batcher.on_stored is not None:
            self.batcher.on_stored(self.run_id)

    def withdraw(self, result: result_pb2.RunResult) -> bool:
        """Takes back `result` if it is the last one handed in and not written (its write failed):
        True when it was."""
        if self.pending and self.pending[-1] is result:
            self.pending.pop()
            return True
        return False

    def take_unwritten(self) -> list[result_pb2.RunResult]:
        """What the run handed out and could not write (after a failed write: rolled back whole), in
        order; the journal forgets it (the run's ending writes it: `RunHost.settle_later`)."""
        self.batcher.discard(self)
        unwritten, self.pending = self.pending, []
        return unwritten

    def close(self) -> None:
        """The run is over: its pending deltas are written (or dropped) by the run itself, not by a batch."""
        self.batcher.discard(self)

    def _raise_if_failed(self, why: str) -> None:
        if self.failed:
            self.failed = False
            raise RecordFailed(f"recording results failed: {why}")


class DeltaBatcher:
    """Host-wide `message.delta` batching: one write for the pending deltas of every queued run, so the
    fixed cost of a commit is shared by concurrent runs. Writes run as tasks of their own, one after
    another (a run's cancellation never leaves a write's outcome unknown).

    The bound (`seconds`) counts from the oldest pending delta's arrival to its batch's COMMIT, not to
    the batch's start: on a loaded machine a write waits for the one before it, for the database and
    for turns of the event loop, and the timer itself fires late. So a batch starts `window()` after
    its oldest delta: the bound less twice the recent write time and timer lateness (a decaying
    maximum: one write to wait for, one to make), down to zero (the write starts as soon as the one
    before it ends). Each delta checks the deadline too (no wait for a late timer), and a batch due
    while a write runs starts the moment that write ends. Idle, the window is the bound less a few
    milliseconds: batches stay as large as before."""

    def __init__(
        self, sink: ResultSink, batch: int = DELTA_BATCH, seconds: float = DELTA_BATCH_SECONDS
    ) -> None:
        self.sink = sink
        self.batch = batch
        self.seconds = seconds
        #: journals with deltas in `pending` not yet taken by a write -> how many
        self.queued: dict[RunJournal, int] = {}
        self.rows = 0
        #: when the oldest pending delta arrived (`loop.time()`; 0: none pending)
        self.oldest = 0.0
        #: recent write time plus timer lateness, seconds (a decaying maximum)
        self.slow = _SLOW_FIRST
        self._due = False
        self._timer: asyncio.TimerHandle | None = None
        self._last: asyncio.Task[None] | None = None
        #: told the run id of each run whose results a write committed (followers elsewhere are woken)
        self.on_stored: Callable[[str], None] | None = None

    def journal(self, run_id: str, snapshot: AuthorizationSnapshot) -> RunJournal:
        return RunJournal(run_id, snapshot, self)

    def window(self) -> float:
        """How long after its oldest delta a batch starts (see the class docstring)."""
        return max(0.0, self.seconds - 2 * self.slow)

    def add(self, journal: RunJournal) -> bool:
        """One more pending delta of `journal`; True when a write is due now (the batch is full)."""
        self.queued[journal] = self.queued.get(journal, 0) + 1
        self.rows += 1
        loop = asyncio.get_running_loop()
        if self._timer is None and not self._due:
            now = loop.time()
            if not self.oldest:
                self.oldest = now
            self._timer = loop.call_at(self.oldest + self.window(), self._on_timer)
        elif self._timer is not None and loop.time() >= self._timer.when():  # the timer is late
            self._on_timer()
        return self.rows >= self.batch

    def discard(self, journal: RunJournal) -> None:
        """`journal`'s pending deltas are written (or dropped) by its run itself."""
        self.rows -= self.queued.pop(journal, 0)

    def _on_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.queued:
            self.oldest = 0.0
            return
        late = asyncio.get_running_loop().time() - (self.oldest + self.window())
        self.slow = max(self.slow, late)
        if self._last is not None:  # a write runs: this batch starts the moment it ends
            self._due = True
            return
        self.flush()

    def flush(self) -> asyncio.Task[None]:
        """Takes every queued journal's pending deltas into one write; returns its task."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        journals = list(self.queued)
        self.queued.clear()
        self.rows = 0
        self.oldest = 0.0
        self._due = False
        batches: list[tuple[str, list[result_pb2.RunResult]]] = []
        for journal in journals:
            batches.append((journal.run_id, journal.pending))
            journal.writing.extend(journal.pending)
            journal.pending = []
        task = asyncio.get_running_loop().create_task(self._write(self._last, journals, batches))
        for journal in journals:
            journal.inflight = task
        self._last = task
        return task

    async def _write(
        self,
        previous: asyncio.Task[None] | None,
        journals: list[RunJournal],
        batches: list[tuple[str, list[result_pb2.RunResult]]],
    ) -> None:
        if previous is not None:  # in order: a run's later deltas never commit before its earlier ones
            await asyncio.wait([previous])
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await self.sink.record_deltas(batches)
        except Exception as exc:
            log.error("run.delta_batch_failed", runs=len(journals), error=repr(exc))
            for journal, (_, results) in zip(journals, batches, strict=True):
                journal.failed = True
                # rolled back: first again in the run's next write (later batches of the run fail too:
                # they wait for this one and find the journal failed)
                journal.pending[:0] = results
        else:
            if self.on_stored is not None:
                for run_id, _ in batches:
                    self.on_stored(run_id)
        finally:
            for journal, (_, results) in zip(journals, batches, strict=True):
                del journal.writing[: len(results)]  # writes end in order: this batch is the oldest
                if journal.inflight is asyncio.current_task():
                    journal.inflight = None
            self.slow = max(loop.time() - started, self.slow * _SLOW_DECAY)
            if self._last is asyncio.current_task():
                self._last = None
                if self._due:  # a batch fell due meanwhile
                    self.flush()
