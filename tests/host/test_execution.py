"""One run's execution without a transport or a database: a scripted runner call and an in-memory
store. The run records its start, streams accepted -> results -> finished, decides its terminal (the
host's own when the runner's stream breaks or ends early) and releases everything on every path."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import types
from collections.abc import Sequence
from typing import Any

import grpc
import pytest

from agentrunner.errors import RuntimeFailureError
from agentrunner.v1 import common_pb2, host_service_pb2, manifest_pb2, result_pb2, runner_service_pb2
from agentrunner_host.config.model import parse_config
from agentrunner_host.delivery.channel import DeliveryHub
from agentrunner_host.ports import AuthorizationSnapshot, RecordedEvent, RunRecord, RunSession, StartedRun
from agentrunner_host.proxy.control import ControlHub
from agentrunner_host.registry.endpoints import RegisteredRunner
from agentrunner_host.run.service import RunService

pytestmark = pytest.mark.asyncio
RUNNER_ID = "plugin:test/fake/default"
Update = host_service_pb2.HostServiceRunResponse


#: a script item: the runner sends nothing more (the read waits until the call is cancelled)
STALL = object()


def result(**payload: Any) -> runner_service_pb2.RunResponse:
    return runner_service_pb2.RunResponse(result=result_pb2.RunResult(**payload))


class ScriptedCall:
    """The runner's side of `RunnerService.Run`: its scripted messages, then EOF or an error."""

    def __init__(self, request: runner_service_pb2.RunRequest, script: list[Any]) -> None:
        self.run_id = request.context.run_id
        self.script = list(script)
        self.cancelled = False
        self._cancel = asyncio.Event()
        #: the stream ended (EOF sent): like grpc.aio, the call is done
        self.ended = False

    async def read(self) -> Any:
        await asyncio.sleep(0)
        if self.cancelled:
            raise asyncio.CancelledError
        if not self.script:
            self.ended = True
            return grpc.aio.EOF
        item = self.script.pop(0)
        if item is STALL:  # like grpc.aio, a read waiting when the call is cancelled raises
            await self._cancel.wait()
            raise asyncio.CancelledError
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, runner_service_pb2.RunResponse):
            item.result.run_id = self.run_id
        return item

    def done(self) -> bool:
        return self.cancelled or self.ended

    def cancel(self) -> bool:
        self.cancelled = True
        self._cancel.set()
        return True


@dataclasses.dataclass
class FakeEndpoint:
    script: list[Any]
    metadata: tuple[tuple[str, str], ...] = ()
    calls: list[ScriptedCall] = dataclasses.field(default_factory=list)
    config: Any = dataclasses.field(default_factory=lambda: types.SimpleNamespace(address="fake:0"))

    @property
    def stub(self) -> FakeEndpoint:
        return self

    def Run(self, request: runner_service_pb2.RunRequest, **_: Any) -> ScriptedCall:
        call = ScriptedCall(request, self.script)
        self.calls.append(call)
        return call


class FakeRegistry:
    def __init__(self, endpoint: FakeEndpoint) -> None:
        self.endpoint = endpoint
        self.runner = RegisteredRunner(
            manifest=manifest_pb2.RunnerManifest(id=RUNNER_ID, name="fake"),
            endpoint_id="fake",
            address="in-process",
            refreshed_at=dt.datetime.now(dt.UTC),
        )
        self.unreachable: list[str] = []

    async def resolve(self, runner_id: str) -> RegisteredRunner | None:
        return self.runner if runner_id == RUNNER_ID else None

    def endpoint_of(self, runner: RegisteredRunner) -> FakeEndpoint:
        return self.endpoint

    def mark_unreachable(self, runner: RegisteredRunner, reason: str) -> None:
        self.unreachable.append(reason)


