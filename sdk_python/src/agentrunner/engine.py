"""Runs one run of a runner and enforces the runner-side stream grammar (transport neutral).

- `run_id`, `sequence` (1..n) and a timestamp are filled on every result;
- config is validated before `run` starts (`runner.config_invalid`, field named in message and details);
- a runner that returns without a terminal result gets `run.completed`;
- the stream ends at the first terminal result: the generator is closed, nothing after it is sent;
- tool calls still open when the run ends get a `tool.call.completed` with `error_code=runner.incomplete`;
- an exception becomes `run.failed` (`runner.exception`, or the spec code of an `AgentRunnerError`),
  with no traceback in the message (the traceback is logged locally); a `RunnerFailure` becomes exactly
  the `run.failed` it describes; every failure the SDK sets carries a `details.kind`
  (`agentrunner.failures`);
- side results (`ctx.log`, `ctx.call_tool`'s tool results, interaction requests) go into the same queue
  as the yielded ones, so they are streamed in the order they happened and numbered like the rest;
- the runner runs in its own task: a cancelled call cancels it at once and nothing more is emitted;
  `stop()` (control-stream cancel after its grace, the deadline, server shutdown) cancels it and ends
  the stream with `run.failed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import traceback
from collections.abc import AsyncGenerator
from typing import Any

import structlog
from google.protobuf import timestamp_pb2
from opentelemetry import context as otel_context
from opentelemetry import trace

from agentrunner import results, telemetry
from agentrunner.config import ConfigInvalid, validate_config
from agentrunner.context import RunContext
from agentrunner.control import ControlClient
from agentrunner.errors import AgentRunnerError
from agentrunner.failures import HOST_CODE_KINDS, FailureKind, RunnerFailure, kind_for_error_reason
from agentrunner.protocol import is_terminal
from agentrunner.result_queue import ResultQueue
from agentrunner.runner import Runner
from agentrunner.v1 import result_pb2, runner_service_pb2

log = structlog.get_logger("agentrunner.engine")

#: The SDK ends the run this long before `deadline_at` so its `run.failed` still reaches the host.
DEADLINE_MARGIN = 0.1
#: Grace after a cancel signal without an explicit grace period.
DEFAULT_CANCEL_GRACE = 1.0
_MAX_MESSAGE = 500
_QUEUE_SIZE = 32

CONFIG_INVALID = "runner.config_invalid"
RUNNER_EXCEPTION = "runner.exception"
CANCELLED = "cancelled"
DEADLINE_EXCEEDED = "deadline_exceeded"


def exception_message(exc: BaseException) -> str:
    """A one-paragraph description of an exception for peers: type and message, never a traceback."""
    text = str(exc).strip()
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 1] + "…"


class SideChannel:
    """How `ctx.emit` reaches the engine: non-terminal results into the run's queue while it runs."""

    def __init__(self, queue: ResultQueue) -> None:
        self._queue = queue
        self.closed = False

    def _check(self, result: result_pb2.RunResult) -> None:
        if self.closed:
            raise RuntimeError("the run has ended; no more results can be added")
        if not isinstance(result, result_pb2.RunResult):
            raise TypeError(f"emit takes a RunResult, not {type(result).__name__}")
        if is_terminal(result):
            raise ValueError("a terminal result ends the run: yield it from run() instead of emitting it")

    async def __call__(self, result: result_pb2.RunResult) -> None:
        """Queues a non-terminal result for the run's stream (`ctx.emit`); refuses a terminal result or one
        emitted after the run ended, which would otherwise break the stream's grammar."""
        self._check(result)
        await self._queue.put(result)

    def nowait(self, result: result_pb2.RunResult) -> None:
        """Best effort, for cancellation paths that cannot wait."""
        self._check(result)
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(result)


#: what `RunExecution._producer_ended` queues to wake the consumer (never yielded)
_ENDED = result_pb2.RunResult()


