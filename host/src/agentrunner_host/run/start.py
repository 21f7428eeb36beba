"""A run's start: what is prepared without I/O (runner, effective config, frozen snapshot, run token)
and the ONE run-start transaction that records the whole run or nothing (`RunStore.start_run`).

A run that will call its runner may get its transaction back still open (`StartedRun.held`, SQLite's
inline path): it commits once the runner call is on its way (`RunExecution._commit_start`), before
anything of the run reaches a client or a proxy call of it is served. A start whose statements fail
raises its typed error from `RunService.open`; one whose held commit fails cancels the runner call and
raises it from the stream, before `accepted`. Either way nothing is left behind.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from agentrunner.v1 import common_pb2, context_pb2, host_service_pb2, result_pb2, runner_service_pb2
from agentrunner_host.auth.authz import RunScope, freeze_snapshot, issue_session, project_snapshot_resources
from agentrunner_host.config.model import AgentConfig
from agentrunner_host.ports import (
    AuthorizationSnapshot,
    RecordedEvent,
    RunRecord,
    RunStore,
    StartedRun,
    utcnow,
)
from agentrunner_host.proxy.capabilities import Backends
from agentrunner_host.registry.endpoints import RegisteredRunner, RunnerRegistry
from agentrunner_host.run import outcomes
from agentrunner_host.run.context import (
    ContextBuilder,
    ContextPosition,
    RunnerConfigError,
    effective_runner_config,
)
from agentrunner_host.run.context_parity import has_reply_target


@dataclasses.dataclass(slots=True)
class RunStart:
    """What a run start prepared and recorded."""

    record: RunRecord
    event: host_service_pb2.EventEnvelope
    agent: AgentConfig
    runner: RegisteredRunner | None = None
    runner_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    snapshot: AuthorizationSnapshot | None = None
    token: str = ""
    deadline_at: dt.datetime | None = None
    #: the run ends before its runner is called (runner unavailable, invalid config)
    failure: result_pb2.RunResult | None = None
    started: StartedRun | None = None

    @property
    def recorded(self) -> RecordedEvent:
        assert self.started is not None and self.started.recorded is not None
        return self.started.recorded

    def commit(self) -> None:
        """Commits the run-start transaction if it is still held (a no-op otherwise)."""
        if self.started is not None:
            self.started.commit()

    async def context(self, contexts: ContextBuilder, backends: Backends | None) -> context_pb2.RunContext:
        """The run context the runner gets (event-first; positions and state from the start transaction)."""
        runner, snapshot, recorded = self.runner, self.snapshot, self.recorded
        assert runner is not None and snapshot is not None and self.deadline_at is not None
        return await contexts.build(
            event=self.event,
            agent=self.agent,
            snapshot=snapshot,
            runner_config=self.runner_config,
            trace_id=self.record.trace_id,
            deadline_at=self.deadline_at,
            resources=project_snapshot_resources(snapshot, backends),
            position=ContextPosition(
                latest_cursor=recorded.latest_cursor,
                event_seq=recorded.event_seq,
                transcript_seq=recorded.transcript_seq,
                has_history_before=recorded.has_history_before,
                attachments=recorded.attachments,
            ),
            state=recorded.state or {},  # read in the run-start transaction
            manifest=runner.manifest,
        )

    def request(self, ctx: context_pb2.RunContext, host_api_endpoint: str) -> runner_service_pb2.RunRequest:
        runner = self.runner
        assert runner is not None
        return runner_service_pb2.RunRequest(
            runner_id=runner.runner_id,
            runner_name=runner.manifest.name or runner.runner_id.rsplit("/", 1)[-1],
            context=ctx,
            run_token=self.token,
            host_api_endpoint=host_api_endpoint,
        )

    def minimal_snapshot(self) -> AuthorizationSnapshot:
        """What results are written under when the run ends before it has a snapshot."""
        r, event = self.record, self.event
        return AuthorizationSnapshot(
            run_id=r.run_id,
            runner_id=r.runner_id,
            agent_id=r.agent_id,
            binding_id=r.binding_id,
            event_id=r.event_id,
            conversation_id=r.conversation_id,
            thread_id=r.thread_id,
            bot_id=r.bot_id,
            workspace_id=r.workspace_id,
            actor_id=event.actor.actor_id,
            subject_id=event.subject.subject_id,
        )


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


async def start_run(
    store: RunStore,
    registry: RunnerRegistry,
    backends: Backends | None,
    record: RunRecord,
    event: host_service_pb2.EventEnvelope,
    agent: AgentConfig,
    refused: str = "",
) -> RunStart:
    """Resolves the runner, freezes the snapshot and issues the token (no I/O), then writes the run row
    (already `running` when the runner will be called), the event (log + transcript), the session and
    the state snapshot's read in ONE transaction, held open for a run that calls its runner. A duplicate
    event id writes nothing: `start.started.recorded` is None and `started.record` the stored run.
    `refused`: why the other replicas it was handed to refused it (`run/forwarding.py`), said first."""
    start = RunStart(record=record, event=event, agent=agent)
    runner, why = await registry.resolve_for(agent.runner_id, agent.runtime_selector)
    if refused and runner is None:  # (`why` speaks of this replica only: one is connected elsewhere)
        why = f"{refused}; none on this host replica can take it" + (f" ({why})" if why else "")
    start.runner = runner
    if runner is None:
        start.failure = outcomes.failed(
            record.run_id,
            "runner.unavailable",
            f"runner {agent.runner_id} is not available" + (f": {why}" if why else ""),
            sequence=1,
            runnerId=agent.runner_id,
            **({"reason": why} if why else {}),
        )
    else:
        try:
            start.runner_config = effective_runner_config(runner.manifest, agent.runner_config)
        except RunnerConfigError as exc:
            start.failure = outcomes.failed(
                record.run_id, "runner.config_invalid", exc.message, sequence=1, field=exc.field or ""
            )
    session = None
    if start.failure is None:
        assert runner is not None
        deadline_at = record.deadline_at or utcnow() + dt.timedelta(seconds=agent.timeout_seconds)
        snapshot = freeze_snapshot(
            agent=agent,
            manifest=runner.manifest,
            runner_config=start.runner_config,
            scope=_scope(record, event),
            deadline_at=deadline_at,
            backends=backends,
        )
        start.token, session = issue_session(snapshot, deadline_at)
        start.snapshot, start.deadline_at = snapshot, deadline_at
        record.status = common_pb2.RUN_STATUS_RUNNING
        record.started_at = utcnow()
    state_of = start.snapshot if start.snapshot is not None and start.snapshot.state_scopes else None
    start.started = await store.start_run(record, event, session, state_of, hold=start.failure is None)
    start.record = start.started.record
    return start
