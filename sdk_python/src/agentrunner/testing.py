"""`agentrunner.testing`: an in-process host double on real gRPC, for runner tests.

    async with HostDouble() as host:
        host.on("ListHistory", {"items": [{"role": "user", "content": "hi"}]})
        outcome = await host.run(MyRunner, "hello", config={"prefix": ">"})
        assert outcome.text == "> hello"

The double serves the host's ProxyService on `127.0.0.1:0` with scripted responses per RPC (messages,
dicts, callables, or errors by reason), records every proxy call with its metadata, runs the control
stream (push `cancel` / `steer`), runs a runner (in-process over loopback, or at an address) with a given
input, config and context, checks the stream grammar and returns the results.
"""

# ruff: noqa: ASYNC109 - test helpers take explicit timeouts so no test can hang.

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import inspect
import secrets
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import duration_pb2, json_format, message_factory, timestamp_pb2
from google.protobuf import message as pb_message

from agentrunner.errors import (
    ERROR_TYPES,
    AgentRunnerError,
    InvalidArgumentError,
    RunTokenInvalidError,
    abort_with,
    from_rpc_error,
)
from agentrunner.protocol import RUN_TOKEN_HEADER, is_terminal, result_type
from agentrunner.results import is_answer, kind_name, to_struct
from agentrunner.runner import Runner
from agentrunner.server import RunnerServer, start_server
from agentrunner.v1 import (
    common_pb2,
    context_pb2,
    manifest_pb2,
    proxy_service_pb2,
    result_pb2,
    runner_service_pb2,
    runner_service_pb2_grpc,
)

__all__ = [
    "ControlSession",
    "GrammarError",
    "HostDouble",
    "ProxyCall",
    "RunHandle",
    "RunOutcome",
    "Upload",
    "check_grammar",
    "make_context",
]

_SERVICE = proxy_service_pb2.DESCRIPTOR.services_by_name["ProxyService"]
PROXY_METHODS: dict[str, Any] = {m.name: m for m in _SERVICE.methods}


@dataclass
class Upload:
    """One `UploadArtifact` the double received: the header and the assembled body."""

    header: proxy_service_pb2.UploadArtifactHeader
    data: bytes


class GrammarError(AssertionError):
    """The runner's stream broke the result grammar."""


@dataclass
class ProxyCall:
    """One recorded ProxyService call."""

    method: str
    #: the method's request message (its type depends on `method`, so it is not narrowed here)
    request: Any
    metadata: dict[str, str]
    #: Seconds left on the call's gRPC deadline when it arrived (None without a deadline).
    time_remaining: float | None = None
    #: `time.monotonic()` when the call arrived.
    received_at: float = field(default_factory=time.monotonic)


def check_grammar(results: Sequence[result_pb2.RunResult], run_id: str, *, ended: bool = True) -> list[str]:
    """Grammar violations of a result stream (empty when fine). `ended`: the call finished normally."""
    errors: list[str] = []
    open_tools: dict[str, str] = {}
    terminals = 0
    for i, r in enumerate(results, start=1):
        if r.sequence != i:
            errors.append(f"result {i}: sequence {r.sequence}, expected {i}")
        if r.run_id != run_id:
            errors.append(f"result {i}: run_id {r.run_id!r}, expected {run_id!r}")
        if not r.HasField("timestamp"):
            errors.append(f"result {i}: no timestamp")
        if terminals:
            errors.append(f"result {i}: {result_type(r)} after the terminal result")
        kind = r.WhichOneof("payload")
        if kind == "tool_call_started":
            open_tools[r.tool_call_started.tool_call_id] = r.tool_call_started.tool_name
        elif kind == "tool_call_completed":
            if open_tools.pop(r.tool_call_completed.tool_call_id, None) is None:
                errors.append(f"result {i}: tool.call.completed without a matching tool.call.started")
        if is_terminal(r):
            terminals += 1
    if ended and terminals == 0:
        errors.append("the stream ended without a terminal result")
    if ended and open_tools:
        errors.append(f"tool calls never completed: {sorted(open_tools)}")
    return errors


