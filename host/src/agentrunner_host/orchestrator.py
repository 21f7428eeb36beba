"""The run orchestrator: event -> binding -> runner.Run(ctx) -> validated result stream (HOST_SDK §4.4).

One `run()` call drives one run from the caller's task, so a caller that goes away cancels the runner
call at once. Everything a run touches is released in one place (`_finish`), on every path: the run
token is revoked, the control stream closed, the ledger finalized and followers told.

Duplicate events: the ledger keeps one run per `event_id`. A second `Run` with the same event id and the
same content starts nothing: it gets `accepted{attached: true}` with the first run's id and then that
run's stream replayed from the first result (live results follow if it is still running). The same id
with different content is refused with ALREADY_EXISTS.

Steering: when an event arrives for a conversation (and thread) that has a run open on this host whose
snapshot allows steering (the runner declares the `steering` capability and the agent's
`resource_policy.steering` is on), no second run starts. The event is recorded (event log + transcript
user message, owned by the open run), queued in the steering store (`PullSteering`, any replica) and
pushed on the open run's control stream; the caller gets `accepted{run_id: <the open run>, attached:
true}` followed by that run's live results from that point on and its final status. Unconsumed steering
input is claimed by the run when it ends, so a later run never receives stale steering.

Facts: the incoming event is recorded first (`FactStores.record_event`: event log, attachments as
artifacts -> `ctx.input.attachments` refs, transcript position -> `ctx.context`); the state snapshot
comes from the state store; every validated result is written with `FactStores.record_results`
(`message.delta` results are batched host-wide: they reach the client at once and are written with
the run's next non-delta result, or by the shared `_DeltaWriter` together with the pending deltas of
every other run once `DELTA_BATCH` rows are pending or `DELTA_BATCH_SECONDS` passed, so concurrent runs
share one transaction). A database error while running fails the run with `run.failed` code
`host.store_error` (retryable), also for every run whose deltas were in a failed shared batch; the
failed batch is rolled back whole and the host keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import hashlib
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from typing import Any

import grpc
import structlog
from google.protobuf import json_format, timestamp_pb2
from opentelemetry import trace

from agentrunner.errors import AgentRunnerError, AlreadyExistsError, FailedPreconditionError, NotFoundError
from agentrunner.failures import HOST_CODE_KINDS
from agentrunner.protocol import FINISH_ACKNOWLEDGED
from agentrunner.v1 import (
    common_pb2,
    context_pb2,
    host_service_pb2,
    proxy_service_pb2,
    result_pb2,
    runner_service_pb2,
)
from agentrunner_host.authz import RunScope, freeze_snapshot, issue_session, project_snapshot_resources
from agentrunner_host.bindings import BindingResolver, EventKey
from agentrunner_host.config import AgentConfig, HostConfig
from agentrunner_host.context_builder import (
    ContextBuilder,
    ContextPosition,
    RunnerConfigError,
    effective_runner_config,
)
from agentrunner_host.context_parity import has_reply_target
from agentrunner_host.control import ControlHub
from agentrunner_host.delivery.channel import AppendedResult, DeliveryHub, Outbox
from agentrunner_host.delivery.interactions import deliver_requested, record_requested
from agentrunner_host.delivery.store import DeliveryStore, InteractionStore
from agentrunner_host.observability import (
    RUNS,
    TIME_TO_FIRST_RESULT,
    inject_metadata,
    start_server_span,
    trace_id_of,
)
from agentrunner_host.ports import (
    TERMINAL_STATUSES,
    AuthorizationSnapshot,
    RunRecord,
    utcnow,
)
from agentrunner_host.proxy.capabilities import Backends
from agentrunner_host.registry import RunnerRegistry
from agentrunner_host.store.db import PendingWrite
from agentrunner_host.store.fact_stores import FactStores, RecordedEvent
from agentrunner_host.validation import Limits, ResultValidator

log = structlog.get_logger("agentrunner_host.orchestrator")

Update = host_service_pb2.HostServiceRunResponse

#: pending deltas (of all runs) that start a shared write; a non-delta result flushes its run at once.
#: Large on purpose: each run's deltas in a batch share one ledger row (`ledger.packed_rows`), and with
#: many runs streaming, a batch writes about one index page per run whatever its size, so bigger
#: batches write far less per delta (measured with 100 streaming runs: 2,000-delta batches cost the
#: writer about a third of what 300-delta batches did).
DELTA_BATCH = 2048
#: pending deltas are written at the latest this long after the oldest of them arrived (the window in
#: which a delta already streamed to the client is not yet durable)
DELTA_BATCH_SECONDS = 0.25
#: runner messages read ahead of the run loop (at most)
READ_AHEAD = 32

STATUS_NAMES: dict[int, str] = {
    v: common_pb2.RunStatus.Name(v).removeprefix("RUN_STATUS_").lower() for v in common_pb2.RunStatus.values()
}


@dataclasses.dataclass(slots=True)
class RunStart:
    """What the run-start transaction wrote, and what it prepared without I/O before it."""

    record: RunRecord
    recorded: RecordedEvent | None = None
    runner: Any = None
    runner_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    snapshot: AuthorizationSnapshot | None = None
    token: str = ""
    deadline_at: dt.datetime | None = None
    #: a run that ends before the runner is called (runner unavailable, invalid config)
    failure: result_pb2.RunResult | None = None
    #: the run-start transaction, still open: committed once the runner call is on its way (`_commit_start`)
    pending: PendingWrite | None = None


class _ReadRoom:
    """How many more runner messages the run's reader may queue unread (`READ_AHEAD` at most): a
    counter and at most one waiter (the reader), lighter than a semaphore on the per-delta path."""

    __slots__ = ("free", "waiter")

    def __init__(self, size: int) -> None:
        self.free = size
        self.waiter: asyncio.Future[None] | None = None

    async def take(self) -> None:
        while not self.free:
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        self.free -= 1

    def give(self) -> None:
        self.free += 1
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


@dataclasses.dataclass(eq=False, slots=True)
class LiveRun:
    """A run open in this process: what followers subscribe to and what cancel acts on."""

    record: RunRecord
    subscribers: list[asyncio.Queue[Update]] = dataclasses.field(default_factory=list)
    call: Any = None
    validator: ResultValidator | None = None
    cancel_reason: str = ""
    cancel_task: asyncio.Task[None] | None = None
    done: bool = False
    #: the snapshot results are written under (a minimal one until the real one is frozen)
    snapshot: AuthorizationSnapshot | None = None
    #: validated results handed to the client but not yet committed (a delta batch)
    pending: list[result_pb2.RunResult] = dataclasses.field(default_factory=list)
    #: deltas taken from `pending` by shared writes not committed yet, oldest first (followers read them)
    writing: list[result_pb2.RunResult] = dataclasses.field(default_factory=list)
    #: the shared delta write holding this run's earlier deltas (awaited before the run's next write)
    inflight: asyncio.Future[None] | None = None
    #: a shared delta write holding this run's deltas failed: the run fails with `host.store_error`
    store_failed: bool = False
    #: what `_start_run` prepared and wrote (runner, snapshot, token, recorded event)
    start: RunStart | None = None
    #: the ledger record committed with the terminal result; the token was revoked in that transaction
    finished_record: RunRecord | None = None
    revoked: bool = False
    #: delivery channel (replies, interactions) once the context is built; the pending runner read
    channel: Any = None
    read_task: asyncio.Task[None] | None = None
    read_room: _ReadRoom = dataclasses.field(default_factory=lambda: _ReadRoom(READ_AHEAD))
    #: monotonic time of the runner's last message (host stop cancels runs idle for a while first)
    last_activity: float = dataclasses.field(default_factory=time.monotonic)
    #: the run-start transaction failed to commit: the run never existed (nothing of it is written)
    unrecorded: bool = False

    @property
    def run_id(self) -> str:
        return self.record.run_id

    def publish(self, update: Update) -> None:
        for queue in self.subscribers:
            queue.put_nowait(update)

    def next_sequence(self) -> int:
        return self.validator.next_sequence() if self.validator else 1


class _DeltaWriter:
    """Host-wide `message.delta` batching: runs queue their pending deltas here and one transaction
    writes the deltas of every queued run (when `DELTA_BATCH` rows are pending or `DELTA_BATCH_SECONDS`
    passed), so the fixed cost of a commit is shared by concurrent runs. Writes run as their own tasks,
    one after another (a run's cancellation never leaves a write's outcome unknown); a failed write
    marks each of its runs `store_failed`."""

    def __init__(self, stores: FactStores) -> None:
        self.stores = stores
        #: runs with deltas in `live.pending` not yet taken by a write -> how many
        self.queued: dict[LiveRun, int] = {}
        self.rows = 0
        self.timer: asyncio.TimerHandle | None = None
        self.last: asyncio.Task[None] | None = None

    def add(self, live: LiveRun) -> bool:
        """Queues one more pending delta of `live`; True when a write is due now."""
        self.queued[live] = self.queued.get(live, 0) + 1
        self.rows += 1
        if self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(DELTA_BATCH_SECONDS, self._on_timer)
        return self.rows >= DELTA_BATCH

    def discard(self, live: LiveRun) -> None:
        """`live`'s pending deltas are written (or dropped) by the run itself."""
        self.rows -= self.queued.pop(live, 0)

    def _on_timer(self) -> None:
        self.timer = None
        if self.queued:
            self.flush()

    def flush(self) -> asyncio.Task[None]:
        """Takes every queued run's pending deltas into one write; returns its task."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        runs = list(self.queued)
        self.queued.clear()
        self.rows = 0
        batches: list[tuple[str, list[result_pb2.RunResult]]] = []
        for live in runs:
            batches.append((live.run_id, live.pending))
            live.writing.extend(live.pending)
            live.pending = []
        task = asyncio.get_running_loop().create_task(self._write(self.last, runs, batches))
        for live in runs:
            live.inflight = task
        self.last = task
        return task

    async def _write(
        self,
        previous: asyncio.Task[None] | None,
        runs: list[LiveRun],
        batches: list[tuple[str, list[result_pb2.RunResult]]],
    ) -> None:
        if previous is not None:  # in order: a run's later deltas never commit before its earlier ones
            await asyncio.wait([previous])
        try:
            await self.stores.record_deltas(batches)
        except Exception as exc:
            log.error("run.delta_batch_failed", runs=len(runs), error=repr(exc))
            for live in runs:
                live.store_failed = True
        finally:
            for live, (_, results) in zip(runs, batches, strict=True):
                del live.writing[: len(results)]  # writes end in order: this batch is the oldest
                if live.inflight is asyncio.current_task():
                    live.inflight = None
            if self.last is asyncio.current_task():
                self.last = None


@dataclasses.dataclass(slots=True)
class _ReadFailed:
    """The runner read ended with an error (or our own `call.cancel()`); re-raised by the run loop."""

    error: BaseException


async def _read_runner(call: Any, outbox: Outbox, room: _ReadRoom) -> None:
    """The run's one reader: runner messages go into the run's outbox, the same queue SendReply and
    AppendRunResult use, so the run loop waits on one queue and items keep their arrival order. At most
    `READ_AHEAD` messages wait there unread (gRPC flow control pushes back on the runner beyond that).
    A gRPC read is never cancelled midway except when the run is released."""
    first = True
    while True:
        if room.free:
            room.free -= 1
        else:
            await room.take()
        try:
            message = await call.read()
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the run was released
            outbox.put_nowait(_ReadFailed(exc))  # the call was cancelled (CancelRun grace, client gone)
            return
        except Exception as exc:
            outbox.put_nowait(_ReadFailed(exc))
            return
        outbox.put_nowait(message)
        if message is grpc.aio.EOF:
            return
        if first:  # the run loop takes the first result before the next read is started (latency)
            first = False
            await asyncio.sleep(0)


#: `HostServiceRunResponse.result`'s tag: field number, wire type 2 (length-delimited)
_RESULT_TAG = bytes(
    [host_service_pb2.HostServiceRunResponse.DESCRIPTOR.fields_by_name["result"].number << 3 | 2]
)


def wire_result(result: result_pb2.RunResult) -> bytes:
    """`HostServiceRunResponse(result=result).SerializeToString()` without building the response (which
    copies the result): the result's bytes behind the field's tag and length."""
    body = result.SerializeToString()
    size = len(body)
    if size < 0x80:
        return _RESULT_TAG + bytes((size,)) + body
    length = bytearray()
    while size >= 0x80:
        length.append(size & 0x7F | 0x80)
        size >>= 7
    length.append(size)
    return _RESULT_TAG + bytes(length) + body


def _now_ts() -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.GetCurrentTime()
    return ts


def _status_for_terminal(result: result_pb2.RunResult) -> tuple[common_pb2.RunStatus.ValueType, str]:
    if result.HasField("run_completed"):
        return common_pb2.RUN_STATUS_COMPLETED, result.run_completed.finish_reason or "stop"
    code = result.run_failed.code
    if code == "cancelled":
        return common_pb2.RUN_STATUS_CANCELLED, code
    if code == "deadline_exceeded":
        return common_pb2.RUN_STATUS_TIMEOUT, code
    return common_pb2.RUN_STATUS_FAILED, code


def _failure(
    run_id: str, sequence: int, code: str, message: str, retryable: bool, **details: Any
) -> result_pb2.RunResult:
    result = result_pb2.RunResult(run_id=run_id, sequence=sequence, timestamp=_now_ts())
    result.run_failed.code = code
    result.run_failed.message = message
    result.run_failed.retryable = retryable
    kind = HOST_CODE_KINDS.get(code)
    if kind is not None:
        details.setdefault("kind", kind.value)
    if details:
        result.run_failed.details.update(details)
    return result


class HostStoreError(Exception):
    """A fact-store write failed while running; the run fails with `host.store_error`."""


class Orchestrator:
    def __init__(
        self,
        config: HostConfig,
        registry: RunnerRegistry,
        stores: FactStores,
        hub: ControlHub,
        backends: Backends | None = None,
        proxy_endpoint: Callable[[], str] = lambda: "",
    ) -> None:
        self.config = config
        self.registry = registry
        self.stores = stores
        self.ledger = stores.ledger
        self.sessions = stores.sessions
        self.hub = hub
        self.backends = backends
        self.resolver = BindingResolver(config)
        self.contexts = ContextBuilder()
        # runner API parity (issue 8): per-run delivery channels and the interaction rows
        self.deliveries = DeliveryHub(DeliveryStore(stores.db))
        self.interaction_store = InteractionStore(stores.db)
        self.limits = Limits(
            result_max_bytes=config.limits.result_max_bytes,
            state_key_max_chars=config.limits.state_key_max_chars,
            state_value_max_bytes=config.limits.state_value_max_bytes,
        )
        self._proxy_endpoint = proxy_endpoint
        self._live: dict[str, LiveRun] = {}
        self._deltas = _DeltaWriter(stores)

    @property
    def open_runs(self) -> int:
        return len(self._live)

    # -- Run ---------------------------------------------------------------------------------------------
    @staticmethod
    def normalize_event(event: host_service_pb2.EventEnvelope) -> host_service_pb2.EventEnvelope:
        out = host_service_pb2.EventEnvelope()
        out.CopyFrom(event)
        if not out.event_id:
            out.event_id = f"evt_{uuid.uuid4().hex}"
        if not out.event_type:
            out.event_type = "message.received"
        if not out.HasField("event_time"):
            out.event_time.GetCurrentTime()
        if not out.trigger_source:
            out.trigger_source = context_pb2.TRIGGER_SOURCE_API
        return out

    async def run(
        self,
        request: host_service_pb2.HostServiceRunRequest,
        metadata: Iterable[tuple[str, Any]] = (),
        *,
        wire: bool = False,
    ) -> AsyncGenerator[Update | bytes, None]:
        """Streams one event's run: accepted, validated results (exactly one terminal), finished.
        Raises typed errors (binding not found, ALREADY_EXISTS, ...) before the first update.

        `wire=True` (the `Run` RPC, whose serializer passes bytes through): `message.delta` results come
        as their serialized update (`wire_result`), which saves building and copying a response for
        most of a stream; everything else is an `Update`. Without it, every item is an `Update`."""
        event = self.normalize_event(request.event)
        conv = event.conversation
        key = EventKey(
            event.event_type,
            bot_id=event.bot_id or conv.bot_id,
            workspace_id=event.workspace_id or conv.workspace_id,
            conversation_id=conv.conversation_id,
        )
        resolution = self.resolver.resolve(key, request.agent_id)
        if resolution.agent is None:
            RUNS.labels("discarded").inc()
            log.info("run.discarded", event_id=event.event_id, binding_id=resolution.binding_id)
            yield Update(
                accepted=host_service_pb2.RunAccepted(
                    binding_id=resolution.binding_id, event_id=event.event_id
                )
            )
            yield Update(
                finished=host_service_pb2.RunFinished(
                    status=common_pb2.RUN_STATUS_DISCARDED, reason="binding.discard"
                )
            )
            return
        agent = resolution.agent
        steered = self._steerable_run(conv.conversation_id, conv.thread_id)
        if steered is not None:
            async with contextlib.aclosing(self._steer_into(steered, event)) as updates:
                async for update in updates:
                    yield update
            return
        # digest of the event as submitted (before the host fills in times), to tell a retry from a clash
        digest = hashlib.sha256(
            request.event.SerializeToString(deterministic=True) + request.agent_id.encode()
        ).hexdigest()
        span = start_server_span("agentrunner.host.run", metadata)
        run_id = f"run_{uuid.uuid4().hex}"
        record = RunRecord(
            run_id=run_id,
            event_id=event.event_id,
            agent_id=agent.id,
            binding_id=resolution.binding_id,
            runner_id=agent.runner_id,
            conversation_id=conv.conversation_id,
            thread_id=conv.thread_id,
            bot_id=key.bot_id,
            workspace_id=key.workspace_id,
            trace_id=trace_id_of(span),
            deadline_at=utcnow() + dt.timedelta(seconds=agent.timeout_seconds),
            metadata={"event_digest": digest},
        )
        try:
            start = await self._start_run(record, event, agent)
        except BaseException:
            span.end()
            raise
        stored = start.record
        if stored.run_id != run_id:
            span.end()
            if stored.metadata.get("event_digest") != digest:
                raise AlreadyExistsError(
                    f"event {event.event_id!r} was already submitted with different content",
                    metadata={"eventId": event.event_id, "runId": stored.run_id},
                )
            log.info("run.duplicate_event", event_id=event.event_id, run_id=stored.run_id)
            async with contextlib.aclosing(self.follow(stored.run_id, 0, attached=True)) as updates:
                async for update in updates:
                    yield update
            return
        live = LiveRun(stored, snapshot=start.snapshot or self._minimal_snapshot(stored, event))
        live.start = start
        try:  # (inline rather than a generator of its own: one level less for every result)
            self._live[run_id] = live
            self.hub.open(run_id)
            structlog.contextvars.bind_contextvars(run_id=run_id, trace_id=live.record.trace_id)
            async with contextlib.aclosing(self._execute(live, event, agent, span, wire)) as items:
                async for item in items:
                    yield item
        finally:
            if not live.unrecorded:
                try:
                    self._commit_start(live)  # (the caller went away before the runner call went out)
                except Exception as exc:
                    log.error("run.start_commit_failed", error=repr(exc))
            if live.call is not None and not live.call.done():
                live.call.cancel()
            if live.unrecorded:
                log.error("run.not_recorded", reason="the run-start transaction did not commit")
                live.done = True
                self._forget(live)
            elif not live.done:
                # The caller went away (or a write failed) before the run ended: record the cancel for
                # followers and the ledger, and release everything.
                await self._abandon(live)
            structlog.contextvars.unbind_contextvars("run_id", "trace_id")
            span.end()

    async def _start_run(
        self, record: RunRecord, event: host_service_pb2.EventEnvelope, agent: AgentConfig
    ) -> RunStart:
        """Run start: resolves the runner, freezes the snapshot and issues the token (no I/O), then
        writes the run row (already `running` when the runner will be called), the event (log +
        transcript) and the session in ONE transaction. A duplicate event id writes nothing and
        returns the stored run in `record`."""
        run_id = record.run_id
        start = RunStart(record=record)
        runner = start.runner = await self.registry.resolve(agent.runner_id)
        if runner is None:
            start.failure = _failure(
                run_id,
                1,
                "runner.unavailable",
                f"runner {agent.runner_id} is not available",
                True,
                runnerId=agent.runner_id,
            )
        else:
            try:
                start.runner_config = effective_runner_config(runner.manifest, agent.runner_config)
            except RunnerConfigError as exc:
                start.failure = _failure(
                    run_id, 1, "runner.config_invalid", exc.message, False, field=exc.field or ""
                )
        session = None
        if start.failure is None:
            assert runner is not None
            deadline_at = record.deadline_at or utcnow() + dt.timedelta(seconds=agent.timeout_seconds)
            snapshot = freeze_snapshot(
                agent=agent,
                manifest=runner.manifest,
                runner_config=start.runner_config,
                scope=self._scope(record, event),
                deadline_at=deadline_at,
                backends=self.backends,
            )
            start.token, session = issue_session(snapshot, deadline_at)
            start.snapshot, start.deadline_at = snapshot, deadline_at
            record.status = common_pb2.RUN_STATUS_RUNNING
            record.started_at = utcnow()
        state_of = start.snapshot if start.snapshot is not None and start.snapshot.state_scopes else None
        # A run that will call its runner keeps the transaction open: `_execute` commits it right after the
        # call went out, so the commit overlaps the runner's start (`_commit_start`).
        start.record, start.recorded, start.pending = await self.stores.start_run(
            record, event, session, state_of, hold=start.failure is None
        )
        return start

    @staticmethod
    def _commit_start(live: LiveRun) -> None:
        """Commits the run-start transaction `_start_run` left open (a no-op once it is committed). Until
        then no client has seen the run and no proxy call could have reached it (the commit runs in the
        loop iteration that sent the runner call, before any reply can be read). If the commit fails the
        run never existed: its runner call is cancelled and the `StoreError` raised to the caller, as a
        failed run start is."""
        pending = live.start.pending if live.start is not None else None
        if pending is None or not pending.open:
            return
        try:
            pending.commit()
        except BaseException:
            live.unrecorded = True
            if live.call is not None and not live.call.done():
                live.call.cancel()
            raise

    async def _execute(
        self,
        live: LiveRun,
        event: host_service_pb2.EventEnvelope,
        agent: AgentConfig,
        span: trace.Span,
        wire: bool = False,
    ) -> AsyncGenerator[Update | bytes, None]:
        run_id = live.run_id
        record = live.record
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        call = None
        failure: result_pb2.RunResult | None = None
        received_any = False
        first = True
        # `accepted` goes out once the runner call is on its way (the runner starts while the client
        # receives it), or before the failure when the run fails before that.
        accepted_sent = False
        accepted = Update(
            accepted=host_service_pb2.RunAccepted(
                run_id=run_id,
                runner_id=record.runner_id,
                binding_id=record.binding_id,
                agent_id=record.agent_id,
                trace_id=record.trace_id,
                event_id=record.event_id,
            )
        )
        log.info(
            "run.accepted", runner_id=record.runner_id, binding_id=record.binding_id, event_id=record.event_id
        )
        try:
            # run row, event, transcript message and session were written by `_start_run`
            start = live.start
            assert start is not None and start.recorded is not None
            recorded, runner, runner_config, failure = (
                start.recorded,
                start.runner,
                start.runner_config,
                start.failure,
            )
            if failure is None:
                assert runner is not None and start.snapshot is not None and start.deadline_at is not None
                snapshot, token, deadline_at = start.snapshot, start.token, start.deadline_at
                state = recorded.state or {}  # read in the run-start transaction
                validator = live.validator = ResultValidator(snapshot, self.limits)
                ctx = await self.contexts.build(
                    event=event,
                    agent=agent,
                    snapshot=snapshot,
                    runner_config=runner_config,
                    trace_id=record.trace_id,
                    deadline_at=deadline_at,
                    resources=project_snapshot_resources(snapshot, self.backends),
                    position=ContextPosition(
                        latest_cursor=recorded.latest_cursor,
                        event_seq=recorded.event_seq,
                        transcript_seq=recorded.transcript_seq,
                        has_history_before=recorded.has_history_before,
                        attachments=recorded.attachments,
                    ),
                    state=state,
                    manifest=runner.manifest,
                )
                live.channel = self.deliveries.open(live, ctx.delivery)
                validator.interaction_capabilities = live.channel.interactions
                request = runner_service_pb2.RunRequest(
                    runner_id=runner.runner_id,
                    runner_name=runner.manifest.name or runner.runner_id.rsplit("/", 1)[-1],
                    context=ctx,
                    run_token=token,
                    host_api_endpoint=self._proxy_endpoint(),
                )
                endpoint = self.registry.endpoint_of(runner)
                metadata = endpoint.metadata + tuple(inject_metadata(trace.set_span_in_context(span)))
                timeout = max(0.001, (deadline_at - utcnow()).total_seconds())
                call = live.call = endpoint.stub.Run(request, timeout=timeout, metadata=metadata)
                # grpc.aio sends the request from a task of its own: let it go out, then commit the run start
                # while the runner starts (and before anything of the run reaches a client)
                await asyncio.sleep(0)
                self._commit_start(live)
                live.last_activity = time.monotonic()
                live.read_task = asyncio.create_task(
                    _read_runner(call, live.channel.outbox, live.read_room), name=f"read-{run_id}"
                )
                del request, ctx
                yield accepted
                accepted_sent = True
                drain_until: float | None = None
                try:
                    while True:
                        if drain_until is None:
                            outbox = live.channel.outbox
                            # items waiting already (the usual case while streaming): no coroutine
                            response = (
                                self._unwrap(live, outbox.get_nowait())
                                if len(outbox)
                                else await self._next_item(live, call)
                            )
                        else:
                            left = drain_until - loop.time()
                            if left <= 0:
                                break
                            try:
                                response = await asyncio.wait_for(self._next_item(live, call), left)
                            except TimeoutError:
                                break
                        if response is grpc.aio.EOF:
                            break
                        if isinstance(response, Update):  # a reply / interaction delivered meanwhile
                            yield response
                            continue
                        appended = None
                        if isinstance(response, AppendedResult):  # AppendRunResult on this open run
                            appended = response
                            response = runner_service_pb2.RunResponse(result=appended.result)
                        if not isinstance(response, runner_service_pb2.RunResponse):
                            # grpc.aio hands back None for a message it could not deserialize
                            if validator.terminal is None:
                                failure = _failure(
                                    run_id,
                                    0,
                                    "runner.protocol_error",
                                    "the runner sent a message that is not a RunResponse",
                                    False,
                                )
                            log.warning("run.undecodable_message")
                            break
                        received_any = True
                        result = validator.accept(response.result)
                        if result is None:
                            if appended is not None:
                                appended.future.set_result(None)
                            continue
                        kind = validator.kind
                        if kind == "message_delta" and not live.store_failed:
                            if self._queue_delta(live, result):  # the common case, without a coroutine
                                await self._write_deltas(live)
                        else:
                            if kind == "interaction_requested":
                                if not await record_requested(
                                    self.interaction_store, live, event.actor, result
                                ):
                                    validator.retract(result)
                                    continue
                                validator.saw_message = True  # an interaction is output (grammar rule 7)
                            elif (
                                kind == "run_completed"
                                and not validator.saw_message
                                and result.run_completed.finish_reason != FINISH_ACKNOWLEDGED
                            ):  # grammar rule 7: no output is an error, unless the service only acknowledged
                                result = self._empty_output(result)
                                validator.terminal = result
                            await self._store(live, result)
                        if first:
                            first = False
                            TIME_TO_FIRST_RESULT.observe(time.monotonic() - started)
                        yield (
                            wire_result(result) if wire and kind == "message_delta" else Update(result=result)
                        )
                        if appended is not None:
                            appended.future.set_result(result)
                        if kind == "interaction_requested":
                            await deliver_requested(
                                live.channel,
                                self.interaction_store,
                                result.interaction_requested.interaction.interaction_id,
                                self.stores.transcript,
                            )
                        if validator.terminal is not None and drain_until is None:
                            drain_until = loop.time() + self.config.limits.post_terminal_drain_seconds
                except grpc.aio.AioRpcError as exc:
                    if validator.terminal is None:
                        failure = self._classify(live, runner, exc, received_any)
                    else:
                        log.warning("run.error_after_terminal", code=exc.code().name)
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise  # the caller went away; `finally` cleans up
                    if validator.terminal is None:  # our own call.cancel() after a CancelRun grace period
                        failure = _failure(run_id, 0, "cancelled", live.cancel_reason or "cancelled", False)
                if failure is None and validator.terminal is None:
                    failure = _failure(
                        run_id,
                        0,
                        "runner.no_terminal",
                        "the runner stream ended without a terminal result",
                        True,
                    )
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except HostStoreError as exc:
            log.error("run.store_error", error=str(exc), cause=repr(exc.__cause__))
            self._drop_pending(live)  # the failed batch was rolled back whole
            failure = _failure(
                run_id, 0, "host.store_error", "the host could not record this run's facts", True
            )
        except Exception:
            if live.unrecorded:
                raise
            self._commit_start(live)  # (failed before the runner call went out)
            log.exception("run.host_error")
            if not live.done and (live.validator is None or live.validator.terminal is None):
                failure = _failure(run_id, 0, "host.error", "the host failed while running this run", True)
            else:
                failure = None
        finally:
            if call is not None and not call.done():
                call.cancel()
        if not accepted_sent:
            yield accepted
        if failure is not None:
            failure.sequence = live.next_sequence()
            if live.validator is not None:
                live.validator.terminal = failure
            try:
                await self._store(live, failure)
            except HostStoreError as exc:
                self._drop_pending(live)
                log.error("run.store_error", error=str(exc), stage="terminal")
                live.publish(Update(result=failure))
            yield Update(result=failure)
        terminal = live.validator.terminal if live.validator is not None else failure
        assert terminal is not None
        status, reason = _status_for_terminal(terminal)
        for update in await self.deliveries.close(run_id):  # open replies ABORTed, unread items
            yield update
        yield await self._finish(live, status, reason, terminal)

    @staticmethod
    def _scope(record: RunRecord, event: host_service_pb2.EventEnvelope) -> RunScope:
        return RunScope(
            run_id=record.run_id,
            binding_id=record.binding_id,
            event_id=record.event_id,
            conversation_id=record.conversation_id,
            thread_id=record.thread_id,
            bot_id=record.bot_id,
            workspace_id=record.workspace_id,
            actor_id=event.actor.actor_id,
            subject_id=event.subject.subject_id,
            reply=has_reply_target(event),
        )

    @staticmethod
    async def _next_item(live: LiveRun, call: Any) -> Any:
        """The next item of the run in arrival order: a runner message (read by the run's one reader task,
        `_read_runner`) or a reply / interaction / appended result delivered meanwhile."""
        channel = live.channel
        if channel is None:
            return await call.read()
        return Orchestrator._unwrap(live, await channel.outbox.get())

    @staticmethod
    def _unwrap(live: LiveRun, item: Any) -> Any:
        """An outbox item as the run loop handles it (a failed read raises its error)."""
        if type(item) is not runner_service_pb2.RunResponse and isinstance(item, (Update, AppendedResult)):
            return item
        live.read_room.give()
        live.last_activity = time.monotonic()
        if isinstance(item, _ReadFailed):
            raise item.error
        return item

    @staticmethod
    def _empty_output(result: result_pb2.RunResult) -> result_pb2.RunResult:
        failed = _failure(
            result.run_id,
            result.sequence,
            "runner.empty_output",
            "the runner completed without any message",
            False,
        )
        failed.usage.CopyFrom(result.usage)
        log.warning("run.empty_output")
        return failed

    def _classify(
        self, live: LiveRun, runner: Any, exc: grpc.aio.AioRpcError, received_any: bool
    ) -> result_pb2.RunResult:
        code = exc.code()
        run_id = live.run_id
        log.warning("run.runner_call_failed", code=code.name, received_any=received_any)
        if code == grpc.StatusCode.CANCELLED and live.cancel_reason:
            return _failure(run_id, 0, "cancelled", live.cancel_reason, False)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return _failure(run_id, 0, "deadline_exceeded", "the run deadline passed", True)
        if code == grpc.StatusCode.UNAVAILABLE and not received_any:
            self.registry.mark_unreachable(runner, f"UNAVAILABLE: {exc.details()}")
            return _failure(
                run_id, 0, "runner.unavailable", f"runner {runner.runner_id} is unreachable", True
            )
        details = (exc.details() or "").lower()
        if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN) and "deserializ" in details:
            return _failure(
                run_id,
                0,
                "runner.protocol_error",
                "the runner sent a message that is not a RunResponse",
                False,
            )
        return _failure(
            run_id,
            0,
            "runner.stream_broken",
            f"the runner stream broke ({code.name}) before a terminal result",
            True,
            grpcCode=code.name,
        )

    async def _store(
        self,
        live: LiveRun,
        result: result_pb2.RunResult,
        finish: tuple[common_pb2.RunStatus.ValueType, str] | None = None,
    ) -> None:
        """Records a validated result (batched for `message.delta`) and tells followers. Raises
        `HostStoreError` when the write fails (the batch is rolled back whole).

        Durability: a delta reaches the client before it is committed (host-wide, at most `DELTA_BATCH`
        queued deltas, or `DELTA_BATCH_SECONDS` of them, plus the shared write in progress are only in
        memory); every other result is committed first, together with the run's earlier deltas: the
        shared write holding some of them is awaited first (its failure fails this run too, so nothing of
        a run commits after a lost delta), the rest go into the result's own transaction, in order. A
        terminal result is committed together with the pending deltas, the run's final status
        (`finish`, else the one the terminal implies) and the revoked token, in one transaction, so the
        client never sees a terminal result (nor `finished`) that is not stored."""
        if live.store_failed:  # a shared delta write with this run's deltas failed
            live.store_failed = False
            raise HostStoreError("recording results failed: an earlier delta batch was rolled back")
        kind = result.WhichOneof("payload")
        if kind == "message_delta":
            if self._queue_delta(live, result):
                await self._write_deltas(live)
            return
        live.pending.append(result)
        self._deltas.discard(live)  # this run's pending deltas go with this result, in order
        await self._settle(live)
        if kind in ("run_completed", "run_failed"):
            await self._flush_terminal(live, result, finish)
        else:
            await self._flush(live)
        if live.subscribers:
            live.publish(Update(result=result))

    def _queue_delta(self, live: LiveRun, result: result_pb2.RunResult) -> bool:
        """`_store` of a `message.delta` up to the shared write (no await: the per-delta path); True when
        that write is due now (`_write_deltas`)."""
        live.pending.append(result)
        if live.subscribers:
            live.publish(Update(result=result))
        return self._deltas.add(live)

    async def _write_deltas(self, live: LiveRun) -> None:
        await asyncio.shield(self._deltas.flush())  # back-pressure on the busiest producer
        if live.store_failed:
            live.store_failed = False
            raise HostStoreError("recording results failed: the delta batch was rolled back")

    @staticmethod
    async def _settle(live: LiveRun) -> None:
        """Waits for the shared delta write holding this run's earlier deltas; raises `HostStoreError`
        when it failed (so nothing of the run commits after a lost delta)."""
        inflight = live.inflight
        if inflight is not None:
            await asyncio.wait([inflight])
        if live.store_failed:
            live.store_failed = False
            raise HostStoreError("recording results failed: an earlier delta batch was rolled back")

    def _drop_pending(self, live: LiveRun) -> None:
        self._deltas.discard(live)
        live.pending.clear()

    async def _flush_terminal(
        self,
        live: LiveRun,
        terminal: result_pb2.RunResult,
        finish: tuple[common_pb2.RunStatus.ValueType, str] | None,
    ) -> None:
        status, reason = finish or _status_for_terminal(terminal)
        usage = json_format.MessageToDict(terminal.usage) if terminal.HasField("usage") else None
        batch = list(live.pending)
        assert live.snapshot is not None
        try:
            live.finished_record = await self.stores.finish_run(live.snapshot, batch, status, reason, usage)
        except AgentRunnerError as exc:
            raise HostStoreError(f"recording results failed: {exc.reason}: {exc.message}") from exc
        live.revoked = True
        del live.pending[: len(batch)]

    async def _flush(self, live: LiveRun) -> None:
        batch = list(live.pending)
        if not batch:
            return
        assert live.snapshot is not None
        try:
            await self.stores.record_results(live.snapshot, batch)
        except AgentRunnerError as exc:
            raise HostStoreError(f"recording results failed: {exc.reason}: {exc.message}") from exc
        del live.pending[: len(batch)]

    @staticmethod
    def _minimal_snapshot(record: RunRecord, event: host_service_pb2.EventEnvelope) -> AuthorizationSnapshot:
        """What results are written under before the real snapshot exists (e.g. runner unavailable)."""
        return AuthorizationSnapshot(
            run_id=record.run_id,
            runner_id=record.runner_id,
            agent_id=record.agent_id,
            binding_id=record.binding_id,
            event_id=record.event_id,
            conversation_id=record.conversation_id,
            thread_id=record.thread_id,
            bot_id=record.bot_id,
            workspace_id=record.workspace_id,
            actor_id=event.actor.actor_id,
            subject_id=event.subject.subject_id,
        )

    async def _finish(
        self,
        live: LiveRun,
        status: common_pb2.RunStatus.ValueType,
        reason: str,
        terminal: result_pb2.RunResult | None,
    ) -> Update:
        live.done = True
        if live.validator is not None:
            live.validator.report_metrics()
        usage = (
            json_format.MessageToDict(terminal.usage)
            if terminal is not None and terminal.HasField("usage")
            else None
        )
        record = live.finished_record  # committed with the terminal result (`_flush_terminal`)
        try:
            if record is None:
                record = await self.ledger.finish_run(live.run_id, status, reason, usage)
        except AgentRunnerError as exc:
            log.error("run.finish_not_recorded", error=exc.message)
        finally:
            await self._release(live)
        final_status = record.status if record else status
        finished = host_service_pb2.RunFinished(
            run_id=live.run_id, status=final_status, reason=record.status_reason if record else reason
        )
        if terminal is not None and terminal.HasField("usage"):
            finished.usage.CopyFrom(terminal.usage)
        update = Update(finished=finished)
        live.publish(update)
        RUNS.labels(STATUS_NAMES.get(final_status, str(final_status))).inc()
        log.info("run.finished", status=STATUS_NAMES.get(final_status), reason=finished.reason)
        return update

    async def append_to_open_run(
        self, run_id: str, result: result_pb2.RunResult
    ) -> result_pb2.RunResult | bool | None:
        """`AppendRunResult` on a run open in this process joins its stream (numbered by the host, so it
        never clashes with the runner's results). False when the run is not open here."""
        channel = self.deliveries.get(run_id)
        if channel is None:
            return False
        return await channel.append(result)

    async def _release(self, live: LiveRun) -> None:
        self._forget(live)
        try:
            if not live.revoked:
                await self.sessions.unregister(live.run_id)
            snap = live.snapshot
            if snap is not None and snap.steering and snap.conversation_id:
                # steering input queued for this run and never consumed is the run's, not the next one's
                await self.stores.steering.claim(run_id=live.run_id, conversation_id=snap.conversation_id)
        except AgentRunnerError as exc:
            log.error("run.release_failed", error=exc.message)

    def _forget(self, live: LiveRun) -> None:
        """What `_release` lets go of in this process (the run's tasks, channels and registrations)."""
        self._live.pop(live.run_id, None)
        self._deltas.discard(live)
        self.deliveries.discard(live.run_id)
        if live.read_task is not None and not live.read_task.done():
            live.read_task.cancel()
        self.hub.close(live.run_id)
        if live.cancel_task is not None and live.cancel_task is not asyncio.current_task():
            live.cancel_task.cancel()

    async def _abandon(self, live: LiveRun) -> None:
        if live.call is not None and not live.call.done():
            live.call.cancel()
        self.hub.send_cancel(live.run_id, "client cancelled", 0)
        reason = live.cancel_reason or "client.cancelled"
        try:
            terminal = None
            if live.validator is None or live.validator.terminal is None:
                terminal = _failure(live.run_id, live.next_sequence(), "cancelled", reason, False)
                try:
                    await self._store(live, terminal, (common_pb2.RUN_STATUS_CANCELLED, reason))
                except HostStoreError:
                    self._drop_pending(live)
                    log.error("run.store_error", stage="abandon")
            await self._finish(live, common_pb2.RUN_STATUS_CANCELLED, reason, terminal)
        except Exception:
            log.exception("run.abandon_failed")
        finally:
            if not live.done:
                live.done = True
            await self._release(live)

    # -- followers -------------------------------------------------------------------------------------
    async def follow(
        self, run_id: str, after_sequence: int = 0, attached: bool = False
    ) -> AsyncGenerator[Update, None]:
        """A run's stream for a second caller: stored results after `after_sequence`, then live ones."""
        record = await self.ledger.get_run(run_id)
        if record is None:
            raise NotFoundError(f"run {run_id!r} does not exist", metadata={"runId": run_id})
        live = self._live.get(run_id)
        queue: asyncio.Queue[Update] | None = None
        if live is not None and not live.done:
            queue = asyncio.Queue()
            live.subscribers.append(queue)
        try:
            yield Update(
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
            last = after_sequence
            # delivered replies / interactions, replayed in order with the results they followed
            replay = await self.deliveries.replayer(run_id, after_sequence)
            while True:
                # Results handed out but not committed yet (delta batches, being written or pending)
                # are only in memory. Taken BEFORE reading the store: a batch that commits meanwhile is
                # then in one of the two, never in neither.
                unstored = [*live.writing, *live.pending] if queue is not None and live is not None else []
                for result in await self.ledger.list_results(run_id, last):
                    last = result.sequence
                    for item in replay.before(result.sequence):
                        yield item
                    yield Update(result=result)
                if queue is not None:
                    for result in unstored:
                        if result.sequence > last:
                            last = result.sequence
                            yield Update(result=result)
                    for item in replay.rest():
                        yield item
                    break
                record = await self.ledger.get_run(run_id)
                if record is None or record.status in TERMINAL_STATUSES:
                    await replay.refresh()
                    for result in await self.ledger.list_results(run_id, last):
                        last = result.sequence
                        for item in replay.before(result.sequence):
                            yield item
                        yield Update(result=result)
                    for item in replay.rest():
                        yield item
                    yield self._finished_from(record, run_id)
                    return
                await asyncio.sleep(0.2)  # a run open on another replica: poll the shared ledger
                await replay.refresh()
            while True:
                update = await queue.get()
                if update.HasField("result"):
                    if update.result.sequence <= last:
                        continue
                    last = update.result.sequence
                elif not update.HasField("finished") and replay.seen(update):
                    continue
                yield update
                if update.HasField("finished"):
                    return
        finally:
            if queue is not None and live is not None and queue in live.subscribers:
                live.subscribers.remove(queue)

    @staticmethod
    def _finished_from(record: RunRecord | None, run_id: str) -> Update:
        finished = host_service_pb2.RunFinished(run_id=run_id)
        if record is not None:
            finished.status = record.status
            finished.reason = record.status_reason
            if record.usage:
                json_format.ParseDict(record.usage, finished.usage, ignore_unknown_fields=True)
        return Update(finished=finished)

    # -- records and cancel ----------------------------------------------------------------------------
    async def get_run(self, run_id: str) -> RunRecord:
        record = await self.ledger.get_run(run_id)
        if record is None:
            raise NotFoundError(f"run {run_id!r} does not exist", metadata={"runId": run_id})
        return record

    async def cancel_run(self, run_id: str, reason: str = "") -> RunRecord:
        """Pushes a cancel signal on the control stream, then cancels the runner call after the grace."""
        record = await self.get_run(run_id)
        if record.status in TERMINAL_STATUSES:
            raise FailedPreconditionError(
                f"run {run_id!r} already ended",
                metadata={"runId": run_id, "status": STATUS_NAMES[record.status]},
            )
        updated = await self.ledger.request_cancel(run_id, utcnow()) or record
        live = self._live.get(run_id)
        if live is not None and not live.cancel_reason:
            grace = self.config.limits.cancel_grace_seconds
            live.cancel_reason = reason or "cancelled by request"
            self.hub.send_cancel(run_id, live.cancel_reason, grace)
            live.cancel_task = asyncio.create_task(self._cancel_after(live, grace), name=f"cancel-{run_id}")
            log.info("run.cancel_requested", run_id=run_id, grace_seconds=grace)
        return updated

    def cancel_idle(self, idle_seconds: float, reason: str = "host.shutdown") -> int:
        """Host stop: cancels the runner call of every open run whose runner has sent nothing for
        `idle_seconds` (stalled or waiting runs), so stopping does not wait the whole drain grace for
        them; runs producing results keep draining. Each cancelled run ends through its own loop as
        `run.failed` (`cancelled`), written in one transaction. Returns how many were cancelled."""
        now = time.monotonic()
        cancelled = 0
        for live in list(self._live.values()):
            call = live.call
            if live.done or call is None or call.done() or now - live.last_activity < idle_seconds:
                continue
            live.cancel_reason = live.cancel_reason or reason
            self.hub.send_cancel(live.run_id, live.cancel_reason, 0)
            call.cancel()
            cancelled += 1
        return cancelled

    @staticmethod
    async def _cancel_after(live: LiveRun, grace: float) -> None:
        await asyncio.sleep(grace)
        if not live.done and live.call is not None and not live.call.done():
            live.call.cancel()

    # -- steering --------------------------------------------------------------------------------------
    def _steerable_run(self, conversation_id: str, thread_id: str) -> LiveRun | None:
        """The open run of this conversation/thread that accepts steering, if any."""
        if not conversation_id:
            return None
        for live in self._live.values():
            rec = live.record
            v = live.validator
            if (
                not live.done
                and rec.conversation_id == conversation_id
                and rec.thread_id == thread_id
                and v is not None
                and v.terminal is None
                and v.snapshot.steering
            ):
                return live
        return None

    @staticmethod
    def _steering_item(event: host_service_pb2.EventEnvelope) -> proxy_service_pb2.SteeringInput:
        item = proxy_service_pb2.SteeringInput(steering_id=f"steer_{uuid.uuid4().hex[:16]}")
        item.event.event_id = event.event_id
        item.event.event_type = event.event_type
        item.event.event_time.CopyFrom(event.event_time)
        item.event.source = event.source or "api"
        item.input.text = event.input.text
        item.input.contents.extend(event.input.contents)
        if event.HasField("actor"):
            item.actor.CopyFrom(event.actor)
        item.receive_time.GetCurrentTime()
        return item

    async def steer(self, run_id: str, event: host_service_pb2.EventEnvelope) -> str | None:
        """Queues new input for an open steering run: recorded (event log + transcript), stored in the
        steering queue (`PullSteering`, any replica) and pushed on the control stream. Returns the
        steering id, or None when the run is not open here or does not accept steering."""
        live = self._live.get(run_id)
        if live is None or live.done or live.validator is None or not live.validator.snapshot.steering:
            return None
        event = self.normalize_event(event)
        rec = live.record
        recorded = await self.stores.record_event(
            event, run_id=run_id, runner_id=rec.runner_id, binding_id=rec.binding_id
        )
        item = self._steering_item(event)
        item.input.attachments.extend(recorded.attachments)
        if not recorded.created:
            return None  # a redelivered event: it was queued the first time
        stored = await self.stores.steering.enqueue(
            conversation_id=rec.conversation_id, thread_id=rec.thread_id, item=item
        )
        self.hub.send_steering(run_id, stored)
        log.info("run.steered", run_id=run_id, event_id=event.event_id, steering_id=stored.steering_id)
        return stored.steering_id

    async def _steer_into(
        self, live: LiveRun, event: host_service_pb2.EventEnvelope
    ) -> AsyncGenerator[Update, None]:
        after = live.validator.host_sequence if live.validator is not None else 0
        await self.steer(live.run_id, event)
        async with contextlib.aclosing(self.follow(live.run_id, after, attached=True)) as updates:
            async for update in updates:
                yield update

    def open_run_for_conversation(self, conversation_id: str, thread_id: str = "") -> str | None:
        live = self._steerable_run(conversation_id, thread_id)
        return live.run_id if live is not None else None

    def usage_dict(self, usage: Mapping[str, Any]) -> dict[str, Any]:
        return dict(usage)
