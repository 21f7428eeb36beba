"""`ctx.api`: the runner's client of the host's ProxyService (PROTOCOL_V1 §8).

Every call carries the run token, the run id and a W3C `traceparent` in metadata; its timeout is the
smaller of a per-call default and the run's remaining deadline (an expired deadline fails locally,
without a call). Failures arrive as typed `agentrunner.errors.AgentRunnerError` subclasses. A local
pre-check against `ctx.resources` / `ctx.context.available_apis` fails fast in development; the host
remains the enforcer.
"""

# ruff: noqa: ASYNC109 - per-call `timeout` seconds are part of the gRPC-style API.

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf import message as pb_message
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentrunner.errors import DeadlineExceededError, UnauthorizedError, from_rpc_error
from agentrunner.protocol import RUN_ID_HEADER, RUN_TOKEN_HEADER
from agentrunner.refusal import lost_refusal, recover_refusal
from agentrunner.results import to_struct, to_value
from agentrunner.v1 import (
    common_pb2,
    context_pb2,
    proxy_service_pb2,
    proxy_service_pb2_grpc,
    result_pb2,
)

P = proxy_service_pb2
RequestT = TypeVar("RequestT", bound=pb_message.Message)
ResponseT = TypeVar("ResponseT", bound=pb_message.Message)

#: Default per-call timeouts in seconds (clipped by the run's remaining deadline).
DEFAULT_TIMEOUTS: dict[str, float] = {
    "InvokeModel": 120.0,
    "StreamModel": 120.0,
    "RerankDocuments": 30.0,
    "CountTokens": 30.0,
    "GetToolDetail": 15.0,
    "CallTool": 60.0,
    "ListKnowledgeBases": 15.0,
    "RetrieveKnowledge": 30.0,
    "GetPrompt": 15.0,
    "ListHistory": 30.0,
    "SearchHistory": 30.0,
    "GetEvent": 15.0,
    "ListEvents": 30.0,
    "GetArtifactMetadata": 15.0,
    "ReadArtifact": 30.0,
    "DownloadArtifact": 120.0,
    "UploadArtifact": 300.0,
    "PullSteering": 10.0,
    "RequestPlatformAction": 60.0,
    "SendReply": 30.0,
    "SendMessage": 60.0,
}
_DEFAULT_TIMEOUT = 15.0
#: largest `UploadArtifactRequest.chunk` (the contract's per-message bound)
UPLOAD_CHUNK_BYTES = 1024 * 1024

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", 16 << 20),
    ("grpc.max_send_message_length", 16 << 20),
    ("grpc.keepalive_time_ms", 60_000),
]

_channels: dict[tuple[int, str], grpc.aio.Channel] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class HostTls:
    """TLS towards the host's ProxyService (needed when the host listens with TLS).

    `ca_file` verifies the host; `cert_file` + `key_file` present a client certificate (mutual TLS);
    `server_name` overrides the name checked against the host's certificate.
    """

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> HostTls | None:
        """`AGENTRUNNER_HOST_CA_FILE`, `..._CERT_FILE`, `..._KEY_FILE`, `..._SERVER_NAME`; None when unset."""
        values = {
            field: environ.get(f"AGENTRUNNER_HOST_{field.upper()}") or None
            for field in ("ca_file", "cert_file", "key_file", "server_name")
        }
        if not any(values.values()):
            return None
        paths = {k: Path(v) for k, v in values.items() if v and k != "server_name"}
        return cls(**paths, server_name=values["server_name"])

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials from the files named here (read when called, i.e. when the channel is
        made)."""

        def read(path: Path | None) -> bytes | None:
            return path.read_bytes() if path else None

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file),
            private_key=read(self.key_file),
            certificate_chain=read(self.cert_file),
        )


_host_tls: HostTls | None = HostTls.from_env()


def configure_host_tls(tls: HostTls | None) -> None:
    """Sets the TLS used for channels to the host opened from now on (None = plaintext)."""
    global _host_tls
    _host_tls = tls


def host_channel(endpoint: str) -> grpc.aio.Channel:
    """The one channel per host endpoint (per event loop) in this process."""
    loop = asyncio.get_running_loop()
    key = (id(loop), endpoint)
    channel = _channels.get(key)
    if channel is None:
        if _host_tls is None:
            channel = grpc.aio.insecure_channel(endpoint, options=CHANNEL_OPTIONS)
        else:
            options = list(CHANNEL_OPTIONS)
            if _host_tls.server_name:
                options.append(("grpc.ssl_target_name_override", _host_tls.server_name))
            channel = grpc.aio.secure_channel(endpoint, _host_tls.credentials(), options=options)
        _channels[key] = channel
    return channel


async def close_channels() -> None:
    """Closes the channels of the running loop (servers call it on shutdown)."""
    loop_id = id(asyncio.get_running_loop())
    for key in [k for k in _channels if k[0] == loop_id]:
        await _channels.pop(key).close()


_tracer = trace.get_tracer("agentrunner")
_PROPAGATOR = TraceContextTextMapPropagator()


def _failed(span: trace.Span, exc: grpc.RpcError) -> None:
    if span.is_recording():
        code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
        span.set_status(trace.Status(trace.StatusCode.ERROR, code.name if code is not None else "error"))


def _trace_int(trace_id: str) -> int:
    """The run's trace id as an int, 0 when it is not a valid W3C trace id."""
    tid = trace_id.lower()
    if len(tid) != 32 or any(c not in "0123456789abcdef" for c in tid):
        return 0
    return int(tid, 16)