class RunExecution:
    """One run of one runner; iterate `results()` once."""

    def __init__(
        self,
        runner: Runner,
        request: runner_service_pb2.RunRequest,
        *,
        precheck: bool = True,
        trace_context: otel_context.Context | None = None,
    ) -> None:
        self.runner = runner
        #: the caller's trace context (the host's runner-call span): the run's span is its child
        self.trace_context = trace_context
        self.request = request
        self.manifest = runner.get_manifest()
        self.run_id = request.context.run_id
        self.ctx: RunContext | None = None
        self._precheck = precheck
        self._queue = ResultQueue(_QUEUE_SIZE)
        self._task: asyncio.Task[None] | None = None
        self._stop: tuple[str, str, bool] | None = None
        self._error: BaseException | None = None
        self._seq = 0
        self._open_tools: dict[str, str] = {}
        self._helpers: list[asyncio.Task[Any]] = []
        self._deadline_timer: asyncio.TimerHandle | None = None
        self.control: ControlClient | None = None
        #: `finished`, made when first asked for (a host stop waits on it; most runs are never waited on)
        self._finished: asyncio.Event | None = None
        self._ended = False
        self._side = SideChannel(self._queue)

    @property
    def finished(self) -> asyncio.Event:
        """Set once the run has ended and let go of its tasks (`_cleanup`)."""
        if self._finished is None:
            self._finished = asyncio.Event()
            if self._ended:
                self._finished.set()
        return self._finished

    def _mark_finished(self) -> None:
        self._ended = True
        if self._finished is not None:
            self._finished.set()

    # -- control ------------------------------------------------------------------------------

    def stop(self, code: str, message: str, *, retryable: bool = False) -> None:
        """Ends the run now: cancels the runner task; the stream ends with `run.failed(code)`."""
        if self._stop is not None:
            return
        self._stop = (code, message, retryable)
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def _on_cancel(self, reason: str, grace: float | None) -> None:
        assert self.ctx is not None
        self.ctx.cancel_reason = reason
        self.ctx.cancelled.set()
        delay = DEFAULT_CANCEL_GRACE if grace is None else max(grace, 0.0)
        message = f"cancelled by the host: {reason}" if reason else "cancelled by the host"
        asyncio.get_running_loop().call_later(delay, self.stop, CANCELLED, message)

    def _watch_deadline(self, ctx: RunContext) -> None:
        """Stops the run `DEADLINE_MARGIN` before its deadline: one timer per run, re-armed when it fires
        early (the deadline is wall-clock time, the timer the loop's clock), not a task waking every
        0.5 s (at 10,000 open runs that was 20,000 wake-ups a second and a task per run). Re-armed at
        once when the host moves the deadline (`RunContext._set_deadline`)."""
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_timer = None
        remaining = ctx.remaining()
        if remaining is None:
            return
        left = remaining - DEADLINE_MARGIN
        if left <= 0:
            self.stop(DEADLINE_EXCEEDED, "the run deadline passed", retryable=True)
            return
        self._deadline_timer = asyncio.get_running_loop().call_later(left, self._watch_deadline, ctx)

    # -- the stream ---------------------------------------------------------------------------

    def _seal(self, result: result_pb2.RunResult) -> result_pb2.RunResult:
        if result.run_id and result.run_id != self.run_id:
            log.warning("runner set another run_id; replaced", run_id=self.run_id, given=result.run_id)
        result.run_id = self.run_id
        self._seq += 1
        result.sequence = self._seq
        if not result.HasField("timestamp"):
            ts = timestamp_pb2.Timestamp()
            ts.GetCurrentTime()
            result.timestamp.CopyFrom(ts)
        kind = result.WhichOneof("payload")
        if kind == "tool_call_started":
            self._open_tools[result.tool_call_started.tool_call_id] = result.tool_call_started.tool_name
        elif kind == "tool_call_completed":
            self._open_tools.pop(result.tool_call_completed.tool_call_id, None)
        elif kind is None:
            log.warning("runner emitted a result type this SDK does not know", run_id=self.run_id)
        return result

    def _close_tools(self) -> list[result_pb2.RunResult]:
        out = [
            self._seal(
                results.tool_completed(
                    call_id,
                    name,
                    error_code="runner.incomplete",
                    error_message="the run ended before the tool call completed",
                )
            )
            for call_id, name in list(self._open_tools.items())
        ]
        return out

    def _terminal(self, result: result_pb2.RunResult) -> list[result_pb2.RunResult]:
        return [*self._close_tools(), self._seal(result)]

    async def _produce(self, ctx: RunContext) -> None:
        gen = self.runner.run(ctx)
        try:
            async for item in gen:
                if not isinstance(item, result_pb2.RunResult):
                    raise TypeError(
                        f"runner yielded {type(item).__name__}; yield results built with agentrunner.results"
                    )
                await self._queue.put(item)
                if is_terminal(item):
                    break
        except asyncio.CancelledError:
            raise
        except RunnerFailure as exc:
            self._error = exc
        except BaseException as exc:
            self._error = exc
            log.error(
                "runner raised",
                run_id=self.run_id,
                runner=self.manifest.id,
                error=exception_message(exc),
                traceback="".join(traceback.format_exception(exc)),
            )
        finally:
            if isinstance(gen, AsyncGenerator):
                with contextlib.suppress(BaseException):
                    await gen.aclose()

    def _prepare(self) -> tuple[RunContext | None, result_pb2.RunResult | None]:
        """The context, or the terminal result that ends the run before it starts."""
        try:
            config: Any = validate_config(self.manifest.config_schema, self.request.context.config)
            model = type(self.runner).config_model
            if model is not None:
                from pydantic import ValidationError

                try:
                    config = model.model_validate(config)
                except ValidationError as exc:
                    first = exc.errors()[0]
                    field = ".".join(str(p) for p in first["loc"]) or "config"
                    raise ConfigInvalid(field, first["msg"]) from None
        except ConfigInvalid as exc:
            return None, results.failed(
                CONFIG_INVALID, str(exc), kind=FailureKind.CONFIG_INVALID, details={"field": exc.field}
            )
        ctx = RunContext(
            self.request.context,
            config=config,
            run_token=self.request.run_token,
            host_api_endpoint=self.request.host_api_endpoint,
            precheck=self._precheck,
        )
        remaining = ctx.remaining()
        if remaining is not None and remaining <= DEADLINE_MARGIN:
            return None, results.failed(
                DEADLINE_EXCEEDED,
                "the run deadline passed before it started",
                retryable=True,
                kind=FailureKind.TIMEOUT,
            )
        return ctx, None

    async def results(self) -> AsyncGenerator[result_pb2.RunResult, None]:
        """The run's results, ending with exactly one terminal result (unless the call is cancelled)."""
        ctx, early = self._prepare()
        if ctx is None:
            assert early is not None
            yield self._seal(early)
            self._mark_finished()
            return
        self.ctx = ctx
        ctx._attach(self._side)
        caps = self.manifest.capabilities
        if (caps.interrupt or caps.steering) and ctx.api.available:
            accepts = (
                ["deadline"]
                + (["cancel"] if caps.interrupt else [])
                + (["steering"] if caps.steering else [])
            )
            self.control = ControlClient(
                ctx,
                run_token=self.request.run_token,
                accepts=accepts,
                on_cancel=self._on_cancel,
                last_sequence=lambda: self._seq,
            )
            self._helpers.append(asyncio.create_task(self.control.run()))
        ctx._deadline_listener = lambda: self._watch_deadline(ctx)
        self._watch_deadline(ctx)
        span = telemetry.tracer.start_span(
            "agentrunner.runner/Run",
            context=telemetry.run_parent(self.trace_context, self.request.context.runtime.trace_id),
            kind=trace.SpanKind.SERVER,
            attributes={"agentrunner.run_id": self.run_id, "agentrunner.runner_id": self.manifest.id},
        )
        self._task = asyncio.create_task(
            self._produce(ctx), name=f"runner:{self.run_id}", context=self._task_context(span)
        )
        if self._stop is not None:
            self._task.cancel()
        # the producer's end wakes a `get` waiting on the empty queue (no getter task per wait)
        self._task.add_done_callback(self._producer_ended)
        try:
            while True:
                if not self._queue.empty():
                    item = self._queue.get_nowait()
                elif self._task.done():
                    break
                else:
                    item = await self._queue.get()
                if item is _ENDED:
                    continue
                if is_terminal(item):
                    for r in self._terminal(item):
                        yield r
                    return
                yield self._seal(item)
            for r in self._terminal(self._final()):
                yield r
        finally:
            await self._cleanup()
            self._end_span(span)

    def _producer_ended(self, _task: asyncio.Task[None]) -> None:
        """The runner task ended: `_ENDED` wakes `results` if it waits on the empty queue (a queue with
        items wakes it anyway, and it finds the task done once they are read)."""
        if self._queue.empty():
            self._queue.put_nowait(_ENDED)

    def _task_context(self, span: trace.Span) -> contextvars.Context:
        """The runner task's context: the run's span is current there (proxy calls and the runner's
        own spans are its children) and log lines carry `run_id` and `trace_id`."""
        context = contextvars.copy_context()

        def enter() -> None:
            otel_context.attach(trace.set_span_in_context(span))  # detached when the task's context goes
            trace_id = self.request.context.runtime.trace_id
            structlog.contextvars.bind_contextvars(
                run_id=self.run_id, **({"trace_id": trace_id} if trace_id else {})
            )

        context.run(enter)
        return context

    def _end_span(self, span: trace.Span) -> None:
        if span.is_recording() and self._error is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(self._error).__name__))
        span.end()

    def _final(self) -> result_pb2.RunResult:
        if self._stop is not None:
            code, message, retryable = self._stop
            kind = HOST_CODE_KINDS.get(code, FailureKind.CANCELLED)
            return results.failed(code, message, retryable=retryable, kind=kind)
        if self._error is not None:
            exc = self._error
            if isinstance(exc, RunnerFailure):
                return results.failed(
                    exc.code,
                    exc.message,
                    retryable=exc.retryable,
                    kind=exc.kind,
                    details=exc.details,
                    usage=exc.usage,
                )
            if isinstance(exc, AgentRunnerError):
                return results.failed(
                    exc.spec_code,
                    exc.message,
                    retryable=exc.retryable,
                    kind=kind_for_error_reason(exc.reason),
                    details={"reason": exc.reason},
                )
            return results.failed(RUNNER_EXCEPTION, exception_message(exc), kind=FailureKind.INTERNAL_ERROR)
        return results.completed()

    async def _cleanup(self) -> None:
        self._side.closed = True
        if self.ctx is not None:
            self.ctx._deadline_listener = None
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        tasks = [t for t in [self._task, *self._helpers] if t is not None]
        for t in tasks:
            t.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
        self._mark_finished()
