"""A deliberately misbehaving RunnerService for the host's fault tests, run as its own process.

It speaks raw bytes on `Run` so it can send what a real SDK never would (garbage, unknown payloads,
duplicated sequences, wrong run ids). Behaviour is chosen by the run's input text (first word).
Prints `AGENTRUNNER_LISTENING host:port` when ready. With FAKE_RUNNER_LOG set, appends one line per
noteworthy thing (`cancelled <run_id>`) so tests can observe the runner side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import grpc
from grpc_status import rpc_status

from agentrunner.v1 import (
    common_pb2,
    manifest_pb2,
    proxy_service_pb2,
    proxy_service_pb2_grpc,
    result_pb2,
    runner_service_pb2,
)

GOOD_ID = "plugin:test/fake/default"
BAD_ID = "plugin:test/fake/future"
TOKENS: dict[str, str] = {}  # run_id -> token, for the token-misuse tests
FINISHED: list[tuple[str, str]] = []  # (run_id, token) of finished runs


def log_event(line: str) -> None:
    path = os.environ.get("FAKE_RUNNER_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{time.time():.3f} {line}\n")


def manifests() -> list[manifest_pb2.RunnerManifest]:
    good = manifest_pb2.RunnerManifest(id=GOOD_ID, name="default", protocol_version="1")
    good.label.translations["en_US"] = "Fake"
    caps = good.capabilities
    caps.streaming = caps.event_context = caps.interrupt = caps.steering = caps.tool_calling = True
    p = good.permissions
    p.models.extend([manifest_pb2.MODEL_OPERATION_INVOKE, manifest_pb2.MODEL_OPERATION_STREAM])
    p.tools.extend([manifest_pb2.TOOL_OPERATION_DETAIL, manifest_pb2.TOOL_OPERATION_CALL])
    p.history.append(manifest_pb2.HISTORY_OPERATION_PAGE)
    p.state.extend([common_pb2.STATE_SCOPE_CONVERSATION, common_pb2.STATE_SCOPE_RUNNER])
    p.storage.append(manifest_pb2.STORAGE_AREA_PLUGIN)
    p.platform_api.append("message.edit")
    field = good.config_schema.add(name="model", type=manifest_pb2.CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR)
    field.label.translations["en_US"] = "Model"
    good.config_schema.add(
        name="greeting", type=manifest_pb2.CONFIG_FIELD_TYPE_STRING
    ).default_value.string_value = "hi"
    bad = manifest_pb2.RunnerManifest(id=BAD_ID, name="future", protocol_version="2")
    return [good, bad]


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def wrap(result: result_pb2.RunResult, extra: bytes = b"") -> bytes:
    body = result.SerializeToString() + extra
    return b"\x0a" + varint(len(body)) + body  # RunResponse.result (field 1)


def res(run_id: str, seq: int, **payload: object) -> result_pb2.RunResult:
    r = result_pb2.RunResult(run_id=run_id, sequence=seq, **payload)  # type: ignore[arg-type]
    r.timestamp.GetCurrentTime()
    return r


def delta(run_id: str, seq: int, text: str) -> bytes:
    return wrap(res(run_id, seq, message_delta=result_pb2.MessageDelta(text=text)))


def completed(run_id: str, seq: int, text: str) -> bytes:
    r = res(run_id, seq)
    r.message_completed.message.content = text
    return wrap(r)


def done(run_id: str, seq: int) -> bytes:
    return wrap(res(run_id, seq, run_completed=result_pb2.RunCompleted(finish_reason="stop")))


def describe_error(exc: grpc.aio.AioRpcError) -> dict[str, str]:
    status = rpc_status.from_call(cast(grpc.Call, exc))  # an aio error has the same accessors
    reason = ""
    if status is not None:
        from google.rpc import error_details_pb2

        for d in status.details:
            info = error_details_pb2.ErrorInfo()
            if d.Unpack(info):
                reason = info.reason
    return {"code": exc.code().name, "reason": reason}


async def proxy_call(endpoint: str, token: str, run_id_header: str | None, action: str) -> dict[str, str]:
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = proxy_service_pb2_grpc.ProxyServiceStub(channel)
        md = [("x-agentrunner-run-token", token)]
        if run_id_header:
            md.append(("x-agentrunner-run-id", run_id_header))
        try:
            await stub.RequestPlatformAction(
                proxy_service_pb2.RequestPlatformActionRequest(action=action), metadata=md, timeout=5
            )
            return {"code": "OK", "reason": ""}
        except grpc.aio.AioRpcError as exc:
            return describe_error(exc)


async def control_session(endpoint: str, run_id: str, token: str, out: asyncio.Queue[str]) -> None:
    """Says hello, reports welcome, acks every signal and reports it."""
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = proxy_service_pb2_grpc.ProxyServiceStub(channel)
        call = stub.Control(metadata=[("x-agentrunner-run-token", token)])
        hello = proxy_service_pb2.ControlRequest()
        hello.hello.run_id = run_id
        hello.hello.accepts.extend(["cancel", "steering"])
        await call.write(hello)
        try:
            while True:
                msg = await call.read()
                if not isinstance(msg, proxy_service_pb2.ControlResponse):  # EOF
                    await out.put("closed")
                    return
                kind = msg.WhichOneof("signal")
                if kind == "welcome":
                    await out.put(f"welcome:{msg.welcome.heartbeat_interval.ToMilliseconds()}")
                    hb = proxy_service_pb2.ControlRequest()
                    hb.heartbeat.last_sequence = 1
                    await call.write(hb)
                else:
                    ack = proxy_service_pb2.ControlRequest()
                    ack.ack.signal_id = msg.signal_id
                    ack.ack.accepted = True
                    await call.write(ack)
                    text = msg.steering.input.text if kind == "steering" else msg.cancel.reason
                    await out.put(f"{kind}:{text}")
        except grpc.aio.AioRpcError as exc:
            await out.put("error:" + json.dumps(describe_error(exc)))


@dataclasses.dataclass(frozen=True)
class Call:
    """One `Run` call: the request, its context and what its input text asked for."""

    request: runner_service_pb2.RunRequest
    context: grpc.aio.ServicerContext[Any, Any]
    mode: str
    arg: str

    @property
    def ctx(self) -> Any:
        return self.request.context

    @property
    def run_id(self) -> str:
        return self.request.context.run_id

    @property
    def endpoint(self) -> str:
        return self.request.host_api_endpoint


async def _echo(c: Call) -> AsyncIterator[bytes]:
    run_id, arg = c.run_id, c.arg
    yield delta(run_id, 1, "echo: ")
    yield delta(run_id, 2, arg)
    yield completed(run_id, 3, f"echo: {arg}")
    yield done(run_id, 4)


async def _context(c: Call) -> AsyncIterator[bytes]:
    run_id, endpoint, request, ctx = c.run_id, c.endpoint, c.request, c.ctx
    info = {
        "resources": [m.model_id for m in ctx.resources.models],
        "tools": [t.tool_name for t in ctx.resources.tools],
        "config": dict(ctx.config),
        "inline": ctx.context.inline_policy.mode,
        "history_page": ctx.context.available_apis.history_page,
        "state": ctx.context.available_apis.state,
        "deadline": ctx.runtime.deadline_at.seconds,
        "trace_id": ctx.runtime.trace_id,
        "protocol": ctx.runtime.protocol_version,
        "extra": dict(ctx.adapter.extra),
        "endpoint": endpoint,
        "token_len": len(request.run_token),
    }
    yield completed(run_id, 1, json.dumps(info))
    yield done(run_id, 2)


async def _garbage(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield delta(run_id, 1, "partial")
    yield b"\xff\xff\xff\xffnot a protobuf"
    await asyncio.sleep(5)


async def _oversize(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield completed(run_id, 1, "x" * (2 * 1024 * 1024))
    yield completed(run_id, 2, "small")
    yield done(run_id, 3)


async def _unknown(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    unknown_field = varint(99 << 3 | 2) + varint(5) + b"hello"
    yield wrap(res(run_id, 1), unknown_field)
    yield completed(run_id, 2, "after unknown")
    yield done(run_id, 3)


async def _wrong_run_id(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield completed("run_someone_else", 1, "injected")
    yield completed(run_id, 2, "mine")
    yield done(run_id, 3)


async def _dupseq(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield delta(run_id, 1, "a")
    yield delta(run_id, 1, "a")
    yield delta(run_id, 2, "b")
    yield delta(run_id, 4, "c")  # a gap: logged, kept
    yield done(run_id, 5)


async def _no_terminal(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield delta(run_id, 1, "half")


async def _empty(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield done(run_id, 1)


async def _after_terminal(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield completed(run_id, 1, "final")
    yield done(run_id, 2)
    yield delta(run_id, 3, "late")


async def _failed(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    r = res(run_id, 1)
    r.run_failed.code = "runner.error"
    r.run_failed.message = "controlled failure"
    yield wrap(r)


async def _die(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield delta(run_id, 1, "dying")
    await asyncio.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)


async def _abort(c: Call) -> AsyncIterator[bytes]:
    run_id, context = c.run_id, c.context
    yield delta(run_id, 1, "x")
    await context.abort(grpc.StatusCode.INTERNAL, "Traceback (most recent call last): secret")


async def _hang(c: Call) -> AsyncIterator[bytes]:
    await asyncio.sleep(3600)
    item: bytes
    for item in ():  # (an async generator that sends nothing)
        yield item


async def _state(c: Call) -> AsyncIterator[bytes]:
    run_id, arg = c.run_id, c.arg
    scope = {"conversation": 1, "actor": 2, "workspace": 6}[arg]
    r = res(run_id, 1)
    r.state_updated.scope = scope  # type: ignore[assignment]
    r.state_updated.key = "k"
    r.state_updated.value.string_value = "v"
    yield wrap(r)
    yield completed(run_id, 2, "stated")
    yield done(run_id, 3)


async def _action(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    r = res(run_id, 1)
    r.action_requested.action = "message.edit"
    r.action_requested.idempotency_key = f"{run_id}:edit"
    yield wrap(r)
    yield completed(run_id, 2, "asked")
    yield done(run_id, 3)


async def _proxy(c: Call) -> AsyncIterator[bytes]:
    run_id, arg, endpoint, request = c.run_id, c.arg, c.endpoint, c.request
    # arg: "platform <action>" | "steal" | "reuse" | "header <run_id>"
    sub, _, rest = arg.partition(" ")
    if sub == "platform":
        outcome = await proxy_call(endpoint, request.run_token, run_id, rest)
    elif sub == "steal":
        other = next(r for r in TOKENS if r != run_id and r not in dict(FINISHED))
        outcome = await proxy_call(endpoint, TOKENS[other], run_id, "message.edit")
    elif sub == "reuse":
        old_run, old_token = FINISHED[-1]
        outcome = await proxy_call(endpoint, old_token, old_run, "message.edit")
    else:
        outcome = await proxy_call(endpoint, "", run_id, "message.edit")
    yield completed(run_id, 1, json.dumps(outcome))
    yield done(run_id, 2)


async def _control(c: Call) -> AsyncIterator[bytes]:
    run_id, endpoint, request = c.run_id, c.endpoint, c.request
    queue: asyncio.Queue[str] = asyncio.Queue()
    task = asyncio.create_task(control_session(endpoint, run_id, request.run_token, queue))
    seq = 0
    try:
        while True:
            item = await queue.get()
            seq += 1
            yield delta(run_id, seq, item + "\n")
            if item.startswith("cancel:"):
                r = res(run_id, seq + 1)
                r.run_failed.code = "cancelled"
                r.run_failed.message = item
                yield wrap(r)
                return
            if item.startswith(("closed", "error")):
                yield done(run_id, seq + 1)
                return
    finally:
        task.cancel()


async def _stall(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield delta(run_id, 1, "working")
    await asyncio.sleep(3600)


async def _slow(c: Call) -> AsyncIterator[bytes]:
    run_id, arg = c.run_id, c.arg
    n = int(arg or "5")
    for i in range(1, n + 1):
        yield delta(run_id, i, f"{i} ")
        await asyncio.sleep(0.02)
    yield done(run_id, n + 1)


async def _unrecognized(c: Call) -> AsyncIterator[bytes]:
    run_id, mode = c.run_id, c.mode
    yield completed(run_id, 1, f"unknown mode {mode}")
    yield done(run_id, 2)


#: the input text's first word -> what the runner does (anything else: `_unrecognized`)
MODES: dict[str, Callable[[Call], AsyncIterator[bytes]]] = {
    "echo": _echo,
    "context": _context,
    "garbage": _garbage,
    "oversize": _oversize,
    "unknown": _unknown,
    "wrong_run_id": _wrong_run_id,
    "dupseq": _dupseq,
    "no_terminal": _no_terminal,
    "empty": _empty,
    "after_terminal": _after_terminal,
    "failed": _failed,
    "die": _die,
    "abort": _abort,
    "hang": _hang,
    "state": _state,
    "action": _action,
    "proxy": _proxy,
    "control": _control,
    "stall": _stall,
    "slow": _slow,
}


async def run(request_bytes: bytes, context: grpc.aio.ServicerContext[Any, Any]):
    request = runner_service_pb2.RunRequest.FromString(request_bytes)
    ctx = request.context
    run_id = ctx.run_id
    text = ctx.input.text
    mode, _, arg = text.partition(" ")
    TOKENS[run_id] = request.run_token
    traceparent = dict(context.invocation_metadata() or ()).get("traceparent", "")
    log_event(f"started {run_id} {mode} traceparent={traceparent!s}")
    call = Call(request, context, mode, arg)
    try:
        async for item in MODES.get(mode, _unrecognized)(call):
            yield item
    except asyncio.CancelledError:
        log_event(f"cancelled {run_id}")
        raise
    finally:
        FINISHED.append((run_id, request.run_token))


async def list_runners(request_bytes: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    return runner_service_pb2.ListRunnersResponse(runners=manifests()).SerializeToString()


async def describe(request_bytes: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    req = runner_service_pb2.DescribeRunnerRequest.FromString(request_bytes)
    for m in manifests():
        if req.runner_id in (m.id, m.name):
            return runner_service_pb2.DescribeRunnerResponse(runner=m).SerializeToString()
    await context.abort(grpc.StatusCode.NOT_FOUND, "no such runner")


async def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    ident = lambda b: b  # noqa: E731 - raw bytes in and out
    handlers = {
        "Run": grpc.unary_stream_rpc_method_handler(
            run, request_deserializer=ident, response_serializer=ident
        ),
        "ListRunners": grpc.unary_unary_rpc_method_handler(list_runners, ident, ident),
        "DescribeRunner": grpc.unary_unary_rpc_method_handler(describe, ident, ident),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("agentrunner.v1.RunnerService", handlers),)
    )
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"AGENTRUNNER_LISTENING 127.0.0.1:{bound}", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main())