@dataclass
class RunOutcome:
    """What a run produced, as the host saw it."""

    run_id: str
    results: list[result_pb2.RunResult]
    code: grpc.StatusCode = grpc.StatusCode.OK
    error: AgentRunnerError | None = None
    grammar_errors: list[str] = field(default_factory=list)

    @property
    def types(self) -> list[str | None]:
        """Spec type names in order (`None` for payloads unknown to this reader)."""
        return [result_type(r) for r in self.results]

    @property
    def terminal(self) -> result_pb2.RunResult | None:
        """The run's terminal result, or None when the stream ended without one (a grammar violation)."""
        return self.results[-1] if self.results and is_terminal(self.results[-1]) else None

    @property
    def completed(self) -> bool:
        """Whether the run ended with `run.completed`."""
        t = self.terminal
        return t is not None and t.WhichOneof("payload") == "run_completed"

    @property
    def failure(self) -> result_pb2.RunFailed | None:
        """The `run.failed` payload when the run failed, else None (its code is what a test usually checks)."""
        t = self.terminal
        return t.run_failed if t is not None and t.WhichOneof("payload") == "run_failed" else None

    def of_type(self, spec_type: str) -> list[result_pb2.RunResult]:
        """The results of one spec type (e.g. "message.delta"), in stream order."""
        return [r for r in self.results if result_type(r) == spec_type]

    @property
    def deltas(self) -> list[str]:
        """Every delta's text, whatever its kind."""
        return [r.message_delta.text for r in self.of_type("message.delta")]

    def _kind_text(self, kind: str) -> str:
        return "".join(
            r.message_delta.text
            for r in self.of_type("message.delta")
            if kind_name(r.message_delta.kind) == kind
        )

    @property
    def text(self) -> str:
        """The answer: the final message if any, else the last answer `message.completed`, else the
        concatenated answer deltas (reasoning and progress are never part of it)."""
        t = self.terminal
        if (
            t is not None
            and t.WhichOneof("payload") == "run_completed"
            and t.run_completed.HasField("message")
            and is_answer(t.run_completed.message)
        ):
            return t.run_completed.message.content
        completed = [
            r.message_completed.message
            for r in self.of_type("message.completed")
            if is_answer(r.message_completed.message)
        ]
        if completed:
            return completed[-1].content
        return self._kind_text("answer")

    @property
    def reasoning(self) -> str:
        """Reasoning text: the reasoning deltas, else the reasoning messages, joined."""
        return self._kind_text("reasoning") or "".join(
            r.message_completed.message.content
            for r in self.of_type("message.completed")
            if kind_name(r.message_completed.message.kind) == "reasoning"
        )

    @property
    def progress(self) -> list[str]:
        """Progress messages (complete ones, else streamed ones per message id), in order."""
        out = [
            r.message_completed.message.content
            for r in self.of_type("message.completed")
            if kind_name(r.message_completed.message.kind) == "progress"
        ]
        if out:
            return out
        streamed: dict[str, str] = {}
        for r in self.of_type("message.delta"):
            if kind_name(r.message_delta.kind) == "progress":
                streamed[r.message_delta.message_id] = (
                    streamed.get(r.message_delta.message_id, "") + r.message_delta.text
                )
        return list(streamed.values())

    @property
    def metadata(self) -> dict[str, Any]:
        """The terminal result's envelope metadata."""
        t = self.terminal
        return json_format.MessageToDict(t.metadata) if t is not None else {}


class RunHandle:
    """A run in progress: read results as they come, cancel the call, or wait for the end."""

    def __init__(
        self,
        run_id: str,
        context: context_pb2.RunContext,
        call: grpc.aio.UnaryStreamCall[runner_service_pb2.RunRequest, runner_service_pb2.RunResponse],
    ) -> None:
        self.run_id = run_id
        self.context = context
        self.call = call
        self.results: list[result_pb2.RunResult] = []
        self._code = grpc.StatusCode.OK
        self._error: AgentRunnerError | None = None
        self._done = False
        #: `time.monotonic()` when the run was started and when its terminal result was read.
        self.started_at = time.monotonic()
        self.terminal_at: float | None = None

    @property
    def done(self) -> bool:
        """The stream ended (normally, with an error, or cancelled)."""
        return self._done

    async def next(self, timeout: float = 5.0) -> result_pb2.RunResult | None:
        """The next result, or None when the stream ended."""
        if self._done:
            return None
        try:
            async with asyncio.timeout(timeout):
                msg = await self.call.read()
        except grpc.RpcError as exc:
            self._done = True
            self._code = exc.code()
            self._error = from_rpc_error(exc)
            return None
        except asyncio.CancelledError:
            if self.call.cancelled():
                self._done = True
                self._code = grpc.StatusCode.CANCELLED
                return None
            raise
        if not isinstance(msg, runner_service_pb2.RunResponse):  # EOF
            self._done = True
            return None
        self.results.append(msg.result)
        if self.terminal_at is None and is_terminal(msg.result):
            self.terminal_at = time.monotonic()
        return msg.result

    def cancel(self) -> None:
        """Cancels the `Run` call (the host giving up on the run)."""
        self.call.cancel()
        self._done = True
        self._code = grpc.StatusCode.CANCELLED

    async def wait(self, timeout: float = 30.0, *, check: bool = True) -> RunOutcome:
        """Reads to the end; raises `GrammarError` on a grammar violation when `check`."""
        async with asyncio.timeout(timeout):
            while await self.next(timeout) is not None:
                pass
        outcome = self.outcome()
        if check and outcome.grammar_errors:
            raise GrammarError("; ".join(outcome.grammar_errors))
        return outcome

    def outcome(self) -> RunOutcome:
        """What was read so far, with its grammar violations (the stream counts as ended when done)."""
        outcome = RunOutcome(self.run_id, list(self.results), self._code, self._error)
        outcome.grammar_errors = check_grammar(
            outcome.results, self.run_id, ended=self._done and self._code == grpc.StatusCode.OK
        )
        return outcome


