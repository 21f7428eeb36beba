"""`RunContext`: the runner's read access to one run (PROTOCOL_V1 §5) plus its host API, cancellation
and steering. The contract's messages are exposed as they are (`ctx.conversation.conversation_id`); only
JSON-ish parts are turned into Python values (`ctx.config`, `ctx.state.conversation`).
"""

# ruff: noqa: ASYNC109 - `timeout` is the documented way to bound a steering wait.

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import structlog
from google.protobuf import json_format, struct_pb2

from agentrunner.api import HostApi
from agentrunner.errors import AgentRunnerError
from agentrunner.v1 import common_pb2, context_pb2, proxy_service_pb2

SteeringInput = proxy_service_pb2.SteeringInput

_POLL_INTERVAL = 0.25


def struct_to_dict(value: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(value)


class Input:
    """The current event's input (`ctx.input`): text, contents and attachments."""

    def __init__(self, raw: context_pb2.RunInput) -> None:
        self.raw = raw

    @property
    def text(self) -> str:
        return self.raw.text

    @property
    def contents(self) -> list[common_pb2.ContentElement]:
        return list(self.raw.contents)

    @property
    def attachments(self) -> list[common_pb2.ArtifactRef]:
        return list(self.raw.attachments)

    def to_text(self) -> str:
        """`text`, else the text elements of `contents` joined by newlines."""
        if self.raw.text:
            return self.raw.text
        return "\n".join(c.text for c in self.raw.contents if c.WhichOneof("kind") == "text")

    def __repr__(self) -> str:
        return f"Input(text={self.raw.text!r}, contents={len(self.raw.contents)}, attachments={len(self.raw.attachments)})"


class State:
    """Snapshot of host-owned state at run start, one dict per scope (write with `results.state`)."""

    def __init__(self, raw: context_pb2.RunState) -> None:
        self.raw = raw
        self.conversation = struct_to_dict(raw.conversation)
        self.actor = struct_to_dict(raw.actor)
        self.subject = struct_to_dict(raw.subject)
        self.runner = struct_to_dict(raw.runner)
        self.binding = struct_to_dict(raw.binding)
        self.workspace = struct_to_dict(raw.workspace)


class Steering:
    """Steering input for the running run: `async for item in ctx.steering` or `await ctx.steering.get(t)`.

    Items come from the control stream; without one, `get` falls back to polling `PullSteering` when the
    run may call it.
    """

    def __init__(self, pull: Callable[[], Any] | None = None) -> None:
        self._queue: asyncio.Queue[SteeringInput] = asyncio.Queue()
        self._pull = pull
        self.control_active = False

    def push(self, item: SteeringInput) -> None:
        self._queue.put_nowait(item)

    def pending(self) -> list[SteeringInput]:
        """Items already received, without waiting."""
        items = []
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
        return items

    async def _next(self) -> SteeringInput:
        while True:
            if not self._queue.empty() or self.control_active or self._pull is None:
                return await self._queue.get()
            try:
                resp = await self._pull()
            except AgentRunnerError as exc:
                structlog.get_logger("agentrunner").warning("steering pull failed", reason=exc.reason)
                self._pull = None
                continue
            for item in resp.items:
                self._queue.put_nowait(item)
            if self._queue.empty():
                await asyncio.sleep(_POLL_INTERVAL)

    async def get(self, timeout: float | None = None) -> SteeringInput | None:
        """The next steering input, or None after `timeout` seconds."""
        try:
            async with asyncio.timeout(timeout):
                return await self._next()
        except TimeoutError:
            return None

    def __aiter__(self) -> AsyncIterator[SteeringInput]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[SteeringInput]:
        while True:
            yield await self._next()


class RunContext:
    """Everything a runner gets for one run. Built by the SDK; runners only read it."""

    def __init__(
        self,
        raw: context_pb2.RunContext,
        *,
        config: Any,
        run_token: str = "",
        host_api_endpoint: str = "",
        precheck: bool = True,
    ) -> None:
        self.raw = raw
        self.config = config
        self.input = Input(raw.input)
        self.state = State(raw.state)
        self.cancelled = asyncio.Event()
        self.cancel_reason = ""
        self._deadline: float | None = None
        if raw.runtime.HasField("deadline_at"):
            self._deadline = raw.runtime.deadline_at.ToNanoseconds() / 1e9
        self.api = HostApi(
            host_api_endpoint,
            run_id=raw.run_id,
            run_token=run_token,
            trace_id=raw.runtime.trace_id,
            remaining=self.remaining,
            resources=raw.resources,
            available_apis=raw.context.available_apis,
            precheck=precheck,
        )
        pull = None
        if self.api.available and raw.context.available_apis.steering_pull:

            async def pull() -> proxy_service_pb2.PullSteeringResponse:
                return await self.api.pull_steering(limit=1)

        self.steering = Steering(pull)
        self.log = structlog.get_logger("agentrunner.runner").bind(run_id=raw.run_id)

    # -- plain views of the contract --------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.raw.run_id

    @property
    def trigger(self) -> context_pb2.Trigger:
        return self.raw.trigger

    @property
    def event(self) -> context_pb2.EventContext:
        return self.raw.event

    @property
    def conversation(self) -> context_pb2.ConversationContext:
        return self.raw.conversation

    @property
    def actor(self) -> context_pb2.ActorContext:
        return self.raw.actor

    @property
    def subject(self) -> context_pb2.SubjectContext:
        return self.raw.subject

    @property
    def delivery(self) -> context_pb2.DeliveryContext:
        return self.raw.delivery

    @property
    def resources(self) -> context_pb2.Resources:
        return self.raw.resources

    @property
    def context(self) -> context_pb2.ContextAccess:
        return self.raw.context

    @property
    def runtime(self) -> context_pb2.RuntimeContext:
        return self.raw.runtime

    @property
    def adapter(self) -> dict[str, Any]:
        return struct_to_dict(self.raw.adapter.extra)

    @property
    def metadata(self) -> dict[str, Any]:
        return struct_to_dict(self.raw.metadata)

    @property
    def trace_id(self) -> str:
        return self.raw.runtime.trace_id

    # -- deadline ----------------------------------------------------------------------------

    @property
    def deadline_at(self) -> dt.datetime | None:
        """The run's absolute deadline (UTC), if the host set one."""
        if self._deadline is None:
            return None
        return dt.datetime.fromtimestamp(self._deadline, tz=dt.UTC)

    def remaining(self) -> float | None:
        """Seconds left before the run deadline (negative when passed), or None without a deadline."""
        if self._deadline is None:
            return None
        return self._deadline - time.time()

    def _set_deadline(self, epoch_seconds: float) -> None:
        self._deadline = epoch_seconds

    async def sleep_or_cancel(self, seconds: float) -> bool:
        """Sleeps, waking early when the run is cancelled; True when cancelled."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.cancelled.wait()
        return self.cancelled.is_set()