class MemoryStore:
    """An in-memory `RunStore`: what was committed, by run, and which tokens were revoked."""

    def __init__(self) -> None:
        self.runs: dict[str, RunRecord] = {}
        self.results: dict[str, list[result_pb2.RunResult]] = {}
        self.sessions: Any = self
        self.ledger: Any = self
        self.steering: Any = self
        self.transcript: Any = self
        self.revoked: list[str] = []
        self.commits: list[str] = []

    async def start_run(
        self,
        record: RunRecord,
        envelope: host_service_pb2.EventEnvelope,
        session: RunSession | None = None,
        state_of: AuthorizationSnapshot | None = None,
        *,
        hold: bool = False,
    ) -> StartedRun:
        self.runs[record.run_id] = record
        self.commits.append("start")
        return StartedRun(record, RecordedEvent(1, 1, "", False, [], True, {}))

    async def record_results(
        self, snapshot: AuthorizationSnapshot, results: Sequence[result_pb2.RunResult]
    ) -> None:
        self.results.setdefault(snapshot.run_id, []).extend(results)

    async def record_deltas(self, batches: Sequence[tuple[str, Sequence[result_pb2.RunResult]]]) -> None:
        for run_id, results in batches:
            self.results.setdefault(run_id, []).extend(results)

    async def finish_run(
        self,
        snapshot: AuthorizationSnapshot,
        results: Sequence[result_pb2.RunResult],
        status: Any,
        reason: str,
        usage: Any = None,
    ) -> RunRecord:
        await self.record_results(snapshot, results)
        self.revoked.append(snapshot.run_id)
        return await self._finish(snapshot.run_id, status, reason)

    async def _finish(self, run_id: str, status: Any, reason: str) -> RunRecord:
        record = self.runs[run_id]
        record.status, record.status_reason = status, reason
        return record

    async def get_run(self, run_id: str) -> RunRecord | None:
        return self.runs.get(run_id)

    async def unregister(self, run_id: str) -> None:
        self.revoked.append(run_id)

    async def request_cancel(self, run_id: str, at: dt.datetime) -> RunRecord | None:
        return self.runs.get(run_id)

    async def claim(self, **_: Any) -> int:
        return 0


class MemoryDeliveries:
    async def add(self, run_id: str, after: int, update: Update) -> None: ...

    async def list(self, run_id: str) -> list[tuple[int, Update]]:
        return []


class RefusingStore(MemoryStore):
    """A store whose first `finish_run` fails (nothing of it is written), as a store outage would."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[list[result_pb2.RunResult]] = []

    async def finish_run(
        self,
        snapshot: AuthorizationSnapshot,
        results: Sequence[result_pb2.RunResult],
        status: Any,
        reason: str,
        usage: Any = None,
    ) -> RunRecord:
        if not self.refused:
            self.refused.append(list(results))
            raise RuntimeFailureError("the database is away")
        return await super().finish_run(snapshot, results, status, reason, usage)


class HoldingStore(MemoryStore):
    """A store that hands the run start back still open (`StartedRun.held`), as SQLite's inline path
    does: the run exists once `commit` ran; `fail` makes that commit fail (nothing recorded)."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.endpoint: FakeEndpoint | None = None
        #: calls the runner had been sent when the commit ran, per commit
        self.calls_at_commit: list[int] = []
        self.rolled_back = 0

    async def start_run(
        self,
        record: RunRecord,
        envelope: host_service_pb2.EventEnvelope,
        session: RunSession | None = None,
        state_of: AuthorizationSnapshot | None = None,
        *,
        hold: bool = False,
    ) -> StartedRun:
        assert hold  # (a run that calls its runner asks for it)
        store = self

        class Held:
            def commit(self) -> None:
                assert store.endpoint is not None
                store.calls_at_commit.append(len(store.endpoint.calls))
                if store.fail:
                    raise RuntimeFailureError("database write failed: IntegrityError")
                store.runs[record.run_id] = record
                store.commits.append("start")

            def rollback(self) -> None:
                store.rolled_back += 1

        return StartedRun(record, RecordedEvent(1, 1, "", False, [], True, {}), Held())


def service(
    script: list[Any], store: MemoryStore | None = None
) -> tuple[RunService, MemoryStore, FakeEndpoint]:
    config = parse_config(
        {
            "agents": [{"id": "a", "runner_id": RUNNER_ID, "timeout_seconds": 30}],
            "bindings": [{"id": "b", "event": "*", "target": {"agent": "a"}}],
            "limits": {"post_terminal_drain_seconds": 0.05, "cancel_grace_seconds": 0.05},
        }
    )
    store, endpoint = store or MemoryStore(), FakeEndpoint(script)
    if isinstance(store, HoldingStore):
        store.endpoint = endpoint
    runs = RunService(
        config,
        FakeRegistry(endpoint),  # type: ignore[arg-type]
        store,  # type: ignore[arg-type]
        ControlHub(),
        DeliveryHub(MemoryDeliveries()),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]  # no interactions in these runs
    )
    return runs, store, endpoint


async def run_once(runs: RunService) -> list[Update]:
    request = host_service_pb2.HostServiceRunRequest()
    request.event.input.text = "hi"
    request.event.conversation.conversation_id = "c1"
    stream = await runs.open(request)
    try:
        return [u async for u in stream]
    finally:
        await stream.aclose()