def _model_resources(items: Iterable[str | context_pb2.ModelResource]) -> list[context_pb2.ModelResource]:
    return [
        context_pb2.ModelResource(model_id=m, model_type="llm", provider="test") if isinstance(m, str) else m
        for m in items
    ]


def _tool_resources(items: Iterable[str | context_pb2.ToolResource]) -> list[context_pb2.ToolResource]:
    return [
        context_pb2.ToolResource(tool_name=t, tool_type="native") if isinstance(t, str) else t for t in items
    ]


def _kb_resources(
    items: Iterable[str | context_pb2.KnowledgeBaseResource],
) -> list[context_pb2.KnowledgeBaseResource]:
    return [context_pb2.KnowledgeBaseResource(kb_id=k, kb_name=k) if isinstance(k, str) else k for k in items]


def default_apis(manifest: manifest_pb2.RunnerManifest | None) -> context_pb2.ContextApis:
    """The pull APIs a host would grant for the manifest's permissions (its full policy)."""
    apis = context_pb2.ContextApis()
    if manifest is None:
        return apis
    p = manifest.permissions
    m = manifest_pb2
    apis.history_page = m.HISTORY_OPERATION_PAGE in p.history
    apis.history_search = m.HISTORY_OPERATION_SEARCH in p.history
    apis.event_get = m.EVENT_OPERATION_GET in p.events
    apis.event_page = m.EVENT_OPERATION_PAGE in p.events
    apis.artifact_metadata = m.ARTIFACT_OPERATION_METADATA in p.artifacts
    apis.artifact_read = m.ARTIFACT_OPERATION_READ in p.artifacts
    apis.artifact_write = m.ARTIFACT_OPERATION_WRITE in p.artifacts
    apis.state = bool(p.state)
    apis.storage = bool(p.storage)
    apis.prompt_get = p.prompt
    apis.steering_pull = manifest.capabilities.steering
    apis.run_get = m.RUN_RECORD_OPERATION_GET in p.runs
    apis.run_list = m.RUN_RECORD_OPERATION_LIST in p.runs
    apis.run_events_page = m.RUN_RECORD_OPERATION_EVENTS_PAGE in p.runs
    apis.run_cancel = m.RUN_RECORD_OPERATION_CANCEL in p.runs
    apis.run_append_result = m.RUN_RECORD_OPERATION_APPEND_RESULT in p.runs
    apis.run_finalize = m.RUN_RECORD_OPERATION_FINALIZE in p.runs
    apis.reply = True
    return apis


#: What the double's default surface renders of structured interactions (everything).
FULL_INTERACTIONS = common_pb2.InteractionCapabilities(
    field_types=[v for v in common_pb2.InteractionFieldType.values() if v],
    action_styles=[v for v in common_pb2.InteractionActionStyle.values() if v],
    supports_updates=True,
)

#: `PlatformEvent` member -> event type, for `make_context(platform_event=...)`.
_MEMBER_EVENT_TYPES = {
    "message_received": "message.received",
    "message_recalled": "message.recalled",
    "group_member_joined": "group.member_joined",
    "friend_request_received": "friend.request_received",
    "interaction_submitted": "interaction.submitted",
    "schedule_triggered": "schedule.triggered",
    "api_invoked": "api.invoked",
}


