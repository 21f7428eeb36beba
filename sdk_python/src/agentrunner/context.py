"""`RunContext`: the runner's read access to one run (PROTOCOL_V1 §5) plus its host API, cancellation
and steering. The contract's messages are exposed as they are (`ctx.conversation.conversation_id`); only
JSON-ish parts are turned into Python values (`ctx.config`, `ctx.state.conversation`, `ctx.variables`).

Side results: `ctx.log`, `ctx.call_tool` and the interaction helpers add results to the run's stream
from inside `run()` (or a task it awaits). The engine merges them with the yielded results in the order
they happen and numbers them like any other result.
"""

# ruff: noqa: ASYNC109 - `timeout` is the documented way to bound a steering wait.

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import structlog
from google.protobuf import json_format, struct_pb2
from google.protobuf import message as pb_message

from agentrunner import interactions, results
from agentrunner.api import HostApi, tool_text
from agentrunner.errors import AgentRunnerError, InvalidArgumentError, PayloadTooLargeError
from agentrunner.events import typed_event
from agentrunner.protocol import REPLY_MAX_CHARS
from agentrunner.v1 import common_pb2, context_pb2, proxy_service_pb2, result_pb2

Emitter = Callable[[result_pb2.RunResult], Awaitable[None]]
MessageLike = str | common_pb2.AssistantMessage
_PREVIEW_CHARS = 2000

SteeringInput = proxy_service_pb2.SteeringInput

_POLL_INTERVAL = 0.25


def struct_to_dict(value: struct_pb2.Struct) -> dict[str, Any]:
    """A protobuf `Struct` as a plain dict (numbers come back as floats, as JSON has no integers)."""
    return json_format.MessageToDict(value)


class Input:
    """The current event's input (`ctx.input`): text, contents and attachments."""

    def __init__(self, raw: context_pb2.RunInput) -> None:
        self.raw = raw

    @property
    def text(self) -> str:
        """The input's plain text (empty when the event carried only contents or attachments)."""
        return self.raw.text

    @property
    def contents(self) -> list[common_pb2.ContentElement]:
        """The input's rich content elements (text, images, mentions...) in the order the platform sent them."""
        return list(self.raw.contents)

    @property
    def attachments(self) -> list[common_pb2.ArtifactRef]:
        """References to the files attached to the input; read their bodies with `ctx.api.download_artifact`."""
        return list(self.raw.attachments)

    def to_text(self) -> str:
        """`text`, else the text elements of `contents` joined by newlines."""
        if self.raw.text:
            return self.raw.text
        return "\n".join(c.text for c in self.raw.contents if c.WhichOneof("kind") == "text")

    @property
    def interaction(self) -> common_pb2.InteractionSubmission | None:
        """The answer to a structured interaction (`interaction.submitted` events), else None."""
        return self.raw.interaction if self.raw.HasField("interaction") else None

    @property
    def interaction_values(self) -> dict[str, Any]:
        """The answer's field values as a dict (empty without an answer)."""
        return struct_to_dict(self.raw.interaction.values) if self.raw.HasField("interaction") else {}

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

    __slots__ = ("_pull", "_queue_or_none", "control_active")

    def __init__(self, pull: Callable[[], Any] | None = None) -> None:
        #: made by the first item or the first reader (`_queue`): most runs are never steered, and an
        #: empty `asyncio.Queue` is about 2 KiB of every open run
        self._queue_or_none: asyncio.Queue[SteeringInput] | None = None
        self._pull = pull
        self.control_active = False

    @property
    def _queue(self) -> asyncio.Queue[SteeringInput]:
        if self._queue_or_none is None:
            self._queue_or_none = asyncio.Queue()
        return self._queue_or_none

    def push(self, item: SteeringInput) -> None:
        """Queues an item for `get` / `async for` (called by the control stream when the host sends steering)."""
        self._queue.put_nowait(item)

    def pending(self) -> list[SteeringInput]:
        """Items already received, without waiting."""
        items: list[SteeringInput] = []
        queue = self._queue_or_none
        while queue is not None and not queue.empty():
            items.append(queue.get_nowait())
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