def kinds(updates: list[Update]) -> list[str | None]:
    return [
        u.result.WhichOneof("payload") if u.HasField("result") else u.WhichOneof("update") or ""
        for u in updates
    ]


async def test_a_run_streams_its_results_in_order_and_is_released() -> None:
    runs, store, _ = service(
        [
            result(message_delta=result_pb2.MessageDelta(text="he")),
            result(message_delta=result_pb2.MessageDelta(text="llo")),
            result(run_completed=result_pb2.RunCompleted()),
        ]
    )
    updates = await run_once(runs)
    assert kinds(updates) == ["accepted", "message_delta", "message_delta", "run_completed", "finished"]
    assert [u.result.sequence for u in updates[1:4]] == [1, 2, 3]
    run_id = updates[0].accepted.run_id
    assert [r.sequence for r in store.results[run_id]] == [1, 2, 3]  # every delta stored with the terminal
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    assert store.runs[run_id].status == common_pb2.RUN_STATUS_COMPLETED
    assert runs.open_runs == 0 and store.revoked == [run_id]


async def test_a_stream_that_ends_without_a_terminal_gets_the_hosts_failure() -> None:
    runs, _, _ = service([result(message_delta=result_pb2.MessageDelta(text="x"))])
    updates = await run_once(runs)
    failed = updates[-2].result.run_failed
    assert (failed.code, failed.retryable) == ("runner.no_terminal", True)
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_FAILED
    assert runs.open_runs == 0


async def test_a_completion_without_output_becomes_empty_output() -> None:
    runs, _, _ = service([result(run_completed=result_pb2.RunCompleted())])
    updates = await run_once(runs)
    assert updates[-2].result.run_failed.code == "runner.empty_output"
    assert updates[-1].finished.reason == "runner.empty_output"


async def test_a_broken_stream_is_a_retryable_failure_and_results_after_the_terminal_are_dropped() -> None:
    broken = grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), "boom")
    runs, _, _ = service([result(message_delta=result_pb2.MessageDelta(text="x")), broken])
    updates = await run_once(runs)
    failed = updates[-2].result.run_failed
    assert (failed.code, failed.retryable, failed.details["grpcCode"]) == (
        "runner.stream_broken",
        True,
        "INTERNAL",
    )
    runs, _, _ = service(
        [
            result(run_completed=result_pb2.RunCompleted(message=common_pb2.AssistantMessage(content="ok"))),
            result(message_delta=result_pb2.MessageDelta(text="late")),
        ]
    )
    updates = await run_once(runs)
    assert kinds(updates) == ["accepted", "run_completed", "finished"]


async def test_a_caller_that_leaves_mid_run_cancels_the_call_and_the_run_ends_cancelled() -> None:
    runs, store, endpoint = service([result(message_delta=result_pb2.MessageDelta(text="x"))] * 3 + [STALL])
    request = host_service_pb2.HostServiceRunRequest()
    request.event.input.text = "hi"
    stream = await runs.open(request)
    first = await stream.__anext__()
    await stream.__anext__()
    await stream.aclose()  # the caller went away
    run_id = first.accepted.run_id
    assert endpoint.calls[0].cancelled
    assert store.runs[run_id].status == common_pb2.RUN_STATUS_CANCELLED
    assert store.results[run_id][-1].run_failed.code == "cancelled"
    assert runs.open_runs == 0


async def test_a_stream_closed_before_it_was_read_still_ends_its_run() -> None:
    runs, store, endpoint = service([result(run_completed=result_pb2.RunCompleted())])
    request = host_service_pb2.HostServiceRunRequest()
    stream = await runs.open(request)
    await stream.aclose()
    (record,) = store.runs.values()
    assert record.status == common_pb2.RUN_STATUS_CANCELLED
    assert runs.open_runs == 0 and endpoint.calls == []  # the runner was never called


async def test_an_undecodable_runner_message_ends_the_run_with_a_protocol_error() -> None:
    # grpc.aio hands the reader None for a message it could not deserialize
    runs, store, _ = service([result(message_delta=result_pb2.MessageDelta(text="x")), None, STALL])
    updates = await run_once(runs)
    assert kinds(updates) == ["accepted", "message_delta", "run_failed", "finished"]
    assert updates[-2].result.run_failed.code == "runner.protocol_error"
    run_id = updates[0].accepted.run_id
    assert [r.sequence for r in store.results[run_id]] == [1, 2]
    assert store.runs[run_id].status == common_pb2.RUN_STATUS_FAILED
    assert runs.open_runs == 0