def make_context(
    text: str = "",
    *,
    manifest: manifest_pb2.RunnerManifest | None = None,
    run_id: str | None = None,
    config: Mapping[str, Any] | None = None,
    streaming: bool = True,
    deadline: float | None = 30.0,
    models: Iterable[str | context_pb2.ModelResource] = (),
    tools: Iterable[str | context_pb2.ToolResource] = (),
    knowledge_bases: Iterable[str | context_pb2.KnowledgeBaseResource] = (),
    storage: Iterable[str] | None = None,
    apis: context_pb2.ContextApis | Mapping[str, bool] | None = None,
    state: Mapping[str, Mapping[str, Any]] | None = None,
    conversation_id: str = "conv-test",
    contents: Iterable[common_pb2.ContentElement] = (),
    attachments: Iterable[common_pb2.ArtifactRef] = (),
    event_type: str | None = None,
    event_data: Mapping[str, Any] | None = None,
    platform_event: context_pb2.PlatformEvent | None = None,
    variables: Mapping[str, Any] | None = None,
    automatic_reply: bool = False,
    interactions: common_pb2.InteractionCapabilities | None = None,
    interaction: common_pb2.InteractionSubmission | Mapping[str, Any] | None = None,
    skills: Iterable[str | context_pb2.SkillResource] = (),
    platform_actions: Iterable[str] | None = None,
    bot_id: str = "bot-test",
) -> context_pb2.RunContext:
    """A realistic `RunContext`: a `message.received` event, with the manifest's pull APIs granted.

    `event_type` / `event_data` / `platform_event` shape the event (the type follows the typed event's
    member); `interaction` makes it an `interaction.submitted` answer; `interactions` is the surface's
    interaction support (default: everything when the manifest declares `interactions`);
    `platform_actions` defaults to the manifest's `platform_api` permissions.
    """
    run_id = run_id or f"run_{uuid.uuid4().hex[:12]}"
    now = timestamp_pb2.Timestamp()
    now.GetCurrentTime()
    ctx = context_pb2.RunContext(
        run_id=run_id,
        trigger=context_pb2.Trigger(
            type="message.received", source=context_pb2.TRIGGER_SOURCE_API, timestamp=now
        ),
        event=context_pb2.EventContext(
            event_id=f"evt_{uuid.uuid4().hex[:12]}",
            event_type="message.received",
            event_time=now,
            source="test",
        ),
        conversation=context_pb2.ConversationContext(
            conversation_id=conversation_id, launcher_type="person", launcher_id="user-1", sender_id="user-1"
        ),
        actor=context_pb2.ActorContext(actor_type="user", actor_id="user-1", actor_name="Tester"),
        input=context_pb2.RunInput(text=text, contents=list(contents), attachments=list(attachments)),
        delivery=context_pb2.DeliveryContext(surface="test", supports_streaming=streaming),
        config=to_struct(config),
    )
    _add_resources(ctx, manifest, models, tools, knowledge_bases, skills, platform_actions)
    ctx.conversation.bot_id = bot_id
    ctx.delivery.automatic_reply = automatic_reply
    if interactions is not None:
        ctx.delivery.interactions.CopyFrom(interactions)
    elif manifest is not None and manifest.capabilities.interactions:
        ctx.delivery.interactions.CopyFrom(FULL_INTERACTIONS)
    if variables:
        ctx.variables.CopyFrom(to_struct(variables))
    _shape_event(ctx, now, event_type, event_data, platform_event, interaction)
    _grant(ctx, manifest, storage, apis)
    ctx.context.conversation_id = conversation_id
    ctx.context.inline_policy.mode = context_pb2.INLINE_MODE_CURRENT_EVENT
    for scope, values in (state or {}).items():
        getattr(ctx.state, scope).CopyFrom(to_struct(values))
    ctx.runtime.host = "agentrunner-testing"
    ctx.runtime.protocol_version = "1"
    ctx.runtime.trace_id = secrets.token_hex(16)
    if deadline is not None:
        ctx.runtime.deadline_at.FromNanoseconds(int((time.time() + deadline) * 1e9))
    return ctx


def _add_resources(
    ctx: context_pb2.RunContext,
    manifest: manifest_pb2.RunnerManifest | None,
    models: Iterable[str | context_pb2.ModelResource],
    tools: Iterable[str | context_pb2.ToolResource],
    knowledge_bases: Iterable[str | context_pb2.KnowledgeBaseResource],
    skills: Iterable[str | context_pb2.SkillResource],
    platform_actions: Iterable[str] | None,
) -> None:
    """`make_context`'s resources: the run's models, tools, knowledge bases, skills and platform actions
    (by default the manifest's `platform_api` permissions)."""
    ctx.resources.models.extend(_model_resources(models))
    ctx.resources.tools.extend(_tool_resources(tools))
    ctx.resources.knowledge_bases.extend(_kb_resources(knowledge_bases))
    ctx.resources.skills.extend(
        context_pb2.SkillResource(skill_name=k, display_name=k) if isinstance(k, str) else k for k in skills
    )
    ctx.resources.platform_actions.extend(
        platform_actions
        if platform_actions is not None
        else (list(manifest.permissions.platform_api) if manifest else [])
    )


def _shape_event(
    ctx: context_pb2.RunContext,
    now: timestamp_pb2.Timestamp,
    event_type: str | None,
    event_data: Mapping[str, Any] | None,
    platform_event: context_pb2.PlatformEvent | None,
    interaction: common_pb2.InteractionSubmission | Mapping[str, Any] | None,
) -> None:
    """`make_context`'s event: an interaction answer makes it `interaction.submitted`, a typed platform
    event gives its member's type, unless `event_type` says otherwise; `event_data` is its data."""
    if interaction is not None:
        if not isinstance(interaction, common_pb2.InteractionSubmission):
            interaction = json_format.ParseDict(dict(interaction), common_pb2.InteractionSubmission())
        if not interaction.HasField("submitted_at"):
            interaction.submitted_at.CopyFrom(now)
        ctx.input.interaction.CopyFrom(interaction)
        event_type = event_type or "interaction.submitted"
    if platform_event is not None:
        ctx.event.platform_event.CopyFrom(platform_event)
        member = platform_event.WhichOneof("event")
        event_type = event_type or (_MEMBER_EVENT_TYPES.get(member) if member else None)
    if event_type:
        ctx.event.event_type = event_type
        ctx.trigger.type = event_type
    if event_data:
        ctx.event.data.CopyFrom(to_struct(event_data))