class RunLogger:
    """`ctx.log`: `await ctx.log("text", level="info", **fields)` adds a `run.log` result (kept in the
    run ledger); `ctx.log.info(...)` and friends write a local structlog line only.
    """

    def __init__(self, ctx: RunContext, logger: Any) -> None:
        self._ctx = ctx
        self._logger = logger

    async def __call__(self, text: str, level: str = "info", **fields: Any) -> None:
        """Adds a `run.log` result at `level`, with `fields` as its structured data; unlike `ctx.log.info`, the
        line is kept in the run ledger, where an operator reading the run sees it."""
        await self._ctx.emit(results.log(text, level, fields=fields or None))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


def _assistant(
    message: MessageLike, contents: Iterable[common_pb2.ContentElement] = ()
) -> common_pb2.AssistantMessage:
    if isinstance(message, common_pb2.AssistantMessage):
        out = message
    elif isinstance(message, str):
        out = common_pb2.AssistantMessage(content=message, contents=list(contents))
    else:
        raise TypeError(f"a reply is a str or an AssistantMessage, not {type(message).__name__}")
    if len(out.content) > REPLY_MAX_CHARS:
        raise PayloadTooLargeError(
            f"a reply has at most {REPLY_MAX_CHARS} characters (got {len(out.content)})",
            metadata={"field": "message.content"},
        )
    return out


class ReplyStream:
    """One streamed reply (`async with ctx.reply_stream() as s`). `update` takes the full text so far,
    not a delta; the reply is finished when the block exits normally and aborted when it raises.
    """

    def __init__(self, api: HostApi, reply_id: str, quote_origin: bool) -> None:
        self._api = api
        self.reply_id = reply_id
        self.quote_origin = quote_origin
        self.text = ""
        self.closed = False
        self.result: proxy_service_pb2.SendReplyResponse | None = None
        self._lock = asyncio.Lock()

    async def _send(
        self, mode: common_pb2.ReplyMode.ValueType, message: common_pb2.AssistantMessage | None
    ) -> proxy_service_pb2.SendReplyResponse:
        self.result = await self._api.send_reply(self.reply_id, mode, message, quote_origin=self.quote_origin)
        return self.result

    async def update(self, text: MessageLike) -> proxy_service_pb2.SendReplyResponse:
        """Replaces the reply's content with `text` (the complete text generated so far)."""
        message = _assistant(text)
        async with self._lock:
            if self.closed:
                raise RuntimeError("the reply stream is closed")
            self.text = message.content
            return await self._send(common_pb2.REPLY_MODE_UPDATE, message)

    async def finish(self, text: MessageLike | None = None) -> proxy_service_pb2.SendReplyResponse | None:
        """Closes the reply, optionally with final content (else the last update stands)."""
        message = _assistant(text) if text is not None else None
        async with self._lock:
            if self.closed:
                return self.result
            self.closed = True
            if message is not None:
                self.text = message.content
            return await self._send(common_pb2.REPLY_MODE_FINISH, message)

    async def abort(self) -> None:
        """Closes the reply without finishing it; the host withdraws a visible draft if it can."""
        async with self._lock:
            if self.closed:
                return
            self.closed = True
            await self._send(common_pb2.REPLY_MODE_ABORT, None)


class RunRecords:
    """`ctx.runs`: the run ledger through the proxy (`run_id=""` means this run). Each call needs its
    `ctx.context.available_apis` flag (`run_get`, `run_list`, `run_events_page`, `run_cancel`,
    `run_append_result`, `run_finalize`); the SDK refuses locally when it is off.
    """

    def __init__(self, api: HostApi) -> None:
        self._api = api

    async def get(self, run_id: str = "") -> Any:
        """A run's stored record; this run's own when `run_id` is empty."""
        return (await self._api.get_run_record(run_id)).run

    async def list(
        self,
        *,
        conversation_id: str = "",
        statuses: Sequence[int | str] = (),
        before_cursor: str = "",
        limit: int = 0,
    ) -> proxy_service_pb2.ListRunRecordsResponse:
        """A page of run records; `statuses` may be names ("completed") or enum numbers."""
        return await self._api.list_run_records(
            conversation_id=conversation_id,
            statuses=[_status(s) for s in statuses],
            before_cursor=before_cursor,
            limit=limit,
        )

    async def events(
        self, run_id: str = "", *, after_sequence: int = 0, limit: int = 0
    ) -> proxy_service_pb2.ListRunRecordEventsResponse:
        """A run's stored result events after `after_sequence` (to replay what a run produced)."""
        return await self._api.list_run_record_events(run_id, after_sequence=after_sequence, limit=limit)

    async def cancel(self, run_id: str = "", *, reason: str = "") -> Any:
        """Asks the host to cancel a run (this one when `run_id` is empty); returns its record."""
        return (await self._api.cancel_run_record(run_id, reason=reason)).run

    async def append(self, result: result_pb2.RunResult, *, run_id: str = "") -> result_pb2.RunResult:
        """Appends a result to a self-managed run record; returns the result as stored (with its sequence)."""
        return (await self._api.append_run_result(result, run_id=run_id)).result

    async def finalize(self, status: int | str, *, run_id: str = "", reason: str = "") -> Any:
        """Closes a self-managed run record with a terminal status (a name or an enum number)."""
        return (await self._api.finalize_run_record(_status(status), run_id=run_id, reason=reason)).run