async def test_a_terminal_the_store_refuses_is_never_shown_and_the_hosts_failure_takes_its_place() -> None:
    done = result_pb2.RunCompleted(message=common_pb2.AssistantMessage(content="ok"))
    refusing = RefusingStore()
    runs, store, _ = service(
        [result(message_delta=result_pb2.MessageDelta(text="x")), result(run_completed=done)], refusing
    )
    updates = await run_once(runs)
    assert kinds(updates) == ["accepted", "message_delta", "run_failed", "finished"]
    failed = updates[-2].result
    assert failed.run_failed.code == "host.store_error" and failed.sequence == 2
    run_id = updates[0].accepted.run_id
    assert [r.WhichOneof("payload") for r in refusing.refused[0]] == ["message_delta", "run_completed"]
    # the rolled-back delta is written with the host's terminal: the ledger has no gap
    assert [(r.sequence, r.WhichOneof("payload")) for r in store.results[run_id]] == [
        (1, "message_delta"),
        (2, "run_failed"),
    ]
    assert store.runs[run_id].status == common_pb2.RUN_STATUS_FAILED
    assert runs.open_runs == 0 and store.revoked == [run_id]


async def test_a_cancel_request_stops_a_stalled_runner_after_the_grace_and_the_run_ends_cancelled() -> None:
    runs, store, endpoint = service([result(message_delta=result_pb2.MessageDelta(text="x")), STALL])
    request = host_service_pb2.HostServiceRunRequest()
    request.event.input.text = "hi"
    stream = await runs.open(request)
    try:
        accepted = await stream.__anext__()
        await stream.__anext__()  # the delta; the runner then sends nothing more
        run_id = accepted.accepted.run_id
        await runs.cancel_run(run_id, "stop now")
        rest = [u async for u in stream]
    finally:
        await stream.aclose()
    assert kinds(rest) == ["run_failed", "finished"]
    assert rest[0].result.run_failed.code == "cancelled"
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED
    assert endpoint.calls[0].cancelled
    assert store.runs[run_id].status == common_pb2.RUN_STATUS_CANCELLED
    assert runs.open_runs == 0


async def test_a_held_run_start_commits_once_the_runner_call_went_out_and_before_accepted() -> None:
    holding = HoldingStore()
    done = result_pb2.RunCompleted(message=common_pb2.AssistantMessage(content="ok"))
    runs, store, _ = service([result(run_completed=done)], holding)
    request = host_service_pb2.HostServiceRunRequest()
    request.event.input.text = "hi"
    stream = await runs.open(request)
    try:
        assert holding.calls_at_commit == [] and store.runs == {}  # nothing committed yet
        accepted = await stream.__anext__()
        assert holding.calls_at_commit == [1]  # committed after the call was sent, before `accepted`
        rest = [u async for u in stream]
    finally:
        await stream.aclose()
    run_id = accepted.accepted.run_id
    assert kinds(rest) == ["run_completed", "finished"]
    assert store.runs[run_id].status == common_pb2.RUN_STATUS_COMPLETED
    assert holding.calls_at_commit == [1] and runs.open_runs == 0  # (committed once)


async def test_a_held_run_start_that_cannot_commit_cancels_the_call_and_leaves_nothing() -> None:
    holding = HoldingStore(fail=True)
    runs, store, endpoint = service([STALL], holding)
    request = host_service_pb2.HostServiceRunRequest()
    request.event.input.text = "hi"
    stream = await runs.open(request)
    seen: list[Update] = []
    with pytest.raises(RuntimeFailureError, match="database write failed"):
        try:
            async for update in stream:
                seen.append(update)
        finally:
            await stream.aclose()
    assert seen == []  # not even `accepted`: the run never existed
    assert endpoint.calls[0].cancelled
    assert store.runs == {} and store.results == {} and store.revoked == []
    assert runs.open_runs == 0 and holding.calls_at_commit == [1]


async def test_a_held_run_start_closed_before_it_was_read_is_committed_and_ends_cancelled() -> None:
    holding = HoldingStore()
    runs, store, endpoint = service([result(run_completed=result_pb2.RunCompleted())], holding)
    stream = await runs.open(host_service_pb2.HostServiceRunRequest())
    await stream.aclose()
    (record,) = store.runs.values()
    assert holding.calls_at_commit == [0]  # committed on the way out: the runner was never called
    assert record.status == common_pb2.RUN_STATUS_CANCELLED
    assert runs.open_runs == 0 and endpoint.calls == []
