"""The gRPC ProxyService: authentication, deadline clipping, audit and error mapping in one place.

Every method of the contract is served. A call is authenticated by its run token
(`x-agentrunner-run-token`), bound to the session's frozen snapshot, clipped to the run deadline, then
dispatched by method name to the handler table (capability and fact-store families register there).
Unregistered methods answer NOT_IMPLEMENTED. `Control` is the per-run control stream; `UploadArtifact`
is client-streaming (authenticated before its first message is read).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc
import structlog
from google.protobuf import message_factory
from google.protobuf.message import Message
from opentelemetry import trace

from agentrunner.errors import (
    AgentRunnerError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotImplementedFeatureError,
    RuntimeFailureError,
    RunTokenInvalidError,
    abort_with,
)
from agentrunner.protocol import RUN_ID_HEADER, RUN_TOKEN_HEADER
from agentrunner.v1 import proxy_service_pb2
from agentrunner_host.observability.telemetry import (
    PROXY_CALL_DURATION,
    PROXY_CALLS,
    end_span,
    start_server_span,
)
from agentrunner_host.ports import RunSession, SessionRegistry
from agentrunner_host.proxy.api import AuditSink, HandlerTable, ProxyCall
from agentrunner_host.proxy.control import ControlHub
from agentrunner_host.wire.boundary import Refused, request_deserializer

log = structlog.get_logger("agentrunner_host.proxy")

SERVICE_NAME = "agentrunner.v1.ProxyService"
_SERVICE = proxy_service_pb2.DESCRIPTOR.services_by_name["ProxyService"]
#: a proxy call's context (requests and responses are the methods' messages: dispatch is by name)
_Context = grpc.aio.ServicerContext[Message, Message]


def _loop_deadline(call: ProxyCall) -> float:
    """The call's deadline (`ProxyCall.deadline`, always set by `_begin`) on the event loop's clock."""
    remaining = call.time_remaining()
    return asyncio.get_running_loop().time() + (remaining if remaining is not None else 24 * 3600.0)


def _metadata(context: _Context) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        out[key] = value if isinstance(value, str) else value.decode(errors="replace")
    return out


class ProxyServicer:
    def __init__(
        self,
        sessions: SessionRegistry,
        audit: AuditSink,
        hub: ControlHub,
        handlers: HandlerTable | None = None,
        heartbeat_interval: float = 10.0,
        refuses: Callable[[str], bool] | None = None,
    ) -> None:
        self.sessions = sessions
        self.audit = audit
        self.hub = hub
        self.handlers: dict[str, Any] = dict(handlers or {})
        self.heartbeat_interval = heartbeat_interval
        #: run id -> whether its token is dead although the database does not say so yet (a run this
        #: host ended while the database was away: `RunService.refuses`)
        self.refuses = refuses

    def register(self, handlers: HandlerTable) -> None:
        """Plugs a family's handlers in by method name (later registrations win)."""
        self.handlers.update(handlers)

    # -- authentication --------------------------------------------------------------------------------
    async def authenticate(
        self, metadata: Mapping[str, str], token: str = "", run_id: str = ""
    ) -> RunSession:
        token = token or metadata.get(RUN_TOKEN_HEADER, "")
        if not token:
            raise RunTokenInvalidError("the run token is missing", metadata={"header": RUN_TOKEN_HEADER})
        session = await self.sessions.lookup(token)
        if session is None or (self.refuses is not None and self.refuses(session.run_id)):
            raise RunTokenInvalidError("the run token is unknown, expired or revoked")
        claimed = run_id or metadata.get(RUN_ID_HEADER, "")
        if claimed and claimed != session.run_id:
            raise RunTokenInvalidError("the run token belongs to another run", metadata={"runId": claimed})
        return session

    @staticmethod
    def _deadline(session: RunSession, context: _Context) -> float:
        """min(gRPC deadline, run deadline) as a monotonic time."""
        now = time.monotonic()
        deadline = now + 24 * 3600.0
        remaining = context.time_remaining()
        if remaining is not None:
            deadline = min(deadline, now + remaining)
        if session.snapshot.deadline_at is not None:
            from agentrunner_host.ports import utcnow

            deadline = min(deadline, now + (session.snapshot.deadline_at - utcnow()).total_seconds())
        return deadline

    # -- dispatch --------------------------------------------------------------------------------------
    async def _begin(self, method: str, context: _Context) -> ProxyCall:
        metadata = _metadata(context)
        try:
            session = await self.authenticate(metadata)
        except AgentRunnerError as err:
            await self._audit_failure(method, metadata.get(RUN_ID_HEADER, ""), "", "", err)
            raise
        call = ProxyCall(session=session, method=method, traceparent=metadata.get("traceparent", ""))
        call.deadline = self._deadline(session, context)
        return call

    async def _audit_failure(
        self, method: str, run_id: str, runner_id: str, resource: str, err: AgentRunnerError
    ) -> None:
        PROXY_CALLS.labels(method, err.status_code.name, err.reason).inc()
        await self.audit.record_proxy_call(
            run_id=run_id,
            runner_id=runner_id,
            method=method,
            resource=resource,
            outcome=err.reason,
            detail={"code": err.status_code.name, "message": err.message},
        )

    async def _finish(self, call: ProxyCall, outcome: str, err: AgentRunnerError | None = None) -> None:
        code = err.status_code.name if err is not None else "OK"
        PROXY_CALLS.labels(call.method, code, err.reason if err is not None else "").inc()
        PROXY_CALL_DURATION.labels(call.method, code).observe(time.perf_counter() - call.started)
        detail = {k: v for k, v in call.audit.items() if k != "resource"}
        if err is not None:
            detail.update(code=err.status_code.name, message=err.message)
        await self.audit.record_proxy_call(
            run_id=call.run_id,
            runner_id=call.session.runner_id,
            method=call.method,
            resource=str(call.audit.get("resource", "")),
            outcome=outcome,
            detail=detail,
        )

    def _handler(self, method: str) -> Any:
        handler = self.handlers.get(method)
        if handler is None:
            raise NotImplementedFeatureError(
                f"{method} is not available on this host", metadata={"method": method}
            )
        return handler

    @staticmethod
    def _internal(method: str, exc: BaseException) -> AgentRunnerError:
        log.error("proxy.handler_error", method=method, error=type(exc).__name__, exc_info=exc)
        return RuntimeFailureError(f"{method} failed inside the host")

    async def unary(self, method: str, request: Any, context: _Context) -> Any:
        """A unary call, or a client-streaming one (`request` is then the async iterator of its messages,
        read by the handler after the call was authenticated)."""
        try:
            call = await self._begin(method, context)
        except AgentRunnerError as refused:
            await abort_with(context, refused)
        span = self._span(call, context)
        err: AgentRunnerError | None = None
        try:
            if type(request) is Refused:
                raise request.error
            handler = self._handler(method)
            try:
                with trace.use_span(span):  # model and tool calls are its children
                    async with asyncio.timeout_at(_loop_deadline(call)):
                        response = await handler(call, request)
            except TimeoutError:
                raise DeadlineExceededError(
                    f"{method} ran past the run deadline", metadata={"runId": call.run_id}
                ) from None
            await self._finish(call, "OK")
            return response
        except AgentRunnerError as e:
            err = e
        except Exception as exc:
            err = self._internal(method, exc)
        finally:
            end_span(span, err)
        await self._finish(call, err.reason, err)
        await abort_with(context, err)

    @staticmethod
    def _span(call: ProxyCall, context: _Context) -> trace.Span:
        span = start_server_span(f"agentrunner.proxy/{call.method}", context.invocation_metadata())
        if span.is_recording():
            span.set_attributes(
                {
                    "rpc.system": "grpc",
                    "rpc.service": SERVICE_NAME,
                    "rpc.method": call.method,
                    "agentrunner.run_id": call.run_id,
                }
            )
        return span

    async def stream(self, method: str, request: Any, context: _Context) -> None:
        try:
            call = await self._begin(method, context)
        except AgentRunnerError as refused:
            await abort_with(context, refused)
        span = self._span(call, context)
        err: AgentRunnerError | None = None
        try:
            if type(request) is Refused:
                raise request.error
            handler = self._handler(method)
            with trace.use_span(span):
                async with asyncio.timeout_at(_loop_deadline(call)):
                    gen = handler(call, request)
                    try:
                        async for item in gen:
                            await context.write(item)
                    finally:
                        await gen.aclose()
            end_span(span)
            await self._finish(call, "OK")
            return
        except TimeoutError:
            err = DeadlineExceededError(
                f"{method} ran past the run deadline", metadata={"runId": call.run_id}
            )
        except AgentRunnerError as e:
            err = e
        except Exception as exc:
            err = self._internal(method, exc)
        except BaseException:
            end_span(span)
            raise
        end_span(span, err)
        await self._finish(call, err.reason, err)
        await abort_with(context, err)

    # -- control stream --------------------------------------------------------------------------------
    async def control(self, request_iterator: Any, context: _Context) -> None:
        metadata = _metadata(context)
        try:
            try:
                first = await asyncio.wait_for(context.read(), timeout=10.0)
            except TimeoutError:
                raise InvalidArgumentError(
                    "the control stream must start with hello", field="hello"
                ) from None
            if isinstance(first, Refused):  # (typed as the request, but a refusal may arrive)
                raise first.error
            if not isinstance(first, proxy_service_pb2.ControlRequest) or not first.HasField("hello"):
                raise InvalidArgumentError("the control stream must start with hello", field="hello")
            hello = first.hello
            try:
                session = await self.authenticate(metadata, token=hello.run_token, run_id=hello.run_id)
            except AgentRunnerError as err:
                await self._audit_failure("Control", hello.run_id, "", "", err)
                raise
            channel = self.hub.get(session.run_id)
            if channel is None:  # another replica runs it (a fleet): its signals are forwarded here
                channel = await self.hub.attach_remote(session.run_id)
            elif not channel.remote:
                self.hub.here(session.run_id)
            if channel is None:
                raise FailedPreconditionError(
                    "the run is not open on this host", metadata={"runId": session.run_id}
                )
        except AgentRunnerError as err:
            await abort_with(context, err)
        call = ProxyCall(session=session, method="Control")
        call.audit["accepts"] = ",".join(hello.accepts)
        await self._finish(call, "OK")
        channel.connected = True
        welcome = proxy_service_pb2.ControlResponse()
        if session.snapshot.deadline_at is not None:
            welcome.welcome.deadline_at.FromDatetime(session.snapshot.deadline_at)
        welcome.welcome.heartbeat_interval.FromMilliseconds(int(self.heartbeat_interval * 1000))
        await context.write(welcome)
        reader = asyncio.create_task(self._control_reader(context, session.run_id))
        try:
            while True:
                getter = asyncio.ensure_future(channel.queue.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    break
                signal = getter.result()
                if signal is None:
                    break
                await context.write(signal)
        finally:
            reader.cancel()
            channel.connected = False
            self.hub.detach(channel)

    async def _control_reader(self, context: _Context, run_id: str) -> None:
        while True:
            message = await context.read()
            if not isinstance(message, proxy_service_pb2.ControlRequest):
                return  # EOF, or a message that does not decode (`Refused`): the run is not affected
            kind = message.WhichOneof("message")
            if kind == "ack":
                self.hub.record_ack(run_id, message.ack)
            elif kind == "heartbeat":
                self.hub.record_heartbeat(run_id, message.heartbeat.last_sequence)

    # -- gRPC wiring -----------------------------------------------------------------------------------
    def generic_handler(self) -> grpc.GenericRpcHandler:
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        for method in _SERVICE.methods:
            req_cls = message_factory.GetMessageClass(method.input_type)
            resp_cls = message_factory.GetMessageClass(method.output_type)
            kwargs: dict[str, Callable[..., Any]] = {
                "request_deserializer": request_deserializer(req_cls),
                "response_serializer": resp_cls.SerializeToString,
            }
            name = method.name
            if name == "Control":
                handlers[name] = grpc.stream_stream_rpc_method_handler(self.control, **kwargs)
            elif method.client_streaming:  # `UploadArtifact`: its "request" is the iterator of messages
                handlers[name] = grpc.stream_unary_rpc_method_handler(self._bind_unary(name), **kwargs)
            elif method.server_streaming:
                handlers[name] = grpc.unary_stream_rpc_method_handler(self._bind_stream(name), **kwargs)
            else:
                handlers[name] = grpc.unary_unary_rpc_method_handler(self._bind_unary(name), **kwargs)
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)

    def _bind_unary(self, name: str) -> Callable[..., Any]:
        async def handle(request: Any, context: _Context) -> Any:
            return await self.unary(name, request, context)

        return handle

    def _bind_stream(self, name: str) -> Callable[..., Any]:
        async def handle(request: Any, context: _Context) -> None:
            await self.stream(name, request, context)

        return handle


assert all(inspect.iscoroutinefunction(f) for f in (ProxyServicer.unary, ProxyServicer.stream))