def traceparent(trace_id: str) -> str | None:
    """A W3C `traceparent` for a new span of the run's trace, or None without a valid trace id."""
    if not _trace_int(trace_id):
        return None
    return f"00-{trace_id.lower()}-{secrets.token_hex(8)}-01"


@contextlib.contextmanager
def _upload_source(source: bytes | str | os.PathLike[str] | BinaryIO) -> Iterator[BinaryIO]:
    if isinstance(source, bytes | bytearray | memoryview):
        yield io.BytesIO(bytes(source))
    elif isinstance(source, str | os.PathLike):
        with open(source, "rb") as fh:
            yield fh
    else:
        yield source


def _messages(
    messages: Iterable[common_pb2.ModelMessage | Mapping[str, Any]],
) -> list[common_pb2.ModelMessage]:
    return [m if isinstance(m, common_pb2.ModelMessage) else common_pb2.ModelMessage(**m) for m in messages]


def _tools(tools: Iterable[common_pb2.ToolDefinition | Mapping[str, Any]]) -> list[common_pb2.ToolDefinition]:
    out = []
    for t in tools:
        if isinstance(t, common_pb2.ToolDefinition):
            out.append(t)
        else:
            d = dict(t)
            d["parameters"] = to_struct(d.get("parameters"))
            out.append(common_pb2.ToolDefinition(**d))
    return out


_SCOPES = {"conversation", "actor", "subject", "runner", "binding", "workspace"}
_AREAS = {"plugin", "workspace", "binding"}


def _scope(scope: str | int) -> common_pb2.StateScope.ValueType:
    if isinstance(scope, str):
        if scope not in _SCOPES:
            raise ValueError(f"unknown state scope {scope!r}")
        return common_pb2.StateScope.Value("STATE_SCOPE_" + scope.upper())
    return common_pb2.StateScope.ValueType(scope)


def _area(area: str | int) -> P.StorageAreaName.ValueType:
    if isinstance(area, str):
        if area not in _AREAS:
            raise ValueError(f"unknown storage area {area!r}")
        return P.StorageAreaName.Value("STORAGE_AREA_NAME_" + area.upper())
    return P.StorageAreaName.ValueType(area)


