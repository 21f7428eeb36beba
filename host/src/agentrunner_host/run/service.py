"""`RunService`: event -> binding -> one run of one runner -> validated result stream (HOST_SDK §4.4),
and the other operations on runs (follow, get, cancel, steer, append). Transport-neutral: the gRPC
servicer (`services/host_service.py`) only adapts it.

`open()` does everything that can refuse an event before anything streams (typed errors: binding not
found, ALREADY_EXISTS for a reused event id with other content, a failed run-start transaction) and
returns the stream:

- no binding takes the event: `accepted` + `finished(discarded)`;
- an open run of the conversation accepts steering: the event is queued into it and the caller follows
  that run from this point on (`run/steering.py`);
- the event id already has a run with the same content: that run's stream from the first result
  (`run/followers.py`);
- else a new run: its start is recorded in one transaction (`run/start.py`) and its `RunExecution`
  streams it (`run/execution.py`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Any

import structlog

from agentrunner.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    NotFoundError,
    RateLimitedError,
    RunnerUnavailableError,
)
from agentrunner.v1 import host_service_pb2, result_pb2
from agentrunner_host.config.model import AgentConfig, HostConfig
from agentrunner_host.delivery.channel import DeliveryHub
from agentrunner_host.delivery.store import InteractionStore
from agentrunner_host.fleet.routing import Fleet
from agentrunner_host.observability.telemetry import RUNS, RUNS_OPEN, start_server_span, trace_id_of
from agentrunner_host.ports import (
    TERMINAL_STATUSES,
    AuthorizationSnapshot,
    RunRecord,
    RunStore,
    UpdateStream,
    utcnow,
)
from agentrunner_host.proxy.capabilities import Backends
from agentrunner_host.proxy.control import ControlHub
from agentrunner_host.registry.bindings import BindingResolver, EventKey, Resolution
from agentrunner_host.registry.endpoints import RunnerRegistry
from agentrunner_host.run import followers, steering
from agentrunner_host.run.context import ContextBuilder
from agentrunner_host.run.endings import Ending, Endings
from agentrunner_host.run.execution import RunExecution
from agentrunner_host.run.forwarding import Refusals, RunForwarding
from agentrunner_host.run.journal import DeltaBatcher
from agentrunner_host.run.outcomes import RunStatus, terminal_status_name
from agentrunner_host.run.relay import RunRelay
from agentrunner_host.run.start import start_run
from agentrunner_host.run.streams import RunStream, discarded, normalize_event
from agentrunner_host.run.streams import Update as Update  # (the stream item type callers import from here)
from agentrunner_host.run.validation import Limits

log = structlog.get_logger("agentrunner_host.run")


def _event_key(event: host_service_pb2.EventEnvelope) -> EventKey:
    conv = event.conversation
    return EventKey(
        event.event_type,
        bot_id=event.bot_id or conv.bot_id,
        workspace_id=event.workspace_id or conv.workspace_id,
        conversation_id=conv.conversation_id,
    )


class RunService:
    """The runs of this host process (see the module docstring)."""

    def __init__(
        self,
        config: HostConfig,
        registry: RunnerRegistry,
        stores: RunStore,
        hub: ControlHub,
        deliveries: DeliveryHub,
        interaction_store: InteractionStore,
        backends: Backends | None = None,
        proxy_endpoint: Callable[[], str] = lambda: "",
    ) -> None:
        self.config = config
        self.registry = registry
        self.stores = stores
        self.hub = hub
        self.deliveries = deliveries
        self.interaction_store = interaction_store
        self.backends = backends
        self.proxy_endpoint = proxy_endpoint
        self.resolver = BindingResolver(config)
        self.contexts = ContextBuilder()
        self.limits = Limits(
            result_max_bytes=config.limits.result_max_bytes,
            state_key_max_chars=config.limits.state_key_max_chars,
            state_value_max_bytes=config.limits.state_value_max_bytes,
        )
        self.batcher = DeltaBatcher(stores)
        self._open: dict[str, RunExecution] = {}
        #: the open runs of each conversation (in opening order): steering looks at the event's
        #: conversation's runs only, not at every open run (a scan that made opening a run O(open runs))
        self._by_conversation: dict[str, dict[str, RunExecution]] = {}
        #: runs between admission and the open-run table (their start transaction is under way)
        self._starting = 0
        #: ended runs whose ending could not be written yet (`settle_later`)
        self.endings = Endings(stores)
        #: with several replicas on one database: the runs' operations across them (`attach_fleet`)
        self.relay: RunRelay | None = None
        #: runs on runtimes connected to other replicas (`run/forwarding.py`)
        self.forwarding: RunForwarding | None = None
        #: how often a follower of a run open on another replica reads the ledger without a wake-up
        self.poll_seconds = followers.POLL_SECONDS

    def attach_fleet(self, fleet: Fleet) -> None:
        """Serves other replicas' operations on the runs open here and hands them this replica's on
        theirs (`run/relay.py`); their followers here are woken by their commits."""
        relay = self.relay = RunRelay(self, fleet, self.stores.ledger)
        self.forwarding = RunForwarding(self, fleet, self.registry)
        self.batcher.on_stored = relay.stored
        self.deliveries.on_stored = relay.stored
        self.poll_seconds = max(fleet.bus.poll_seconds, followers.POLL_SECONDS)

    @property
    def open_runs(self) -> int:
        return len(self._open)

    def is_open(self, run_id: str) -> bool:
        """Whether the run is open in this process (another replica's runs: `relay`)."""
        execution = self._open.get(run_id)
        return execution is not None and not execution.finished

    def open_run(self, run_id: str) -> RunExecution | None:
        """The run, while it is open in this process."""
        execution = self._open.get(run_id)
        return execution if execution is not None and not execution.finished else None

    def forget(self, run_id: str) -> None:
        """`RunExecution.release`: the run is no longer open here (`run.host.RunHost`)."""
        execution = self._open.pop(run_id, None)
        if execution is not None:
            RUNS_OPEN.dec()
            conversation = execution.record.conversation_id
            runs = self._by_conversation.get(conversation)
            if runs is not None:
                runs.pop(run_id, None)
                if not runs:
                    del self._by_conversation[conversation]
        if self.relay is not None:
            self.relay.forget(run_id)

    # -- open ------------------------------------------------------------------------------------------
    async def open(
        self,
        request: host_service_pb2.HostServiceRunRequest,
        metadata: Iterable[tuple[str, Any]] = (),
        resolution: Resolution | None = None,
    ) -> UpdateStream[Update]:
        """The event's stream (see the module docstring); raises typed errors before it. `resolution`:
        the event's binding when the caller resolved it already (from the same config: the client
        gate's check), else resolved here."""
        event = normalize_event(request.event)
        key = _event_key(event)
        if resolution is None:
            resolution = self.resolver.resolve(key, request.agent_id)
        if resolution.agent is None:
            RUNS.labels("discarded").inc()
            log.info("run.discarded", event_id=event.event_id, binding_id=resolution.binding_id)
            return discarded(resolution.binding_id, event.event_id)
        agent = resolution.agent
        steered_into = await self._steer_into_open_run(event, agent)
        if steered_into is not None:
            return steered_into
        refused = ""
        if self.forwarding is not None:  # a runtime of another replica takes it: the run lives there
            forwarded = await self.forwarding.open(request, event.event_id, agent)
            if isinstance(forwarded, Refusals):
                refused = forwarded.text()
            elif forwarded is not None:
                return forwarded
        return await self._start_new(request, event, key, resolution, agent, metadata, refused)

    async def open_here(self, request: host_service_pb2.HostServiceRunRequest) -> UpdateStream[Update]:
        """A run another replica hands this one because a runtime connected here takes it
        (`run/forwarding.py`): no steering (that replica looked) and no second hand-over; refused with
        RUNNER_UNAVAILABLE when no runtime here can take it now."""
        event = normalize_event(request.event)
        key = _event_key(event)
        resolution = self.resolver.resolve(key, request.agent_id)
        agent = resolution.agent
        runtimes = self.registry.runtimes
        placed, why = (
            (None, "")
            if agent is None or runtimes is None
            else await runtimes.place(agent.runner_id, agent.runtime_selector)
        )
        if agent is None or placed is None:
            raise RunnerUnavailableError(
                f"no runtime connected to host replica {self.config.instance_id!r} can take the run now"
                + (f": {why}" if why else ""),
                metadata={"replica": self.config.instance_id},
            )
        return await self._start_new(request, event, key, resolution, agent, ())

    async def _start_new(
        self,
        request: host_service_pb2.HostServiceRunRequest,
        event: host_service_pb2.EventEnvelope,
        key: EventKey,
        resolution: Resolution,
        agent: AgentConfig,
        metadata: Iterable[tuple[str, Any]],
        refused: str = "",
    ) -> UpdateStream[Update]:
        """A new run of the event, started here (or the stream of the run its event id already has).
        `refused`: why the replicas it was handed to refused it (for its `runner.unavailable`)."""
        conv = event.conversation
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
            owner=self.config.instance_id,
        )
        self._admit()
        self._starting += 1
        try:
            start = await start_run(self.stores, self.registry, self.backends, record, event, agent, refused)
        except BaseException:
            span.end()
            raise
        finally:
            self._starting -= 1
        stored = start.record
        if stored.run_id != run_id:
            span.end()
            if stored.metadata.get("event_digest") != digest:
                raise AlreadyExistsError(
                    f"event {event.event_id!r} was already submitted with different content",
                    metadata={"eventId": event.event_id, "runId": stored.run_id},
                )
            log.info("run.duplicate_event", event_id=event.event_id, run_id=stored.run_id)
            return self.follow(stored.run_id, 0, attached=True)
        execution = RunExecution(self, start, span)
        self._open[run_id] = execution
        self._by_conversation.setdefault(execution.record.conversation_id, {})[run_id] = execution
        RUNS_OPEN.inc()
        self.hub.open(run_id)
        return RunStream(execution.stream(), execution.abandon_unstarted)

    async def _steer_into_open_run(
        self, event: host_service_pb2.EventEnvelope, agent: AgentConfig
    ) -> UpdateStream[Update] | None:
        """The stream of the open run of the event's conversation that takes it as steering input (here,
        or on the replica that holds it), or None: the event starts a run of its own."""
        conv = event.conversation
        steered = steering.steerable_run(
            self._by_conversation.get(conv.conversation_id, {}).values(),
            conv.conversation_id,
            conv.thread_id,
            agent.id,
        )
        if steered is not None:
            after = steered.last_sequence()
            await self.steer(steered.run_id, event)
            return self.follow(steered.run_id, after, attached=True)
        if self.relay is not None and agent.resource_policy.steering:
            elsewhere = await self.relay.steerable_elsewhere(event, agent.id)
            if elsewhere is not None:  # steered into the run another replica holds
                return self.follow(elsewhere[0], elsewhere[1], attached=True)
        return None

    # -- endings the database could not take (`run/endings.py`) ----------------------------------------
    def settle_later(
        self,
        snapshot: AuthorizationSnapshot,
        unwritten: list[result_pb2.RunResult],
        terminal: result_pb2.RunResult | None,
        status: RunStatus,
        reason: str,
    ) -> None:
        """`RunHost.settle_later`: the ending is written once the database takes writes again; the
        run's token is refused from now on (`refuses`)."""
        self.endings.later(Ending(snapshot, unwritten, terminal, status, reason))

    async def write_ending(
        self,
        snapshot: AuthorizationSnapshot,
        unwritten: list[result_pb2.RunResult],
        terminal: result_pb2.RunResult | None,
        status: RunStatus,
        reason: str,
    ) -> RunRecord | None:
        """`RunHost.write_ending` (`Endings.write`)."""
        return await self.endings.write(Ending(snapshot, unwritten, terminal, status, reason))

    def refuses(self, run_id: str) -> bool:
        """Whether a proxy call of the run must be refused although the database still has its session:
        the run ended here and its ending (with the revoked token) is not written yet."""
        return self.endings.refuses(run_id)

    async def close(self) -> None:
        """Host stop: the forwarded runs still driven here end, then one last attempt at the endings
        still unwritten (`Endings.close`)."""
        if self.forwarding is not None:
            await self.forwarding.close()
        await self.endings.close()

    def _admit(self) -> None:
        """Refuses a new run while `limits.max_open_runs` runs are open or starting here: RESOURCE_EXHAUSTED
        with a retry delay, before anything is recorded (a run this host accepts is a run it runs)."""
        limits = self.config.limits
        if len(self._open) + self._starting >= limits.max_open_runs:
            RUNS.labels("refused").inc()
            raise RateLimitedError(
                f"this host runs at most {limits.max_open_runs} runs at once: try again shortly",
                retry_delay=limits.busy_retry_seconds,
                metadata={"maxOpenRuns": limits.max_open_runs},
            )

    # -- followers, records, cancel --------------------------------------------------------------------
    def follow(
        self, run_id: str, after_sequence: int = 0, attached: bool = False
    ) -> AsyncGenerator[Update, None]:
        """A run's stream for a second caller: stored results after `after_sequence`, then live ones."""
        return followers.follow(
            self.stores.ledger,
            self.deliveries,
            run_id,
            self._open.get(run_id),
            after_sequence,
            attached=attached,
            queue_max=self.config.limits.follower_queue_max,
            tail=self.relay.tail if self.relay is not None else None,
            poll_seconds=self.poll_seconds,
        )

    async def get_run(self, run_id: str) -> RunRecord:
        record = await self.stores.ledger.get_run(run_id)
        if record is None:
            raise NotFoundError(f"run {run_id!r} does not exist", metadata={"runId": run_id})
        return record

    async def cancel_run(self, run_id: str, reason: str = "") -> RunRecord:
        """Pushes a cancel signal on the control stream, then cancels the runner call after the grace;
        a run open on another replica is cancelled there (`relay`), the same way. FAILED_PRECONDITION
        for a run that ended. A run running here is signalled before anything is read or written."""
        execution = self.open_run(run_id)
        if execution is not None and execution.running():
            return await self._cancel_here(execution, reason) or await self.get_run(run_id)
        record = await self.get_run(run_id)
        if record.status in TERMINAL_STATUSES or self.endings.refuses(run_id):
            raise FailedPreconditionError(
                f"run {run_id!r} already ended",
                metadata={"runId": run_id, "status": terminal_status_name(record.status)},
            )
        execution = self.open_run(run_id)
        if execution is None:
            if self.relay is None or not self.relay.fleet.elsewhere(record):
                raise FailedPreconditionError(
                    f"run {run_id!r} is not open on this host: it is starting or ending, try again",
                    metadata={"runId": run_id},
                )
            await self.relay.cancel(record, reason)
            return await self.get_run(run_id)
        return await self._cancel_here(execution, reason) or record

    async def _cancel_here(self, execution: RunExecution, reason: str) -> RunRecord | None:
        """The cancel signal, then the request noted in the ledger (the runner stops meanwhile; the
        ledger notes it on a run its runner has ended `cancelled` meanwhile too); the stored record."""
        at = utcnow()
        grace = self.config.limits.cancel_grace_seconds
        if execution.cancel(reason or "cancelled by request", grace):
            log.info("run.cancel_requested", run_id=execution.run_id, grace_seconds=grace)
        updated = await self.stores.ledger.request_cancel(execution.run_id, at)
        return updated

    def cancel_idle(self, idle_seconds: float, reason: str = "host.shutdown") -> int:
        """Host stop: cancels the runner call of every open run whose runner has sent nothing for
        `idle_seconds` (stalled or waiting runs), so stopping does not wait the whole drain grace for
        them; runs producing results keep draining. Each cancelled run ends through its own stream as
        `run.failed` (`cancelled`). Returns how many were cancelled."""
        now = time.monotonic()
        return sum(run.cancel_if_idle(now, idle_seconds, reason) for run in list(self._open.values()))

    async def append_to_open_run(
        self, run_id: str, result: result_pb2.RunResult
    ) -> result_pb2.RunResult | bool | None:
        """`AppendRunResult` on an open run joins its stream (numbered by the host, so it never clashes
        with the runner's results), here or on the replica that runs it (`relay`): the stored result,
        None when the run's validator dropped it, False when the run is not open."""
        channel = self.deliveries.get(run_id)
        if channel is not None:
            return await channel.append(result)
        if self.relay is None:
            return False
        record = await self.stores.ledger.get_run(run_id)
        if record is None or record.status in TERMINAL_STATUSES or not self.relay.fleet.elsewhere(record):
            return False
        return await self.relay.append(record, result)

    # -- steering --------------------------------------------------------------------------------------
    async def steer(self, run_id: str, event: host_service_pb2.EventEnvelope) -> str | None:
        """Queues new input for an open steering run (`run/steering.py`). Returns the steering id, or
        None when the run is not open here, does not accept steering, or the event was queued before."""
        execution = self._open.get(run_id)
        if (
            execution is None
            or execution.finished
            or execution.validator is None
            or not execution.snapshot.steering
        ):
            return None
        return await steering.steer(self.stores, self.hub, execution, normalize_event(event))
