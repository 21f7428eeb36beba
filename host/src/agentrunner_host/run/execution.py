"""One run in this process, from its recorded start to its release (`RunExecution`).

Stages: `open` (done by `RunService.open`: binding, discard, duplicate, steer-or-start and the
run-start transaction, all before anything streams) -> `_call` (context, delivery channel, runner call,
reader; a held run start commits once the call is on its way) -> the pump (`run/pump.py`: one loop
over the run's outbox, dispatched by item kind; it hands every result but a delta to `take`) ->
`_conclude` (the terminal failure if the run needs one, delivery closed, `finished`) -> `release` (the
one exit path, idempotent). `stream` strings them together for the caller.

Concurrency: everything runs in the caller's task, except the reader (`RunnerCall`), the shared delta
writes (`journal.DeltaBatcher`) and the cancel timer; a caller that goes away cancels the runner call at
once and the run ends `cancelled` (`_abandon`). Only the validator checks results; only this object
decides the terminal (`self.terminal`) and the phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import AsyncGenerator
from typing import TypeAlias

import grpc
import structlog
from opentelemetry import trace

from agentrunner.errors import AgentRunnerError
from agentrunner.protocol import FINISH_ACKNOWLEDGED
from agentrunner.v1 import common_pb2, host_service_pb2, result_pb2
from agentrunner_host.delivery.channel import RunChannel
from agentrunner_host.delivery.interactions import record_requested
from agentrunner_host.observability.telemetry import report_finished
from agentrunner_host.ports import AuthorizationSnapshot, RunRecord
from agentrunner_host.run import outcomes
from agentrunner_host.run.followers import Followers, accepted_of
from agentrunner_host.run.host import RunHost
from agentrunner_host.run.journal import RecordFailed, RunJournal
from agentrunner_host.run.pump import pump
from agentrunner_host.run.runner_call import RunnerCall, call_failure
from agentrunner_host.run.start import RunStart
from agentrunner_host.run.validation import ResultValidator

log = structlog.get_logger("agentrunner_host.run")

Update = host_service_pb2.HostServiceRunResponse
RunStatus: TypeAlias = common_pb2.RunStatus.ValueType


class Phase(enum.Enum):
    #: recorded (the start transaction may still be held open); nothing streamed yet
    OPEN = "open"
    #: the runner call is on its way: results are pumped
    RUNNING = "running"
    #: the terminal is recorded: no more results, followers and steering no longer join
    FINISHED = "finished"
    #: everything the run held is let go (token, delivery channel, control stream, tasks)
    RELEASED = "released"
    #: the run-start transaction did not commit: the run never existed
    UNRECORDED = "unrecorded"


class RunExecution:
    """One open run (see the module docstring)."""

    def __init__(self, host: RunHost, start: RunStart, span: trace.Span) -> None:
        self.host = host
        self.start = start
        self.record: RunRecord = start.record
        self.span = span
        #: monotonic time the run was accepted (its duration metric)
        self.accepted_at = time.monotonic()
        self.snapshot: AuthorizationSnapshot = start.snapshot or start.minimal_snapshot()
        self.phase = Phase.OPEN
        self.journal: RunJournal = host.batcher.journal(self.record.run_id, self.snapshot)
        self.followers = Followers()
        self.validator: ResultValidator | None = None
        self.channel: RunChannel | None = None
        self.call: RunnerCall | None = None
        #: the run's terminal result as decided here (the runner's, or one the host made)
        self.terminal: result_pb2.RunResult | None = None
        #: why the run is being cancelled ('' while it is not)
        self.cancel_reason = ""
        self.cancel_task: asyncio.Task[None] | None = None
        self._accepted_sent = False
        #: a message came from the runner (an unreachable runner differs from a broken stream); the
        #: pump sets it
        self.received_any = False
        #: the failure the pump ended the run with (an undecodable runner message)
        self.pump_failure: result_pb2.RunResult | None = None

    # -- the view delivery and followers use (`ports.RunView`) ----------------------------------------
    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def finished(self) -> bool:
        return self.phase in (Phase.FINISHED, Phase.RELEASED, Phase.UNRECORDED)

    def publish(self, update: Update) -> None:
        self.followers.publish(update)

    def last_sequence(self) -> int:
        return self.validator.host_sequence if self.validator is not None else 0

    def mark_output(self) -> None:
        """A delivered reply or interaction is the run's output (grammar rule 7)."""
        if self.validator is not None:
            self.validator.saw_message = True

    def running(self) -> bool:
        """Accepted (its start committed) and without a terminal yet: a cancel needs no ledger read."""
        return self._accepted_sent and self.terminal is None and not self.finished

    def steerable(self) -> bool:
        return (
            not self.finished
            and self.validator is not None
            and self.terminal is None
            and self.snapshot.steering
        )

    # -- call ------------------------------------------------------------------------------------------
    async def _call(self) -> RunnerCall:
        """Builds the context, opens the delivery channel, sends the runner call, starts its reader and
        commits the run start while the runner starts (before anything of the run reaches a client)."""
        host, start = self.host, self.start
        runner = start.runner
        assert runner is not None and start.snapshot is not None and start.deadline_at is not None
        validator = self.validator = ResultValidator(start.snapshot, host.limits)
        ctx = await start.context(host.contexts, host.backends)
        self.channel = host.deliveries.open(self, ctx.delivery)
        validator.interaction_capabilities = self.channel.interactions
        request = start.request(ctx, host.proxy_endpoint())
        endpoint = host.registry.endpoint_of(runner)
        call = self.call = RunnerCall.send(
            endpoint, request, start.deadline_at, self.span, self.channel.outbox
        )
        self.phase = Phase.RUNNING
        call.start_reading(f"read-{self.run_id}")
        # grpc.aio sends the request from a task of its own: let it go out now, before the run start's
        # COMMIT and the caller's `accepted`, so the runner starts while the host finishes its part
        await asyncio.sleep(0)
        self._commit_start()
        return call

    def _commit_start(self) -> None:
        """Commits the run start if it is still held (a no-op otherwise). Until then no client has seen
        the run, and no proxy call of it was served: the runner cannot have its request before the loop
        turn this runs in. If the commit fails the run never existed: its runner call is cancelled and
        the `StoreError` raised, as a failed run start is."""
        try:
            self.start.commit()
        except BaseException:
            self.phase = Phase.UNRECORDED
            if self.call is not None:
                self.call.cancel()
            raise

    # -- the stream: call -> pump -> conclude -> release -----------------------------------------------
    async def stream(self) -> AsyncGenerator[Update, None]:
        """accepted, validated results (exactly one terminal), delivered items, finished."""
        failure: result_pb2.RunResult | None = self.start.failure
        r = self.record
        structlog.contextvars.bind_contextvars(run_id=r.run_id, trace_id=r.trace_id)
        log.info("run.accepted", runner_id=r.runner_id, binding_id=r.binding_id, event_id=r.event_id)
        try:
            if failure is None:
                try:
                    call = await self._call()
                    self._accepted_sent = True
                    yield accepted_of(self.record, attached=False)
                    async with contextlib.aclosing(pump(self, call)) as updates:
                        async for update in updates:
                            yield update
                    failure = self.pump_failure
                except (Exception, asyncio.CancelledError) as exc:
                    failure = self._failure_of(exc)
                finally:
                    if self.call is not None:
                        self.call.cancel()
                if failure is None and self.terminal is None:
                    failure = outcomes.failed(self.run_id, "runner.no_terminal")
            if not self._accepted_sent:
                self._accepted_sent = True
                yield accepted_of(self.record, attached=False)
            for update in await self._conclude(failure):
                yield update
        finally:
            await self._exit()

    def _failure_of(self, exc: BaseException) -> result_pb2.RunResult | None:
        """The terminal failure an error of the call or the pump ends the run with (None: the run has
        its terminal already); re-raises what is not the run's to handle (the caller went away, the run
        start did not commit)."""
        if self.phase is Phase.UNRECORDED:
            raise exc
        if isinstance(exc, grpc.aio.AioRpcError):
            if self.terminal is not None:
                log.warning("run.error_after_terminal", code=exc.code().name)
                return None
            return call_failure(exc, self.start, self.host.registry, self.received_any, self.cancel_reason)
        if isinstance(exc, asyncio.CancelledError):
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise exc  # the caller went away: `_exit` cleans up
            if self.terminal is None:  # our own call.cancel() after a CancelRun grace period
                return outcomes.failed(self.run_id, "cancelled", self.cancel_reason)
            return None
        if isinstance(exc, RecordFailed):
            # the rolled-back results stay in the journal: the terminal failure's write takes them first
            log.error("run.store_error", error=str(exc), cause=repr(exc.__cause__))
            terminal = self.terminal
            if terminal is not None and self.validator is not None and self.journal.withdraw(terminal):
                # the runner's terminal was neither recorded nor shown: the host's failure takes its place
                self.validator.retract(terminal)  # (its sequence is the failure's)
                self.terminal = None
            return outcomes.failed(self.run_id, "host.store_error")
        self._commit_start()  # (failed before the runner call went out)
        log.error("run.host_error", exc_info=exc)
        return outcomes.failed(self.run_id, "host.error") if self.terminal is None else None

    async def take(self, result: result_pb2.RunResult, kind: str) -> bool:
        """Records a result the validator accepted as `kind`, other than a delta (the pump's); False when
        the run refuses it. The runner's terminal is decided here, and held here only: a completion
        without output becomes `runner.empty_output` in place (grammar rule 7)."""
        validator = self.validator
        assert validator is not None
        if kind == "interaction_requested":
            if not await record_requested(self.host.interaction_store, self, self.start.event.actor, result):
                validator.retract(result)
                return False
            validator.saw_message = True  # an interaction is output (grammar rule 7)
        elif kind == "run_completed" or kind == "run_failed":
            if (
                kind == "run_completed"
                and not validator.saw_message
                and result.run_completed.finish_reason != FINISH_ACKNOWLEDGED
            ):  # grammar rule 7: no output is an error, unless the service only acknowledged
                log.warning("run.empty_output")
                result.CopyFrom(outcomes.empty_output(result))
            self.terminal = result
        await self._record(result)
        return True

    async def _record(
        self, result: result_pb2.RunResult, finish: tuple[RunStatus, str] | None = None
    ) -> None:
        """Commits a result through the journal, then tells followers."""
        await self.journal.record(result, finish)
        if self.followers:
            self.followers.publish(Update(result=result))

    # -- conclude and release --------------------------------------------------------------------------
    async def _conclude(self, failure: result_pb2.RunResult | None) -> list[Update]:
        """The run's last items: the terminal failure (recorded), delivery items not read yet, finished."""
        out: list[Update] = []
        if failure is not None:
            failure.sequence = self._next_sequence()
            self.terminal = failure
            try:
                await self._record(failure)
            except RecordFailed as exc:  # (what it could not write, `_finish` writes with the ending)
                log.error("run.store_error", error=str(exc), stage="terminal")
                self.followers.publish(Update(result=failure))
            out.append(Update(result=failure))
        terminal = self.terminal
        assert terminal is not None
        status, reason = outcomes.status_of(terminal)
        out.extend(await self.host.deliveries.close(self.run_id))  # open replies ABORTed, unread items
        out.append(await self._finish(status, reason, terminal))
        return out

    def _next_sequence(self) -> int:
        return self.validator.next_sequence() if self.validator is not None else 1

    async def _finish(self, status: RunStatus, reason: str, terminal: result_pb2.RunResult | None) -> Update:
        """The run is over: its final status (committed with the terminal already, or recorded now),
        everything released, then `finished` for the caller and followers."""
        self.phase = Phase.FINISHED
        if self.validator is not None:
            self.validator.report_metrics()
        record = self.journal.finished
        # what the run handed out and could not write (a rolled-back batch, the terminal failure):
        # written with the ending, so the ledger keeps every result a client saw and has no gap
        unwritten = self.journal.take_unwritten()
        if not self.journal.concluded and terminal is not None and all(r is not terminal for r in unwritten):
            unwritten.append(terminal)
        try:
            if not self.journal.concluded:
                record = await self.host.write_ending(self.snapshot, unwritten, terminal, status, reason)
        except AgentRunnerError as exc:
            # the database is away: the host writes the ending (those results, status, revoked token)
            # once it is back, so the ledger never keeps this run `running` with a working token
            log.error("run.finish_not_recorded", error=exc.message)
            self.host.settle_later(self.snapshot, unwritten, terminal, status, reason)
        finally:
            await self.release()
        finished = outcomes.finished(self.run_id, status, reason, record, terminal)
        update = Update(finished=finished)
        self.followers.publish(update)
        status_name = outcomes.terminal_status_name(finished.status)
        report_finished(self.span, self.record, status_name, finished.reason, self.accepted_at)
        return update

    async def release(self) -> None:
        """The one exit path: lets go of what the run holds in this process (open-run table, delta
        queue, delivery channel, reader, control stream, cancel timer), revokes the run token unless the
        terminal's transaction did, and claims steering input the run never consumed. Idempotent."""
        if self.phase is Phase.RELEASED:
            return
        self.host.forget(self.run_id)
        self.journal.close()
        self.host.deliveries.discard(self.run_id)
        if self.call is not None:
            self.call.stop_reading()
        self.host.hub.close(self.run_id)
        if self.cancel_task is not None and self.cancel_task is not asyncio.current_task():
            self.cancel_task.cancel()
        if self.phase is Phase.UNRECORDED:
            return  # (nothing of it is stored)
        self.phase = Phase.RELEASED
        try:
            if not self.journal.concluded:
                await self.host.stores.sessions.unregister(self.run_id)
            snap = self.snapshot
            if snap.steering and snap.conversation_id:
                # steering input queued for this run and never consumed is the run's, not the next one's
                await self.host.stores.steering.claim(
                    run_id=self.run_id, conversation_id=snap.conversation_id
                )
        except AgentRunnerError as exc:
            log.error("run.release_failed", error=exc.message)

    async def _exit(self) -> None:
        """Runs when the stream ends on any path: the run start is committed if it still is held (the
        caller left before the runner call went out), and a run the caller abandoned before it finished
        ends `cancelled` and is released."""
        if self.phase is not Phase.UNRECORDED:
            try:
                self._commit_start()
            except Exception as exc:
                log.error("run.start_commit_failed", error=repr(exc))
        if self.call is not None:
            self.call.cancel()
        if self.phase is Phase.UNRECORDED:
            log.error("run.not_recorded", reason="the run-start transaction did not commit")
            await self.release()
        elif not self.finished:
            await self._abandon()
        structlog.contextvars.unbind_contextvars("run_id", "trace_id")
        self.span.end()

    async def abandon_unstarted(self) -> None:
        """The caller closed the stream before reading anything: the run ends as if it had left at once."""
        await self._exit()

    async def _abandon(self) -> None:
        """The caller went away (or a write failed) before the run ended: the cancel is recorded for
        followers and the ledger, and everything released."""
        self.host.hub.send_cancel(self.run_id, "client cancelled", 0)
        reason = self.cancel_reason or "client.cancelled"
        try:
            terminal = None
            if self.terminal is None:
                terminal = outcomes.failed(self.run_id, "cancelled", reason, sequence=self._next_sequence())
                try:
                    await self._record(terminal, (common_pb2.RUN_STATUS_CANCELLED, reason))
                except RecordFailed:  # (written with the ending by `_finish`)
                    log.error("run.store_error", stage="abandon")
            await self._finish(common_pb2.RUN_STATUS_CANCELLED, reason, terminal)
        except Exception:
            log.exception("run.abandon_failed")
        finally:
            if self.phase is Phase.OPEN or self.phase is Phase.RUNNING:
                self.phase = Phase.FINISHED
            await self.release()

    # -- cancel ----------------------------------------------------------------------------------------
    def cancel(self, reason: str, grace: float) -> bool:
        """Asks the runner to stop (control stream), then cancels its call after `grace`. False when
        a cancel is already under way."""
        if self.cancel_reason:
            return False
        self.cancel_reason = reason
        self.host.hub.send_cancel(self.run_id, reason, grace)
        self.cancel_task = asyncio.create_task(self._cancel_after(grace), name=f"cancel-{self.run_id}")
        return True

    def cancel_if_idle(self, now: float, idle_seconds: float, reason: str) -> bool:
        """Host stop: cancels the runner call now when the runner has sent nothing for `idle_seconds`."""
        call = self.call
        if self.finished or call is None or call.done() or now - call.last_activity < idle_seconds:
            return False
        self.cancel_reason = self.cancel_reason or reason
        self.host.hub.send_cancel(self.run_id, self.cancel_reason, 0)
        call.cancel()
        return True

    async def _cancel_after(self, grace: float) -> None:
        await asyncio.sleep(grace)
        if not self.finished and self.call is not None:
            self.call.cancel()