def _status(status: int | str) -> common_pb2.RunStatus.ValueType:
    if isinstance(status, int):
        return common_pb2.RunStatus.ValueType(status)
    name = "RUN_STATUS_" + status.upper()
    if name not in common_pb2.RunStatus.keys() or status.upper() == "UNSPECIFIED":
        raise ValueError(f"unknown run status {status!r}")
    return common_pb2.RunStatus.Value(name)


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
        self._cancelled: asyncio.Event | None = None
        self.cancel_reason = ""
        #: called when the host moves the deadline (`_set_deadline`; the engine's deadline timer)
        self._deadline_listener: Callable[[], None] | None = None
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
        self.log = RunLogger(self, structlog.get_logger("agentrunner.runner").bind(run_id=raw.run_id))
        self.runs = RunRecords(self.api)
        self._emitter: Emitter | None = None
        self._reply_count = 0

    @property
    def cancelled(self) -> asyncio.Event:
        """Set when the host cancels the run (made when first asked for: most runs are never cancelled
        and never look, and an event per open run is ~0.7 KiB)."""
        if self._cancelled is None:
            self._cancelled = asyncio.Event()
        return self._cancelled

    # -- plain views of the contract --------------------------------------------------------

    @property
    def run_id(self) -> str:
        """This run's id, the key of everything the host stores about it."""
        return self.raw.run_id

    @property
    def trigger(self) -> context_pb2.Trigger:
        """What fired the run: its type, its origin (platform, schedule, host adapter...) and when."""
        return self.raw.trigger

    @property
    def event(self) -> context_pb2.EventContext:
        """The platform event that triggered the run, as the host recorded it."""
        return self.raw.event

    @property
    def conversation(self) -> context_pb2.ConversationContext:
        """The conversation the run belongs to (ids, bot, history access)."""
        return self.raw.conversation

    @property
    def actor(self) -> context_pb2.ActorContext:
        """Who caused the run (the user or system behind the event)."""
        return self.raw.actor

    @property
    def subject(self) -> context_pb2.SubjectContext:
        """What the event is about (a message, a group, a schedule...), with its id and small data."""
        return self.raw.subject

    @property
    def delivery(self) -> context_pb2.DeliveryContext:
        """Where replies go and what the surface can render (streaming deltas, edits, reactions)."""
        return self.raw.delivery

    @property
    def resources(self) -> context_pb2.Resources:
        """The models, tools, knowledge bases, storage and platform actions this run was granted; the SDK
        checks calls against them before asking the host."""
        return self.raw.resources

    @property
    def context(self) -> context_pb2.ContextAccess:
        """How to get more context: the conversation and thread ids, the cursor of this event for paging
        history, and which host APIs the run may call (`available_apis`)."""
        return self.raw.context

    @property
    def runtime(self) -> context_pb2.RuntimeContext:
        """The host, protocol version, trace id and deadline of this execution (facts about the run, not
        its input)."""
        return self.raw.runtime

    @property
    def adapter(self) -> dict[str, Any]:
        """The adapter's extra data as a dict (platform-specific fields the contract does not model)."""
        return struct_to_dict(self.raw.adapter.extra)

    @property
    def metadata(self) -> dict[str, Any]:
        """Free-form metadata the host attached to the run, as a dict."""
        return struct_to_dict(self.raw.metadata)

    @property
    def trace_id(self) -> str:
        """The W3C trace id of this run, for correlating runner logs with the host's."""
        return self.raw.runtime.trace_id

    @property
    def variables(self) -> dict[str, Any]:
        """Public request variables (the host already dropped sensitive ones)."""
        return struct_to_dict(self.raw.variables)

    @property
    def platform_event(self) -> pb_message.Message | None:
        """The typed platform event (`context_pb2.MessageReceivedEvent`, ...), or None for other types.

        Taken from `event.platform_event`, else parsed from `event.data` (see `agentrunner.events`).
        """
        return typed_event(self.raw.event, self.raw.input)

    @property
    def bot_id(self) -> str:
        """The bot the run answers as: the conversation's bot, else the triggering event's."""
        return self.raw.conversation.bot_id or self.raw.event.platform_event.bot_id

    # -- side results -------------------------------------------------------------------------

    def _attach(self, emitter: Emitter | None) -> None:
        self._emitter = emitter

    async def emit(self, result: result_pb2.RunResult) -> None:
        """Adds a result to the run's stream now, in order with the yielded ones."""
        if self._emitter is None:
            raise RuntimeError("this run context is not running (its run ended or was never started)")
        await self._emitter(result)

    # -- replies ------------------------------------------------------------------------------

    def _next_reply_id(self) -> str:
        self._reply_count += 1
        return f"{self.run_id}.reply.{self._reply_count}"

    async def reply(
        self,
        message: MessageLike,
        *,
        quote_origin: bool = False,
        contents: Iterable[common_pb2.ContentElement] = (),
    ) -> proxy_service_pb2.SendReplyResponse:
        """Sends one complete reply to the current event's delivery target (`SendReply` FULL)."""
        msg = _assistant(message, contents)
        return await self.api.send_reply(
            self._next_reply_id(), common_pb2.REPLY_MODE_FULL, msg, quote_origin=quote_origin
        )

    async def reply_message(
        self, message: MessageLike, quote_origin: bool = False
    ) -> proxy_service_pb2.SendReplyResponse:
        """The public SDK's name for `reply` with an explicit `quote_origin`."""
        return await self.reply(message, quote_origin=quote_origin)

    @contextlib.asynccontextmanager
    async def reply_stream(self, *, quote_origin: bool = False) -> AsyncIterator[ReplyStream]:
        """`async with ctx.reply_stream() as s: await s.update(text_so_far)`; finish on exit, abort on error."""
        stream = ReplyStream(self.api, self._next_reply_id(), quote_origin)
        try:
            yield stream
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(stream.abort())
            raise
        await stream.finish()

    # -- tools --------------------------------------------------------------------------------

    async def get_available_tools(self) -> list[dict[str, Any]]:
        """The tools this run may call: `name`, `description`, `parameters`, `type`, `operations`."""
        return [
            {
                "name": t.tool_name,
                "description": t.description,
                "parameters": struct_to_dict(t.parameters),
                "type": t.tool_type,
                "operations": list(t.operations),
            }
            for t in self.raw.resources.tools
        ]

    async def call_tool(
        self, tool_name: str, parameters: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> proxy_service_pb2.CallToolResponse:
        """Calls a host tool, with `tool.call.started` / `tool.call.completed` added to the stream.

        A tool that reports an error (`is_error`) completes with `error_code="tool.error"`; a failed call
        completes with the error's spec code and re-raises.
        """
        call_id = results.new_id("call")
        await self.emit(results.tool_started(call_id, tool_name, dict(parameters or {})))
        try:
            response = await self.api.call_tool(tool_name, parameters, tool_call_id=call_id, timeout=timeout)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                self._emit_nowait(
                    results.tool_completed(
                        call_id, tool_name, error_code="cancelled", error_message="the run was cancelled"
                    )
                )
            raise
        except Exception as exc:
            await self.emit(results.tool_completed(call_id, tool_name, error=exc))
            raise
        text = tool_text(response)
        preview: dict[str, Any] = {"text": text[:_PREVIEW_CHARS]}
        if response.truncated or len(text) > _PREVIEW_CHARS:
            preview["truncated"] = True
        if response.is_error:
            done = results.tool_completed(
                call_id, tool_name, preview, error_code="tool.error", error_message=text[:500] or "tool error"
            )
        else:
            done = results.tool_completed(call_id, tool_name, preview)
        await self.emit(done)
        return response

    def _emit_nowait(self, result: result_pb2.RunResult) -> None:
        emitter = self._emitter
        nowait = getattr(emitter, "nowait", None)
        if nowait is not None:
            nowait(result)

    # -- structured interactions --------------------------------------------------------------

    async def request_interaction(
        self, request: common_pb2.InteractionRequest
    ) -> common_pb2.InteractionRequest:
        """Validates a request (limits and this surface's `max_fields`) and adds `interaction.requested`."""
        caps = self.raw.delivery.interactions if self.raw.delivery.HasField("interactions") else None
        interactions.validate(request, capabilities=caps)
        if caps is not None and caps.field_types:
            unsupported = {f.type for f in request.fields} - set(caps.field_types)
            if unsupported:
                names = sorted(common_pb2.InteractionFieldType.Name(t) for t in unsupported)
                self.log.warning(
                    "surface cannot render some field types; it shows fallback_text", types=names
                )
        await self.emit(results.interaction(request))
        return request

    async def request_form(
        self,
        title: str,
        fields: Iterable[interactions.FieldSpec],
        *,
        actions: Iterable[interactions.ActionSpec] | None = None,
        description: str = "",
        fallback_text: str | None = None,
        expires_in: float | dt.timedelta | None = None,
        interaction_id: str | None = None,
    ) -> common_pb2.InteractionRequest:
        """Asks for a form; the answer arrives as a new run with `ctx.input.interaction`."""
        return await self.request_interaction(
            self._build(
                title,
                "form",
                fields,
                actions if actions is not None else [("submit", "Submit", "primary")],
                description,
                fallback_text,
                expires_in,
                interaction_id,
            )
        )

    async def request_confirmation(
        self,
        title: str,
        *,
        description: str = "",
        confirm_label: str = "Confirm",
        cancel_label: str = "Cancel",
        danger: bool = False,
        fallback_text: str | None = None,
        expires_in: float | dt.timedelta | None = None,
        interaction_id: str | None = None,
    ) -> common_pb2.InteractionRequest:
        """Asks a yes/no question: actions `confirm` and `cancel`."""
        actions = [
            ("confirm", confirm_label, "danger" if danger else "primary"),
            ("cancel", cancel_label, "default"),
        ]
        return await self.request_interaction(
            self._build(
                title, "confirmation", (), actions, description, fallback_text, expires_in, interaction_id
            )
        )

    async def request_choice(
        self,
        title: str,
        choices: Iterable[interactions.ActionSpec],
        *,
        description: str = "",
        fallback_text: str | None = None,
        expires_in: float | dt.timedelta | None = None,
        interaction_id: str | None = None,
    ) -> common_pb2.InteractionRequest:
        """Asks to pick one of `choices` (ids, `(id, label)` pairs or actions); the answer's `action_id`."""
        return await self.request_interaction(
            self._build(title, "choice", (), choices, description, fallback_text, expires_in, interaction_id)
        )

    def _build(
        self,
        title: str,
        kind: str,
        fields: Iterable[interactions.FieldSpec],
        actions: Iterable[interactions.ActionSpec],
        description: str,
        fallback: str | None,
        expires_in: float | dt.timedelta | None,
        interaction_id: str | None,
    ) -> common_pb2.InteractionRequest:
        return interactions.build(
            title,
            kind=kind,
            fields=fields,
            actions=actions,
            description=description,
            fallback=fallback,
            expires_in=expires_in,
            interaction_id=interaction_id,
        )

    # -- platform actions ---------------------------------------------------------------------

    async def call_platform_api(
        self,
        action: str,
        params: Mapping[str, Any] | None = None,
        *,
        bot_id: str = "",
        idempotency_key: str = "",
    ) -> dict[str, Any]:
        """Runs a platform action through a host delivery adapter (`RequestPlatformAction`); the result."""
        resp = await self.api.request_platform_action(
            action, payload=params, bot_id=bot_id, idempotency_key=idempotency_key
        )
        return struct_to_dict(resp.result)

    async def send_message(
        self,
        target_type: str,
        target_id: str,
        message: MessageLike,
        *,
        bot_id: str = "",
        idempotency_key: str = "",
    ) -> proxy_service_pb2.SendMessageResponse:
        """Sends a message to an explicit target (`person`, `group` or a host `conversation`)."""
        if not target_type or not target_id:
            raise InvalidArgumentError("send_message needs a target_type and a target_id", field="target")
        return await self.api.send_message(
            target_type, target_id, _assistant(message), bot_id=bot_id, idempotency_key=idempotency_key
        )

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
        if self._deadline_listener is not None:  # the engine's deadline timer is re-armed
            self._deadline_listener()

    async def sleep_or_cancel(self, seconds: float) -> bool:
        """Sleeps, waking early when the run is cancelled; True when cancelled."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.cancelled.wait()
        return self.cancelled.is_set()