def _grant(
    ctx: context_pb2.RunContext,
    manifest: manifest_pb2.RunnerManifest | None,
    storage: Iterable[str] | None,
    apis: context_pb2.ContextApis | Mapping[str, bool] | None,
) -> None:
    """`make_context`'s grants: the storage areas (default: the manifest's) and the available APIs (the
    manifest's pull APIs, with `apis` overriding them, or `apis` as given)."""
    areas = (
        list(storage)
        if storage is not None
        else [
            manifest_pb2.StorageArea.Name(a).removeprefix("STORAGE_AREA_").lower()
            for a in (manifest.permissions.storage if manifest else [])
        ]
    )
    for area in areas:
        setattr(ctx.resources.storage, f"{area}_storage", True)
    if isinstance(apis, context_pb2.ContextApis):
        ctx.context.available_apis.CopyFrom(apis)
    else:
        ctx.context.available_apis.CopyFrom(default_apis(manifest))
        for key, value in (apis or {}).items():
            setattr(ctx.context.available_apis, key, value)


Script = Any  # a message, a dict, a callable(request, call), an AgentRunnerError, or a list (streams)

#: Answers of unscripted calls that a real host would give on success (others answer an empty message).
_DEFAULT_ANSWERS: dict[str, Script] = {
    "SendReply": lambda req, call: proxy_service_pb2.SendReplyResponse(
        reply_id=req.reply_id, delivered=req.mode != common_pb2.REPLY_MODE_ABORT
    ),
    "SendMessage": proxy_service_pb2.SendMessageResponse(delivered=True),
}


@dataclass
class ControlSession:
    """One run's control stream as the double saw it."""

    run_id: str
    outbox: asyncio.Queue[proxy_service_pb2.ControlResponse] = field(default_factory=asyncio.Queue)
    acks: list[proxy_service_pb2.ControlAck] = field(default_factory=list)
    heartbeats: int = 0
    hello: proxy_service_pb2.ControlHello | None = None
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    ack_event: asyncio.Event = field(default_factory=asyncio.Event)
    #: `time.monotonic()` of the hello, of each heartbeat and of the stream's end.
    opened_at: float = field(default_factory=time.monotonic)
    heartbeat_times: list[float] = field(default_factory=list)
    closed_at: float | None = None