class HostApi:
    """Client of the host's ProxyService bound to one run. Methods return the contract's responses."""

    def __init__(
        self,
        endpoint: str,
        *,
        run_id: str,
        run_token: str,
        trace_id: str = "",
        remaining: Callable[[], float | None] = lambda: None,
        resources: context_pb2.Resources | None = None,
        available_apis: context_pb2.ContextApis | None = None,
        precheck: bool = True,
    ) -> None:
        self.endpoint = endpoint
        self.run_id = run_id
        self._token = run_token
        self._trace_id = trace_id
        self._remaining = remaining
        self._resources = resources or context_pb2.Resources()
        self._apis = available_apis or context_pb2.ContextApis()
        self._precheck = precheck
        self._stub: proxy_service_pb2_grpc.ProxyServiceAsyncStub | None = None

    @property
    def run_token(self) -> str:
        """The run token (a secret: for redacting it from harness output, never for logging)."""
        return self._token

    @property
    def available(self) -> bool:
        """Whether the host gave this run an API endpoint at all."""
        return bool(self.endpoint)

    @property
    def stub(self) -> proxy_service_pb2_grpc.ProxyServiceAsyncStub:
        """The ProxyService stub over the shared channel to `endpoint`, made on first use; raises
        `UnauthorizedError` when the host gave this run no endpoint (a run without host APIs)."""
        if not self.endpoint:
            raise UnauthorizedError("the host gave this run no API endpoint")
        if self._stub is None:
            self._stub = proxy_service_pb2_grpc.ProxyServiceStub(host_channel(self.endpoint))
        return self._stub

    def metadata(self, span: trace.Span | None = None) -> list[tuple[str, str]]:
        """Metadata sent on every call: run token, run id and a `traceparent`: the call's span when
        spans are recorded (a tracer provider is installed), else a fresh span id in the run's trace."""
        md = [(RUN_TOKEN_HEADER, self._token), (RUN_ID_HEADER, self.run_id)]
        if span is not None and span.is_recording():
            carrier: dict[str, str] = {}
            _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
            md.extend(carrier.items())
            return md
        tp = traceparent(self._trace_id)
        if tp:
            md.append(("traceparent", tp))
        return md

    def _span(self, method: str) -> trace.Span:
        """The client span of one proxy call, child of the current span (the run's, in its task); in
        the run's trace whatever the caller's context (code outside the run's task, a test)."""
        parent = None
        run_trace = _trace_int(self._trace_id)
        current = trace.get_current_span().get_span_context()
        if run_trace and current.trace_id != run_trace:
            remote = trace.SpanContext(
                run_trace, secrets.randbits(64) or 1, True, trace.TraceFlags(trace.TraceFlags.SAMPLED)
            )
            parent = trace.set_span_in_context(trace.NonRecordingSpan(remote))
        return _tracer.start_span(
            f"agentrunner.proxy/{method}",
            context=parent,
            kind=trace.SpanKind.CLIENT,
            attributes={
                "rpc.system": "grpc",
                "rpc.service": "agentrunner.v1.ProxyService",
                "rpc.method": method,
            },
        )

    def timeout(self, method: str, override: float | None = None) -> float:
        """min(per-call default, remaining deadline); raises locally when the deadline has passed."""
        value = override if override is not None else DEFAULT_TIMEOUTS.get(method, _DEFAULT_TIMEOUT)
        remaining = self._remaining()
        if remaining is not None:
            if remaining <= 0:
                raise DeadlineExceededError(f"run deadline passed before {method}")
            value = min(value, remaining)
        return value

    # -- pre-checks ---------------------------------------------------------------------------

    def _need_api(self, flag: str, method: str) -> None:
        if self._precheck and not getattr(self._apis, flag):
            raise UnauthorizedError(f"{method} is not available to this run ({flag} not granted)")

    def _need_resource(self, kind: str, key: str, ident: str, op: str, method: str) -> None:
        if not self._precheck:
            return
        for res in getattr(self._resources, kind):
            if getattr(res, key) == ident:
                if res.operations and op not in res.operations:
                    raise UnauthorizedError(f"{method}: operation {op!r} is not granted on {ident!r}")
                return
        raise UnauthorizedError(f"{method}: {ident!r} is not among this run's {kind}")

    def _need_platform_action(self, action: str, method: str) -> None:
        if self._precheck and action not in self._resources.platform_actions:
            raise UnauthorizedError(f"{method}: platform action {action!r} is not granted to this run")

    def _need_storage(self, area: P.StorageAreaName.ValueType, method: str) -> None:
        self._need_api("storage", method)
        if not self._precheck:
            return
        name = P.StorageAreaName.Name(area).removeprefix("STORAGE_AREA_NAME_").lower()
        if not getattr(self._resources.storage, f"{name}_storage", False):
            raise UnauthorizedError(f"{method}: {name} storage is not granted to this run")

    # -- transport ----------------------------------------------------------------------------

    async def call(self, method: str, request: pb_message.Message, *, timeout: float | None = None) -> Any:
        """Calls one unary ProxyService method by name (no pre-check); the typed methods below are the
        usual way (their responses are typed)."""
        return await self._unary(method, getattr(self.stub, method), request, timeout)

    async def _unary(
        self,
        method: str,
        rpc: grpc.aio.UnaryUnaryMultiCallable[RequestT, ResponseT],
        request: RequestT,
        timeout: float | None,
    ) -> ResponseT:
        call_timeout = self.timeout(method, timeout)
        span = self._span(method)
        try:
            return await rpc(request, timeout=call_timeout, metadata=self.metadata(span))
        except grpc.RpcError as exc:
            _failed(span, exc)
            raise from_rpc_error(exc) from None
        finally:
            span.end()

    async def stream(
        self, method: str, request: pb_message.Message, *, timeout: float | None = None
    ) -> AsyncGenerator[Any, None]:
        """Calls one server-streaming ProxyService method by name; closing the iterator cancels the call."""
        rpc = getattr(self.stub, method)
        async with contextlib.aclosing(self._server_stream(method, rpc, request, timeout)) as items:
            async for item in items:
                yield item

    async def _server_stream(
        self,
        method: str,
        rpc: grpc.aio.UnaryStreamMultiCallable[RequestT, ResponseT],
        request: RequestT,
        timeout: float | None,
    ) -> AsyncGenerator[ResponseT, None]:
        call_timeout = self.timeout(method, timeout)
        span = self._span(method)
        call = rpc(request, timeout=call_timeout, metadata=self.metadata(span))
        try:
            async for item in call:
                yield item
        except grpc.RpcError as exc:
            _failed(span, exc)
            raise from_rpc_error(exc) from None
        finally:
            call.cancel()
            span.end()

    # -- models -------------------------------------------------------------------------------

    async def invoke_model(
        self,
        model_id: str,
        messages: Sequence[common_pb2.ModelMessage | Mapping[str, Any]],
        *,
        tools: Sequence[common_pb2.ToolDefinition | Mapping[str, Any]] = (),
        extra_args: Mapping[str, Any] | None = None,
        remove_think: bool = False,
        timeout: float | None = None,
    ) -> P.InvokeModelResponse:
        """One model completion through the host (`InvokeModel`): the host holds the provider credentials, so the
        runner never sees an API key. Messages and tools may be protos or plain dicts in the proto's JSON shape."""
        self._need_resource("models", "model_id", model_id, "invoke", "InvokeModel")
        req = P.InvokeModelRequest(
            model_id=model_id,
            messages=_messages(messages),
            tools=_tools(tools),
            extra_args=to_struct(extra_args),
            remove_think=remove_think,
        )
        return await self._unary("InvokeModel", self.stub.InvokeModel, req, timeout)

    async def stream_model(
        self,
        model_id: str,
        messages: Sequence[common_pb2.ModelMessage | Mapping[str, Any]],
        *,
        tools: Sequence[common_pb2.ToolDefinition | Mapping[str, Any]] = (),
        extra_args: Mapping[str, Any] | None = None,
        remove_think: bool = False,
        timeout: float | None = None,
    ) -> AsyncGenerator[P.StreamModelResponse, None]:
        """The streaming form of `invoke_model` (`StreamModel`): yields the host's chunks as the model produces
        them, for runners that forward deltas to the user."""
        self._need_resource("models", "model_id", model_id, "stream", "StreamModel")
        req = P.StreamModelRequest(
            model_id=model_id,
            messages=_messages(messages),
            tools=_tools(tools),
            extra_args=to_struct(extra_args),
            remove_think=remove_think,
        )
        async for item in self._server_stream("StreamModel", self.stub.StreamModel, req, timeout):
            yield item

    async def rerank_documents(
        self,
        model_id: str,
        query: str,
        documents: Sequence[str],
        *,
        top_k: int = 0,
        timeout: float | None = None,
    ) -> P.RerankDocumentsResponse:
        """Orders `documents` by relevance to `query` with a rerank model the run was granted (`top_k` 0: all)."""
        self._need_resource("models", "model_id", model_id, "rerank", "RerankDocuments")
        req = P.RerankDocumentsRequest(model_id=model_id, query=query, documents=list(documents), top_k=top_k)
        return await self._unary("RerankDocuments", self.stub.RerankDocuments, req, timeout)

    async def count_tokens(
        self,
        model_id: str,
        messages: Sequence[common_pb2.ModelMessage | Mapping[str, Any]],
        *,
        tools: Sequence[common_pb2.ToolDefinition | Mapping[str, Any]] = (),
        timeout: float | None = None,
    ) -> P.CountTokensResponse:
        """How many tokens `messages` (and `tools`) take for `model_id`, counted by the host for that model, so a runner can trim its context before a call rather than after a refusal."""
        self._need_resource("models", "model_id", model_id, "count_tokens", "CountTokens")
        req = P.CountTokensRequest(model_id=model_id, messages=_messages(messages), tools=_tools(tools))
        return await self._unary("CountTokens", self.stub.CountTokens, req, timeout)

    # -- tools --------------------------------------------------------------------------------

    async def get_tool_detail(
        self, tool_name: str, *, timeout: float | None = None
    ) -> P.GetToolDetailResponse:
        """A tool's description and JSON schema as the host knows it (for building a model's tool list)."""
        self._need_resource("tools", "tool_name", tool_name, "detail", "GetToolDetail")
        return await self._unary(
            "GetToolDetail", self.stub.GetToolDetail, P.GetToolDetailRequest(tool_name=tool_name), timeout
        )

    async def call_tool(
        self,
        tool_name: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        tool_call_id: str = "",
        timeout: float | None = None,
    ) -> P.CallToolResponse:
        """Runs a tool the run was granted, on the host's side (`CallTool`); `tool_call_id` ties the call to the
        model's tool call so transcripts can pair them."""
        self._need_resource("tools", "tool_name", tool_name, "call", "CallTool")
        req = P.CallToolRequest(
            tool_name=tool_name, parameters=to_struct(parameters), tool_call_id=tool_call_id
        )
        return await self._unary("CallTool", self.stub.CallTool, req, timeout)

    # -- knowledge ----------------------------------------------------------------------------

    async def list_knowledge_bases(self, *, timeout: float | None = None) -> P.ListKnowledgeBasesResponse:
        """The knowledge bases this run may query (ids, names, descriptions)."""
        return await self._unary(
            "ListKnowledgeBases", self.stub.ListKnowledgeBases, P.ListKnowledgeBasesRequest(), timeout
        )

    async def retrieve_knowledge(
        self,
        kb_id: str,
        query_text: str,
        *,
        top_k: int = 0,
        filters: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> P.RetrieveKnowledgeResponse:
        """Retrieves chunks from a knowledge base for `query_text` (`top_k` 0: the host's default); `filters` are
        passed through to the knowledge base as JSON."""
        self._need_resource("knowledge_bases", "kb_id", kb_id, "retrieve", "RetrieveKnowledge")
        req = P.RetrieveKnowledgeRequest(
            kb_id=kb_id, query_text=query_text, top_k=top_k, filters=to_struct(filters)
        )
        return await self._unary("RetrieveKnowledge", self.stub.RetrieveKnowledge, req, timeout)

    # -- prompt, history, events --------------------------------------------------------------

    async def get_prompt(self, *, timeout: float | None = None) -> P.GetPromptResponse:
        """The bot's configured prompt (system messages) for this run, when the host grants `prompt_get`."""
        self._need_api("prompt_get", "GetPrompt")
        return await self._unary("GetPrompt", self.stub.GetPrompt, P.GetPromptRequest(), timeout)

    async def list_history(
        self,
        *,
        conversation_id: str = "",
        before_cursor: str = "",
        after_cursor: str = "",
        limit: int = 0,
        direction: P.PageDirection.ValueType = P.PAGE_DIRECTION_UNSPECIFIED,
        include_artifacts: bool = False,
        timeout: float | None = None,
    ) -> P.ListHistoryResponse:
        """One page of the conversation's history (this run's conversation unless `conversation_id` is given),
        paged by the cursors of the previous page; needs `history_page`."""
        self._need_api("history_page", "ListHistory")
        req = P.ListHistoryRequest(
            conversation_id=conversation_id,
            before_cursor=before_cursor,
            after_cursor=after_cursor,
            limit=limit,
            direction=direction,
            include_artifacts=include_artifacts,
        )
        return await self._unary("ListHistory", self.stub.ListHistory, req, timeout)

    async def search_history(
        self,
        query: str,
        *,
        conversation_id: str = "",
        roles: Sequence[str] = (),
        top_k: int = 0,
        timeout: float | None = None,
    ) -> P.SearchHistoryResponse:
        """Searches the conversation's history for `query` (optionally only some roles); needs `history_search`."""
        self._need_api("history_search", "SearchHistory")
        req = P.SearchHistoryRequest(
            query=query, conversation_id=conversation_id, roles=list(roles), top_k=top_k
        )
        return await self._unary("SearchHistory", self.stub.SearchHistory, req, timeout)

    async def get_event(self, event_id: str, *, timeout: float | None = None) -> P.GetEventResponse:
        """One platform event by id (the message or action that started a run, or an earlier one)."""
        self._need_api("event_get", "GetEvent")
        return await self._unary(
            "GetEvent", self.stub.GetEvent, P.GetEventRequest(event_id=event_id), timeout
        )

    async def list_events(
        self,
        *,
        conversation_id: str = "",
        event_types: Sequence[str] = (),
        before_cursor: str = "",
        limit: int = 0,
        timeout: float | None = None,
    ) -> P.ListEventsResponse:
        """A page of the conversation's platform events, optionally of some types only; needs `event_page`."""
        self._need_api("event_page", "ListEvents")
        req = P.ListEventsRequest(
            conversation_id=conversation_id,
            event_types=list(event_types),
            before_cursor=before_cursor,
            limit=limit,
        )
        return await self._unary("ListEvents", self.stub.ListEvents, req, timeout)

    # -- artifacts ----------------------------------------------------------------------------

    async def get_artifact_metadata(
        self, artifact_id: str, *, timeout: float | None = None
    ) -> P.GetArtifactMetadataResponse:
        """An artifact's name, MIME type, size and digest without its body (to decide whether to read it)."""
        self._need_api("artifact_metadata", "GetArtifactMetadata")
        req = P.GetArtifactMetadataRequest(artifact_id=artifact_id)
        return await self._unary("GetArtifactMetadata", self.stub.GetArtifactMetadata, req, timeout)

    async def read_artifact(
        self, artifact_id: str, *, offset: int = 0, length: int = 0, timeout: float | None = None
    ) -> P.ReadArtifactResponse:
        """A byte range of an artifact's body in one call (`length` 0: up to the host's per-call limit); use
        `download_artifact` for the whole body."""
        self._need_api("artifact_read", "ReadArtifact")
        req = P.ReadArtifactRequest(artifact_id=artifact_id, offset=offset, length=length)
        return await self._unary("ReadArtifact", self.stub.ReadArtifact, req, timeout)

    async def download_artifact(self, artifact_id: str, *, timeout: float | None = None) -> bytes:
        """The whole body of an artifact (streamed in chunks by the host)."""
        self._need_api("artifact_read", "DownloadArtifact")
        chunks = [
            c.data
            async for c in self._server_stream(
                "DownloadArtifact",
                self.stub.DownloadArtifact,
                P.DownloadArtifactRequest(artifact_id=artifact_id),
                timeout,
            )
        ]
        return b"".join(chunks)

    async def upload_artifact(
        self,
        source: bytes | str | os.PathLike[str] | BinaryIO,
        *,
        name: str,
        mime_type: str = "",
        summary: str = "",
        metadata: Mapping[str, Any] | None = None,
        chunk_size: int = UPLOAD_CHUNK_BYTES,
        timeout: float | None = None,
    ) -> common_pb2.ArtifactRef:
        """Uploads a file (bytes, a path, or an open binary file read from its current position) as an
        artifact of this run, in chunks (`UploadArtifact`); returns its reference.

        Size and sha256 are computed first and sent in the header, so the host refuses an oversized
        body before it is sent and a corrupted one after it arrived.
        """
        self._need_api("artifact_write", "UploadArtifact")
        if not 0 < chunk_size <= UPLOAD_CHUNK_BYTES:
            raise ValueError(f"chunk_size must be in 1..{UPLOAD_CHUNK_BYTES}")
        with _upload_source(source) as fh:
            start = fh.tell()
            digest = hashlib.sha256()
            size = 0
            while piece := await asyncio.to_thread(fh.read, 1 << 20):
                digest.update(piece)
                size += len(piece)
            fh.seek(start)
            header = P.UploadArtifactHeader(
                name=name, mime_type=mime_type, size_bytes=size, sha256=digest.hexdigest(), summary=summary
            )
            if metadata:
                header.metadata.CopyFrom(to_struct(metadata))

            async def requests() -> AsyncIterator[P.UploadArtifactRequest]:
                yield P.UploadArtifactRequest(header=header)
                while chunk := await asyncio.to_thread(fh.read, chunk_size):
                    yield P.UploadArtifactRequest(chunk=chunk)

            call_timeout = self.timeout("UploadArtifact", timeout)
            try:
                response = await self.stub.UploadArtifact(
                    requests(), timeout=call_timeout, metadata=self.metadata()
                )
            except grpc.RpcError as exc:
                if lost_refusal(exc):  # (the host refused while a chunk was in flight: agentrunner.refusal)
                    raise await recover_refusal("UploadArtifact", self.stub, self.metadata()) from None
                raise from_rpc_error(exc) from None
        return response.artifact

    # -- state --------------------------------------------------------------------------------

    async def get_state(self, scope: str | int, key: str, *, timeout: float | None = None) -> Any:
        """The JSON value of a state key, or None when it does not exist."""
        self._need_api("state", "GetState")
        resp = await self._unary(
            "GetState", self.stub.GetState, P.GetStateRequest(scope=_scope(scope), key=key), timeout
        )
        if not resp.found:
            return None
        return json_format.MessageToDict(resp.value)

    async def set_state(
        self, scope: str | int, key: str, value: Any, *, timeout: float | None = None
    ) -> None:
        """Stores a JSON value under `key` in a state scope (by name, e.g. "conversation", or enum number);
        state outlives the run, which is what it is for."""
        self._need_api("state", "SetState")
        req = P.SetStateRequest(scope=_scope(scope), key=key, value=to_value(value))
        await self._unary("SetState", self.stub.SetState, req, timeout)

    async def delete_state(self, scope: str | int, key: str, *, timeout: float | None = None) -> bool:
        """Removes a state key; True when it existed."""
        self._need_api("state", "DeleteState")
        resp = await self._unary(
            "DeleteState", self.stub.DeleteState, P.DeleteStateRequest(scope=_scope(scope), key=key), timeout
        )
        return bool(resp.deleted)

    async def list_state(
        self, scope: str | int, *, prefix: str = "", limit: int = 0, timeout: float | None = None
    ) -> P.ListStateResponse:
        """State keys (and values) in a scope, optionally under a prefix, one page at a time."""
        self._need_api("state", "ListState")
        req = P.ListStateRequest(scope=_scope(scope), prefix=prefix, limit=limit)
        return await self._unary("ListState", self.stub.ListState, req, timeout)

    # -- storage ------------------------------------------------------------------------------

    async def get_storage(self, area: str | int, key: str, *, timeout: float | None = None) -> bytes | None:
        """The bytes stored under `key`, or None when absent."""
        a = _area(area)
        self._need_storage(a, "GetStorage")
        resp = await self._unary(
            "GetStorage", self.stub.GetStorage, P.GetStorageRequest(area=a, key=key), timeout
        )
        return bytes(resp.value) if resp.found else None

    async def set_storage(
        self, area: str | int, key: str, value: bytes, *, timeout: float | None = None
    ) -> None:
        """Stores bytes under `key` in a storage area the run was granted (e.g. "plugin", "workspace")."""
        a = _area(area)
        self._need_storage(a, "SetStorage")
        await self._unary(
            "SetStorage", self.stub.SetStorage, P.SetStorageRequest(area=a, key=key, value=value), timeout
        )

    async def delete_storage(self, area: str | int, key: str, *, timeout: float | None = None) -> bool:
        """Removes a storage key; True when it existed."""
        a = _area(area)
        self._need_storage(a, "DeleteStorage")
        resp = await self._unary(
            "DeleteStorage", self.stub.DeleteStorage, P.DeleteStorageRequest(area=a, key=key), timeout
        )
        return bool(resp.deleted)

    async def list_storage(
        self, area: str | int, *, prefix: str = "", limit: int = 0, timeout: float | None = None
    ) -> P.ListStorageResponse:
        """Storage keys in an area, optionally under a prefix, one page at a time."""
        a = _area(area)
        self._need_storage(a, "ListStorage")
        req = P.ListStorageRequest(area=a, prefix=prefix, limit=limit)
        return await self._unary("ListStorage", self.stub.ListStorage, req, timeout)

    # -- steering, platform, run records ------------------------------------------------------

    async def pull_steering(self, *, limit: int = 0, timeout: float | None = None) -> P.PullSteeringResponse:
        """Takes the steering messages queued for this run since the last pull (at most `limit`, 0: all); the
        polling alternative to the control stream for runners that do not hold it open."""
        self._need_api("steering_pull", "PullSteering")
        return await self._unary(
            "PullSteering", self.stub.PullSteering, P.PullSteeringRequest(limit=limit), timeout
        )

    async def request_platform_action(
        self,
        action: str,
        *,
        target: Mapping[str, Any] | None = None,
        payload: Mapping[str, Any] | None = None,
        idempotency_key: str = "",
        bot_id: str = "",
        timeout: float | None = None,
    ) -> P.RequestPlatformActionResponse:
        """Asks the platform to perform an action the run was granted (e.g. a reaction, a mention);
        `idempotency_key` lets a retry not act twice."""
        self._need_platform_action(action, "RequestPlatformAction")
        req = P.RequestPlatformActionRequest(
            action=action,
            target=to_struct(target),
            payload=to_struct(payload),
            idempotency_key=idempotency_key,
            bot_id=bot_id,
        )
        return await self._unary("RequestPlatformAction", self.stub.RequestPlatformAction, req, timeout)

    async def send_reply(
        self,
        reply_id: str,
        mode: common_pb2.ReplyMode.ValueType,
        message: common_pb2.AssistantMessage | None = None,
        *,
        quote_origin: bool = False,
        timeout: float | None = None,
    ) -> P.SendReplyResponse:
        """One `SendReply` call; `ctx.reply` / `ctx.reply_stream` are the friendly forms."""
        self._need_api("reply", "SendReply")
        req = P.SendReplyRequest(reply_id=reply_id, mode=mode, message=message, quote_origin=quote_origin)
        return await self._unary("SendReply", self.stub.SendReply, req, timeout)

    async def send_message(
        self,
        target_type: str,
        target_id: str,
        message: common_pb2.AssistantMessage,
        *,
        bot_id: str = "",
        idempotency_key: str = "",
        timeout: float | None = None,
    ) -> P.SendMessageResponse:
        """Sends a message to another chat target (not a reply to this run's message); needs the
        `send_message` platform action. `idempotency_key` lets a retry not send twice."""
        self._need_platform_action("send_message", "SendMessage")
        req = P.SendMessageRequest(
            bot_id=bot_id,
            target_type=target_type,
            target_id=target_id,
            message=message,
            idempotency_key=idempotency_key,
        )
        return await self._unary("SendMessage", self.stub.SendMessage, req, timeout)

    async def get_run_record(
        self, run_id: str = "", *, timeout: float | None = None
    ) -> P.GetRunRecordResponse:
        """A run's stored record (status, timestamps, failure); this run's own when `run_id` is empty."""
        self._need_api("run_get", "GetRunRecord")
        return await self._unary(
            "GetRunRecord", self.stub.GetRunRecord, P.GetRunRecordRequest(run_id=run_id), timeout
        )

    async def list_run_records(
        self,
        *,
        conversation_id: str = "",
        statuses: Sequence[common_pb2.RunStatus.ValueType] = (),
        before_cursor: str = "",
        limit: int = 0,
        timeout: float | None = None,
    ) -> P.ListRunRecordsResponse:
        """A page of run records, optionally filtered by conversation and status; needs `run_list`."""
        self._need_api("run_list", "ListRunRecords")
        req = P.ListRunRecordsRequest(
            conversation_id=conversation_id, statuses=list(statuses), before_cursor=before_cursor, limit=limit
        )
        return await self._unary("ListRunRecords", self.stub.ListRunRecords, req, timeout)

    async def list_run_record_events(
        self, run_id: str = "", *, after_sequence: int = 0, limit: int = 0, timeout: float | None = None
    ) -> P.ListRunRecordEventsResponse:
        """A run's stored result events after `after_sequence`, for replaying what a run produced."""
        self._need_api("run_events_page", "ListRunRecordEvents")
        req = P.ListRunRecordEventsRequest(run_id=run_id, after_sequence=after_sequence, limit=limit)
        return await self._unary("ListRunRecordEvents", self.stub.ListRunRecordEvents, req, timeout)

    async def cancel_run_record(
        self, run_id: str = "", *, reason: str = "", timeout: float | None = None
    ) -> P.CancelRunRecordResponse:
        """Asks the host to cancel a run (this one when `run_id` is empty); the run ends as CANCELLED."""
        self._need_api("run_cancel", "CancelRunRecord")
        req = P.CancelRunRecordRequest(run_id=run_id, reason=reason)
        return await self._unary("CancelRunRecord", self.stub.CancelRunRecord, req, timeout)

    async def append_run_result(
        self, result: result_pb2.RunResult, *, run_id: str = "", timeout: float | None = None
    ) -> P.AppendRunResultResponse:
        """Appends a result to a run record the runner manages itself (a run recorded outside the host's
        own dispatch, e.g. an externally started job); needs `run_append_result`."""
        self._need_api("run_append_result", "AppendRunResult")
        req = P.AppendRunResultRequest(run_id=run_id, result=result)
        return await self._unary("AppendRunResult", self.stub.AppendRunResult, req, timeout)

    async def finalize_run_record(
        self,
        status: common_pb2.RunStatus.ValueType,
        *,
        run_id: str = "",
        reason: str = "",
        timeout: float | None = None,
    ) -> P.FinalizeRunRecordResponse:
        """Closes a self-managed run record with a terminal status; later appends are refused."""
        self._need_api("run_finalize", "FinalizeRunRecord")
        req = P.FinalizeRunRecordRequest(run_id=run_id, status=status, reason=reason)
        return await self._unary("FinalizeRunRecord", self.stub.FinalizeRunRecord, req, timeout)


def tool_text(response: P.CallToolResponse) -> str:
    """The text of a tool result: its text contents joined, else the structured result as JSON."""
    texts = [c.text for c in response.contents if c.WhichOneof("kind") == "text"]
    if texts:
        return "\n".join(texts)
    if response.HasField("structured"):
        return json.dumps(json_format.MessageToDict(response.structured), sort_keys=True)
    return ""
