"""The durability journal without a database or a transport: a delta shown to a client is pending,
being written or stored, never none of them; a failed shared write fails every run in it; a run's
results commit in order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from agentrunner.v1 import common_pb2, result_pb2
from agentrunner_host.ports import AuthorizationSnapshot, RunRecord
from agentrunner_host.run.journal import DeltaBatcher, RecordFailed, RunJournal

pytestmark = pytest.mark.asyncio


class FakeSink:
    """Records every write; a write can be held open (`hold`) or made to fail (`fail`)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, list[tuple[str, int]]]] = []
        self.stored: dict[str, list[int]] = {}
        self.hold: asyncio.Event | None = None
        self.fail = False

    def _store(self, kind: str, batches: Sequence[tuple[str, Sequence[result_pb2.RunResult]]]) -> None:
        self.writes.append((kind, [(run_id, r.sequence) for run_id, rs in batches for r in rs]))
        for run_id, results in batches:
            self.stored.setdefault(run_id, []).extend(r.sequence for r in results)

    async def _gate(self) -> None:
        if self.hold is not None:
            await self.hold.wait()
        if self.fail:
            raise RuntimeError("disk full")

    async def record_deltas(self, batches: Sequence[tuple[str, Sequence[result_pb2.RunResult]]]) -> None:
        await self._gate()
        self._store("deltas", batches)

    async def record_results(
        self, snapshot: AuthorizationSnapshot, results: Sequence[result_pb2.RunResult]
    ) -> None:
        await self._gate()
        self._store("results", [(snapshot.run_id, results)])

    async def finish_run(
        self,
        snapshot: AuthorizationSnapshot,
        results: Sequence[result_pb2.RunResult],
        status: int,
        reason: str,
        usage: dict[str, Any] | None = None,
    ) -> RunRecord | None:
        await self._gate()
        self._store(f"finish:{reason}", [(snapshot.run_id, results)])
        return RunRecord(snapshot.run_id, "e", "a", "b", "r", status=status, status_reason=reason)  # type: ignore[arg-type]


def journal(batcher: DeltaBatcher, run_id: str) -> RunJournal:
    return batcher.journal(
        run_id, AuthorizationSnapshot(run_id=run_id, runner_id="r", agent_id="a", binding_id="b")
    )


def delta(seq: int) -> result_pb2.RunResult:
    return result_pb2.RunResult(sequence=seq, message_delta=result_pb2.MessageDelta(text=f"{seq} "))


def log_line(seq: int) -> result_pb2.RunResult:
    return result_pb2.RunResult(sequence=seq, run_log=result_pb2.RunLog(text="x"))


def completed(seq: int) -> result_pb2.RunResult:
    return result_pb2.RunResult(sequence=seq, run_completed=result_pb2.RunCompleted())


def failed(seq: int) -> result_pb2.RunResult:
    return result_pb2.RunResult(sequence=seq, run_failed=result_pb2.RunFailed(code="host.store_error"))


def seqs(results: list[result_pb2.RunResult]) -> list[int]:
    return [r.sequence for r in results]


async def test_deltas_of_several_runs_share_one_write_when_the_batch_fills() -> None:
    sink = FakeSink()
    batcher = DeltaBatcher(sink, batch=4, seconds=60)
    a, b = journal(batcher, "a"), journal(batcher, "b")
    assert [a.add_delta(delta(1)), b.add_delta(delta(1)), a.add_delta(delta(2))] == [False, False, False]
    assert b.add_delta(delta(2)) is True  # the fourth pending delta: the write is due
    await b.write_deltas()
    assert sink.writes == [("deltas", [("a", 1), ("a", 2), ("b", 1), ("b", 2)])]
    assert a.unstored() == [] and b.unstored() == []


async def test_pending_deltas_are_written_when_the_oldest_is_old_enough() -> None:
    sink = FakeSink()
    batcher = DeltaBatcher(sink, batch=100, seconds=0.05)
    a = journal(batcher, "a")
    a.add_delta(delta(1))
    a.add_delta(delta(2))
    assert seqs(a.unstored()) == [1, 2] and sink.writes == []
    await asyncio.sleep(0.2)
    assert sink.stored == {"a": [1, 2]} and a.unstored() == []