class HostDouble:
    """An in-process stand-in for the host: ProxyService on real gRPC, plus a `Run` client."""

    def __init__(
        self, *, control: bool = True, heartbeat_interval: float = 0.2, check_token: bool = True
    ) -> None:
        self.control_enabled = control
        self.heartbeat_interval = heartbeat_interval
        self.check_token = check_token
        self.calls: list[ProxyCall] = []
        #: unscripted `UploadArtifact` calls, in order
        self.uploads: list[Upload] = []
        self.tokens: dict[str, str] = {}
        self._scripts: dict[str, list[Script]] = defaultdict(list)
        self._sessions: dict[str, ControlSession] = {}
        self._session_ready: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._server: grpc.aio.Server | None = None
        self._runner_servers: dict[int, RunnerServer] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self.endpoint = ""

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> str:
        """Starts the double's ProxyService on a free loopback port; returns its address for `host_api_endpoint`."""
        server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", 16 << 20),
                ("grpc.max_send_message_length", 16 << 20),
            ]
        )
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        for name, method in PROXY_METHODS.items():
            req_cls = message_factory.GetMessageClass(method.input_type)
            resp_cls = message_factory.GetMessageClass(method.output_type)
            des, ser = req_cls.FromString, resp_cls.SerializeToString
            if name == "Control":
                handlers[name] = grpc.stream_stream_rpc_method_handler(self._control, des, ser)
            elif method.client_streaming:
                handlers[name] = grpc.stream_unary_rpc_method_handler(self._upload(name, resp_cls), des, ser)
            elif method.server_streaming:
                handlers[name] = grpc.unary_stream_rpc_method_handler(
                    self._streaming(name, resp_cls), des, ser
                )
            else:
                handlers[name] = grpc.unary_unary_rpc_method_handler(self._unary(name, resp_cls), des, ser)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers)])
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self._server = server
        self.endpoint = f"127.0.0.1:{port}"
        return self.endpoint

    async def stop(self) -> None:
        """Stops the runner servers it started, its channels and its own server."""
        for handle in self._runner_servers.values():
            await handle.stop(0.2)
        self._runner_servers.clear()
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        if self._server is not None:
            await self._server.stop(0)
            self._server = None

    async def __aenter__(self) -> HostDouble:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- scripting ----------------------------------------------------------------------------

    def on(
        self,
        method: str,
        response: Script = None,
        *,
        error: str | AgentRunnerError | None = None,
        message: str = "",
        retryable: bool | None = None,
    ) -> HostDouble:
        """Scripts the next answer of `method`. Answers are used in order; the last one repeats.

        `response`: a response message, a dict in the response's JSON shape, a (sync or async)
        callable `(request, call) -> response` that may raise `AgentRunnerError`, or for streaming
        RPCs a list of items. `error`: a reason (`"NOT_FOUND"`) or an `AgentRunnerError` to answer with.
        """
        if method not in PROXY_METHODS or method == "Control":
            raise ValueError(f"unknown ProxyService method {method!r}")
        if error is not None:
            if isinstance(error, str):
                cls = ERROR_TYPES[error]
                error = cls(message or f"scripted {error}", retryable=retryable)
            response = error
        self._scripts[method].append(response)
        return self

    def reset_scripts(self) -> None:
        """Forgets every scripted answer (unscripted calls get the defaults again)."""
        self._scripts.clear()

    def calls_to(self, method: str) -> list[ProxyCall]:
        """The proxy calls of one method the runner made, in order (to assert what it asked the host)."""
        return [c for c in self.calls if c.method == method]

    @property
    def replies(self) -> list[proxy_service_pb2.SendReplyRequest]:
        """Every `SendReply` request the double received, in order."""
        return [c.request for c in self.calls if isinstance(c.request, proxy_service_pb2.SendReplyRequest)]

    def reply_log(self) -> list[tuple[str, str, str]]:
        """`SendReply` calls as `(reply_id, mode, text)`, mode without its prefix (`UPDATE`, `FINISH`)."""
        return [
            (r.reply_id, common_pb2.ReplyMode.Name(r.mode).removeprefix("REPLY_MODE_"), r.message.content)
            for r in self.replies
        ]

    def _next_script(self, method: str) -> Script:
        queue = self._scripts.get(method)
        if not queue:
            return _DEFAULT_ANSWERS.get(method)
        return queue.pop(0) if len(queue) > 1 else queue[0]

    async def _record(
        self,
        method: str,
        request: pb_message.Message,
        context: grpc.aio.ServicerContext[pb_message.Message, pb_message.Message],
    ) -> ProxyCall:
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        call = ProxyCall(method, request, metadata, context.time_remaining())
        self.calls.append(call)
        if self.check_token:
            token = metadata.get(RUN_TOKEN_HEADER, "")
            if token not in self.tokens.values():
                await abort_with(context, RunTokenInvalidError("missing or unknown run token"))
        return call

    async def _answer(self, script: Script, request: pb_message.Message | Upload, call: ProxyCall) -> Any:
        if callable(script) and not isinstance(script, pb_message.Message):
            script = script(request, call)
            if inspect.isawaitable(script):
                script = await script
        return script

    def _unary(self, method: str, resp_cls: type[pb_message.Message]) -> Callable[..., Any]:
        async def handler(
            request: pb_message.Message,
            context: grpc.aio.ServicerContext[pb_message.Message, pb_message.Message],
        ) -> pb_message.Message:
            call = await self._record(method, request, context)
            try:
                answer = await self._answer(self._next_script(method), request, call)
            except AgentRunnerError as exc:
                answer = exc
            if isinstance(answer, AgentRunnerError):
                await abort_with(context, answer)
            if answer is None:
                return resp_cls()
            if isinstance(answer, Mapping):
                return json_format.ParseDict(dict(answer), resp_cls())
            if not isinstance(answer, pb_message.Message):
                raise TypeError(
                    f"a {method} script answered {type(answer).__name__}: use a message, a dict, None or an error"
                )
            return answer

        return handler

    def _streaming(self, method: str, resp_cls: type[pb_message.Message]) -> Callable[..., Any]:
        async def handler(
            request: pb_message.Message,
            context: grpc.aio.ServicerContext[pb_message.Message, pb_message.Message],
        ) -> AsyncIterator[pb_message.Message]:
            call = await self._record(method, request, context)
            try:
                answer = await self._answer(self._next_script(method), request, call)
            except AgentRunnerError as exc:
                answer = exc
            if isinstance(answer, AgentRunnerError):
                await abort_with(context, answer)
            for item in answer or []:
                if isinstance(item, AgentRunnerError):
                    await abort_with(context, item)
                yield json_format.ParseDict(dict(item), resp_cls()) if isinstance(item, Mapping) else item

        return handler

    def _upload(self, method: str, resp_cls: type[pb_message.Message]) -> Callable[..., Any]:
        """`UploadArtifact`: the body is assembled, size and sha256 checked like a host would; the
        script (if any) gets an `Upload`; unscripted uploads are stored in `uploads` and answered with
        a fresh reference."""

        async def handler(
            request_iterator: Any, context: grpc.aio.ServicerContext[pb_message.Message, pb_message.Message]
        ) -> pb_message.Message:
            parts: list[bytes] = []
            header = proxy_service_pb2.UploadArtifactHeader()
            async for item in request_iterator:
                if item.WhichOneof("part") == "header":
                    header = item.header
                else:
                    parts.append(item.chunk)
            call = await self._record(method, header, context)
            upload = Upload(header, b"".join(parts))
            digest = hashlib.sha256(upload.data).hexdigest()
            if header.HasField("size_bytes") and header.size_bytes != len(upload.data):
                await abort_with(context, InvalidArgumentError("size does not match", field="size_bytes"))
            if header.sha256 and header.sha256 != digest:
                await abort_with(context, InvalidArgumentError("sha256 does not match", field="sha256"))
            script = self._next_script(method)
            if script is not None:
                try:
                    answer = await self._answer(script, upload, call)
                except AgentRunnerError as exc:
                    answer = exc
                if isinstance(answer, AgentRunnerError):
                    await abort_with(context, answer)
                return (
                    json_format.ParseDict(dict(answer), resp_cls()) if isinstance(answer, Mapping) else answer
                )
            self.uploads.append(upload)
            ref = common_pb2.ArtifactRef(
                artifact_id=f"art_{uuid.uuid4().hex[:12]}",
                name=header.name,
                mime_type=header.mime_type or "application/octet-stream",
                size_bytes=len(upload.data),
                sha256=digest,
            )
            return proxy_service_pb2.UploadArtifactResponse(artifact=ref)

        return handler

    # -- control stream -----------------------------------------------------------------------

    async def _control(
        self,
        request_iterator: Any,
        context: grpc.aio.ServicerContext[
            proxy_service_pb2.ControlRequest, proxy_service_pb2.ControlResponse
        ],
    ) -> None:
        if not self.control_enabled:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        first: object = await context.read()  # (EOF when the client closed its side)
        if not isinstance(first, proxy_service_pb2.ControlRequest) or first.WhichOneof("message") != "hello":
            await abort_with(context, RunTokenInvalidError("the first control message must be hello"))
        hello = first.hello
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        self.calls.append(ProxyCall("Control", hello, metadata, context.time_remaining()))
        if self.check_token and self.tokens.get(hello.run_id) != hello.run_token:
            await abort_with(context, RunTokenInvalidError("hello carries a wrong run token"))
        session = ControlSession(hello.run_id, hello=hello)
        self._sessions[hello.run_id] = session
        try:
            await self._serve_control(context, session)
        finally:
            # on every way out (a runner that ends its run at once may cancel the stream while the
            # welcome is being written): the session's end is what `control.closed` is judged by
            session.closed_at = time.monotonic()
            session.closed.set()

    async def _serve_control(
        self,
        context: grpc.aio.ServicerContext[
            proxy_service_pb2.ControlRequest, proxy_service_pb2.ControlResponse
        ],
        session: ControlSession,
    ) -> None:
        welcome = proxy_service_pb2.ControlWelcome(
            heartbeat_interval=duration_pb2.Duration(nanos=int(self.heartbeat_interval * 1e9))
        )
        await context.write(proxy_service_pb2.ControlResponse(welcome=welcome))
        self._session_ready[session.run_id].set()

        async def reader() -> None:
            while True:
                msg: object = await context.read()
                if not isinstance(msg, proxy_service_pb2.ControlRequest):  # EOF
                    return
                kind = msg.WhichOneof("message")
                if kind == "ack":
                    session.acks.append(msg.ack)
                    session.ack_event.set()
                elif kind == "heartbeat":
                    session.heartbeats += 1
                    session.heartbeat_times.append(time.monotonic())

        read_task = asyncio.create_task(reader())
        try:
            while True:
                get = asyncio.ensure_future(session.outbox.get())
                await asyncio.wait({get, read_task}, return_when=asyncio.FIRST_COMPLETED)
                if not get.done():
                    get.cancel()
                    break
                await context.write(get.result())
        finally:
            read_task.cancel()
            with contextlib.suppress(BaseException):
                await read_task

    def control_session(self, run_id: str) -> ControlSession | None:
        """The run's control stream as the double saw it (hello, acks, heartbeats), if it connected."""
        return self._sessions.get(run_id)

    async def wait_control(self, run_id: str, timeout: float = 5.0) -> ControlSession:
        """The run's control session once the runner connected (raises `TimeoutError` after `timeout`)."""
        async with asyncio.timeout(timeout):
            await self._session_ready[run_id].wait()
        return self._sessions[run_id]

    async def _push(
        self, run_id: str, response: proxy_service_pb2.ControlResponse, wait_ack: float | None
    ) -> str:
        session = await self.wait_control(run_id)
        response.signal_id = response.signal_id or f"sig_{uuid.uuid4().hex[:10]}"
        session.ack_event.clear()
        await session.outbox.put(response)
        if wait_ack:
            async with asyncio.timeout(wait_ack):
                while not any(a.signal_id == response.signal_id for a in session.acks):
                    session.ack_event.clear()
                    await session.ack_event.wait()
        return response.signal_id

    async def cancel(self, run_id: str, reason: str = "test cancel", *, grace: float = 0.0) -> str:
        """Pushes a CancelSignal and waits for its ack; returns the signal id."""
        sig = proxy_service_pb2.CancelSignal(
            reason=reason,
            grace_period=duration_pb2.Duration(nanos=int(grace * 1e9) % 10**9, seconds=int(grace)),
        )
        return await self._push(run_id, proxy_service_pb2.ControlResponse(cancel=sig), wait_ack=5.0)

    async def steer(self, run_id: str, text: str) -> str:
        """Pushes a steering input and waits for its ack; returns the signal id."""
        now = timestamp_pb2.Timestamp()
        now.GetCurrentTime()
        item = proxy_service_pb2.SteeringInput(
            steering_id=f"steer_{uuid.uuid4().hex[:10]}",
            input=context_pb2.RunInput(text=text),
            receive_time=now,
        )
        return await self._push(run_id, proxy_service_pb2.ControlResponse(steering=item), wait_ack=5.0)

    async def answer_interaction(
        self, run_id: str, interaction_id: str, action_id: str, values: Mapping[str, Any] | None = None
    ) -> str:
        """Delivers an interaction's answer into the open run the way the host routes a
        `SubmitInteraction` for a steerable run: steering input carrying `RunInput.interaction`."""
        now = timestamp_pb2.Timestamp()
        now.GetCurrentTime()
        submission = common_pb2.InteractionSubmission(
            interaction_id=interaction_id, action_id=action_id, request_run_id=run_id, submitted_at=now
        )
        if values:
            submission.values.update(dict(values))
        item = proxy_service_pb2.SteeringInput(
            steering_id=f"steer_{uuid.uuid4().hex[:10]}",
            input=context_pb2.RunInput(interaction=submission),
            receive_time=now,
        )
        return await self._push(run_id, proxy_service_pb2.ControlResponse(steering=item), wait_ack=5.0)

    # -- running ------------------------------------------------------------------------------

    async def _address(self, runner: Runner | type[Runner] | str) -> str:
        if isinstance(runner, str):
            return runner
        key = id(runner)
        if key not in self._runner_servers:
            self._runner_servers[key] = await start_server([runner])
        return self._runner_servers[key].address

    def _channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            self._channels[address] = grpc.aio.insecure_channel(
                address, options=[("grpc.max_receive_message_length", 16 << 20)]
            )
        return self._channels[address]

    async def start_run(
        self,
        runner: Runner | type[Runner] | str,
        text: str = "",
        *,
        context: context_pb2.RunContext | None = None,
        runner_id: str = "",
        call_timeout: float | None = None,
        host_api_endpoint: str | None = None,
        **context_args: Any,
    ) -> RunHandle:
        """Starts a run and returns its handle. Context args go to `make_context`.

        `host_api_endpoint` overrides the ProxyService address given to the runner (default: this double).
        """
        manifest = None
        stub = runner_service_pb2_grpc.RunnerServiceStub(self._channel(await self._address(runner)))
        if not isinstance(runner, str):
            manifest = runner.get_manifest()
            runner_id = runner_id or manifest.id
        elif context is None:
            # A runner at an address: read its manifest like a host would, to grant its pull APIs.
            listed = await stub.ListRunners(runner_service_pb2.ListRunnersRequest(), timeout=10)
            matching = [m for m in listed.runners if not runner_id or runner_id in (m.id, m.name)]
            manifest = matching[0] if matching else None
            if manifest is not None:
                runner_id = runner_id or manifest.id
        if context is None:
            context = make_context(text, manifest=manifest, **context_args)
        token = f"tok_{secrets.token_hex(12)}"
        self.tokens[context.run_id] = token
        request = runner_service_pb2.RunRequest(
            runner_id=runner_id,
            context=context,
            run_token=token,
            host_api_endpoint=self.endpoint if host_api_endpoint is None else host_api_endpoint,
        )
        if call_timeout is None and context.runtime.HasField("deadline_at"):
            deadline = context.runtime.deadline_at.ToNanoseconds() / 1e9
            call_timeout = max(deadline - time.time(), 0.01)
        call = stub.Run(request, timeout=call_timeout)
        return RunHandle(context.run_id, context, call)

    async def run(
        self,
        runner: Runner | type[Runner] | str,
        text: str = "",
        *,
        check: bool = True,
        timeout: float = 30.0,
        **kwargs: Any,
    ) -> RunOutcome:
        """Runs to the end and returns the outcome (raises `GrammarError` on violations when `check`)."""
        handle = await self.start_run(runner, text, **kwargs)
        return await handle.wait(timeout, check=check)


def deadline_in(seconds: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds))
    return ts