class SlowSink(FakeSink):
    """Each delta write takes `seconds` (a loaded database): when each delta's write committed."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.committed: dict[int, float] = {}

    async def record_deltas(self, batches: Sequence[tuple[str, Sequence[result_pb2.RunResult]]]) -> None:
        await asyncio.sleep(self.seconds)
        now = asyncio.get_running_loop().time()
        for _, results in batches:
            self.committed.update((r.sequence, now) for r in results)


async def test_a_delta_is_committed_within_the_bound_when_each_write_is_slow() -> None:
    """The bound counts to the COMMIT: with writes taking a fifth of it, a delta streamed every 5 ms
    is committed within the bound of its arrival (a batch started a whole bound after its oldest
    delta would commit a write's time too late), and batches stay few (not one per delta)."""
    bound, write = 0.25, 0.05
    sink = SlowSink(write)
    batcher = DeltaBatcher(sink, batch=10_000, seconds=bound)
    a = journal(batcher, "a")
    loop = asyncio.get_running_loop()
    added: dict[int, float] = {}
    for seq in range(1, 241):  # 1.2 s of deltas
        added[seq] = loop.time()
        a.add_delta(delta(seq))
        await asyncio.sleep(0.005)
    await asyncio.sleep(bound + write)
    late = {seq: sink.committed[seq] - at for seq, at in added.items() if seq in sink.committed}
    assert len(late) == 240, sorted(set(added) - set(late))[:5]
    assert max(late.values()) <= bound + 0.03, max(late.values())  # (0.03: the event loop's jitter)
    assert len({round(t, 4) for t in sink.committed.values()}) <= 20


async def test_unstored_is_gap_free_while_a_batch_is_being_written() -> None:
    sink = FakeSink()
    sink.hold = asyncio.Event()
    batcher = DeltaBatcher(sink, batch=2, seconds=60)
    a = journal(batcher, "a")
    a.add_delta(delta(1))
    a.add_delta(delta(2))
    write = batcher.flush()  # the batch is in flight, held
    a.add_delta(delta(3))
    # what a follower reads besides the store: the batch being written, then what is still pending
    assert seqs(a.writing) == [1, 2] and seqs(a.pending) == [3]
    assert seqs(a.unstored()) == [1, 2, 3] and sink.stored == {}
    sink.hold.set()
    await write
    assert sink.stored == {"a": [1, 2]} and seqs(a.unstored()) == [3]


async def test_a_failed_shared_write_fails_every_run_in_it_and_its_deltas_go_first_in_the_next_write() -> (
    None
):
    sink = FakeSink()
    sink.fail = True
    batcher = DeltaBatcher(sink, batch=2, seconds=60)
    a, b = journal(batcher, "a"), journal(batcher, "b")
    a.add_delta(delta(1))
    b.add_delta(delta(1))
    with pytest.raises(RecordFailed):
        await b.write_deltas()  # the run that started the write learns at once
    assert a.failed and a.writing == [] and seqs(a.unstored()) == [1]  # rolled back, still handed out
    sink.fail = False
    with pytest.raises(RecordFailed):
        await a.record(log_line(2))  # the other run's next result is refused too: a delta was lost
    assert sink.stored == {} and seqs(a.unstored()) == [1, 2]
    # the run's terminal failure commits what the client saw before it: the ledger has no gap
    await a.record(failed(3), (common_pb2.RUN_STATUS_FAILED, "host.store_error"))
    assert sink.stored == {"a": [1, 2, 3]} and a.concluded and a.unstored() == []
    # a run whose ending cannot be written hands its results over, in order, for the settled ending
    sink.fail = True
    with pytest.raises(RecordFailed):
        await b.record(failed(2), (common_pb2.RUN_STATUS_FAILED, "host.store_error"))
    assert seqs(b.take_unwritten()) == [1, 2] and b.unstored() == []


async def test_a_result_commits_with_the_runs_pending_deltas_after_its_earlier_batch() -> None:
    sink = FakeSink()
    sink.hold = asyncio.Event()
    batcher = DeltaBatcher(sink, batch=2, seconds=60)
    a = journal(batcher, "a")
    a.add_delta(delta(1))
    a.add_delta(delta(2))
    batcher.flush()  # deltas 1-2 in flight
    a.add_delta(delta(3))
    recording = asyncio.create_task(a.record(log_line(4)))
    await asyncio.sleep(0.01)
    assert sink.writes == [] and not recording.done()  # waits for the batch holding 1-2
    sink.hold.set()
    await recording
    assert sink.writes == [("deltas", [("a", 1), ("a", 2)]), ("results", [("a", 3), ("a", 4)])]
    assert batcher.rows == 0 and a.unstored() == []


async def test_the_terminal_commits_with_the_pending_deltas_and_the_final_status() -> None:
    sink = FakeSink()
    batcher = DeltaBatcher(sink, batch=100, seconds=60)
    a = journal(batcher, "a")
    a.add_delta(delta(1))
    await a.record(completed(2))
    assert sink.writes == [("finish:stop", [("a", 1), ("a", 2)])]
    assert a.concluded and a.finished is not None and a.finished.status == common_pb2.RUN_STATUS_COMPLETED
    b = journal(batcher, "b")
    await b.record(completed(1), (common_pb2.RUN_STATUS_CANCELLED, "client.cancelled"))
    assert sink.writes[-1] == ("finish:client.cancelled", [("b", 1)])


async def test_shared_writes_end_in_the_order_they_began() -> None:
    sink = FakeSink()
    gate = sink.hold = asyncio.Event()
    batcher = DeltaBatcher(sink, batch=1, seconds=60)
    a = journal(batcher, "a")
    a.add_delta(delta(1))
    first = batcher.flush()
    await asyncio.sleep(0)  # the first write is in the store, held
    sink.hold = None  # the second write would finish at once, but waits for the first
    a.add_delta(delta(2))
    second = batcher.flush()
    await asyncio.sleep(0.01)
    assert not first.done() and not second.done() and sink.writes == []
    gate.set()
    await asyncio.gather(first, second)
    assert [w[1] for w in sink.writes] == [[("a", 1)], [("a", 2)]]
