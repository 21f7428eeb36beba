"""A RunnerService that misbehaves on purpose, as its own process (the hardening matrix's runner).

It speaks raw bytes, so it can send what no SDK would. The run's input text picks the behaviour
(first word, then an argument); `ROGUE_MANIFEST` picks what `ListRunners` answers:

- `normal` (default): one valid manifest, `ROGUE_RUNNER_ID` (default `plugin:test/rogue/default`);
- `garbage`: bytes that do not decode as `ListRunnersResponse`;
- `nan_default`: the manifest's number field defaults to NaN;
- `nul_id`: a runner id with a NUL character.

Prints `AGENTRUNNER_LISTENING host:port` when ready. `ROGUE_LOG` (a file) receives one JSON line per
run it starts: run id, token, proxy endpoint (the fuzzer and the probes call the host as this runner).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from agentrunner.v1 import common_pb2, manifest_pb2, result_pb2, runner_service_pb2

RUNNER_ID = os.environ.get("ROGUE_RUNNER_ID", "plugin:test/rogue/default")


def manifest() -> manifest_pb2.RunnerManifest:
    m = manifest_pb2.RunnerManifest(id=RUNNER_ID, name=RUNNER_ID.rsplit("/", 1)[-1], protocol_version="1")
    m.label.translations["en_US"] = "Rogue"
    caps = m.capabilities
    caps.streaming = caps.event_context = caps.interrupt = caps.steering = caps.tool_calling = True
    p = m.permissions
    p.models.extend([manifest_pb2.MODEL_OPERATION_INVOKE, manifest_pb2.MODEL_OPERATION_STREAM])
    p.tools.extend([manifest_pb2.TOOL_OPERATION_DETAIL, manifest_pb2.TOOL_OPERATION_CALL])
    p.knowledge_bases.extend(
        [manifest_pb2.KNOWLEDGE_OPERATION_LIST, manifest_pb2.KNOWLEDGE_OPERATION_RETRIEVE]
    )
    p.history.extend([manifest_pb2.HISTORY_OPERATION_PAGE, manifest_pb2.HISTORY_OPERATION_SEARCH])
    p.events.extend([manifest_pb2.EVENT_OPERATION_GET, manifest_pb2.EVENT_OPERATION_PAGE])
    p.artifacts.extend([manifest_pb2.ARTIFACT_OPERATION_METADATA, manifest_pb2.ARTIFACT_OPERATION_READ])
    p.state.extend(
        [common_pb2.STATE_SCOPE_CONVERSATION, common_pb2.STATE_SCOPE_ACTOR, common_pb2.STATE_SCOPE_RUNNER]
    )
    p.storage.extend([manifest_pb2.STORAGE_AREA_PLUGIN, manifest_pb2.STORAGE_AREA_WORKSPACE])
    p.runs.extend(
        [
            manifest_pb2.RUN_RECORD_OPERATION_GET,
            manifest_pb2.RUN_RECORD_OPERATION_LIST,
            manifest_pb2.RUN_RECORD_OPERATION_EVENTS_PAGE,
            manifest_pb2.RUN_RECORD_OPERATION_CANCEL,
            manifest_pb2.RUN_RECORD_OPERATION_APPEND_RESULT,
            manifest_pb2.RUN_RECORD_OPERATION_FINALIZE,
        ]
    )
    p.prompt = True
    field = m.config_schema.add(name="temperature", type=manifest_pb2.CONFIG_FIELD_TYPE_NUMBER)
    field.default_value.number_value = math.nan if os.environ.get("ROGUE_MANIFEST") == "nan_default" else 0.5
    if os.environ.get("ROGUE_MANIFEST") == "nul_id":
        m.id = RUNNER_ID + "\x00"
    return m


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def wrap(result: result_pb2.RunResult) -> bytes:
    body = result.SerializeToString()
    return b"\x0a" + varint(len(body)) + body  # RunResponse.result (field 1)


def res(run_id: str, seq: int) -> result_pb2.RunResult:
    r = result_pb2.RunResult(run_id=run_id, sequence=seq)
    r.timestamp.GetCurrentTime()
    return r


def delta(run_id: str, seq: int, text: str) -> bytes:
    r = res(run_id, seq)
    r.message_delta.text = text
    r.message_delta.message_id = "m1"
    return wrap(r)


def completed(run_id: str, seq: int, text: str) -> bytes:
    r = res(run_id, seq)
    r.message_completed.message.content = text
    r.message_completed.message.message_id = "m1"
    return wrap(r)


def done(run_id: str, seq: int, text: str = "") -> bytes:
    r = res(run_id, seq)
    r.run_completed.finish_reason = "stop"
    if text:
        r.run_completed.message.content = text
    return wrap(r)


def report(entry: dict[str, object]) -> None:
    path = os.environ.get("ROGUE_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")


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


async def _token(c: Call) -> AsyncIterator[bytes]:
    """Stay open: the caller acts as this runner with the token."""
    run_id, arg = c.run_id, c.arg
    yield delta(run_id, 1, "holding")
    await asyncio.sleep(float(arg or 3600))
    yield done(run_id, 2, "released")


async def _nan_usage(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    r = res(run_id, 1)
    r.run_completed.finish_reason = "stop"
    r.run_completed.message.content = "with nan usage"
    r.usage.extra.update({"cost": math.nan})
    yield wrap(r)


async def _big_usage(c: Call) -> AsyncIterator[bytes]:
    """A terminal whose usage carries `arg` KiB (the run record is that big)."""
    run_id, arg = c.run_id, c.arg
    r = res(run_id, 1)
    r.run_completed.finish_reason = "stop"
    r.run_completed.message.content = "big usage"
    r.usage.extra.update({"blob": "u" * (int(arg or "1") * 1024)})
    yield wrap(r)


async def _bad_artifacts(c: Call) -> AsyncIterator[bytes]:
    """Artifacts the store cannot take (the soak's fuzzer found them)."""
    run_id = c.run_id
    seq = 0
    for uri, content, sha in (("ftp://example.org/a", b"", ""), ("", b"", ""), ("", b"body", "00" * 32)):
        seq += 1
        r = res(run_id, seq)
        r.artifact_created.artifact.name = "a"
        r.artifact_created.artifact.artifact_id = "" if uri else f"art-{seq}"
        r.artifact_created.artifact.uri = uri
        r.artifact_created.artifact.sha256 = sha
        r.artifact_created.content = content
        yield wrap(r)
    yield done(run_id, seq + 1, "after bad artifacts")


async def _nan_struct(c: Call) -> AsyncIterator[bytes]:
    """NaN inside a non-terminal result's Struct, then a clean end."""
    run_id = c.run_id
    r = res(run_id, 1)
    r.run_log.text = "log"
    r.run_log.fields.update({"x": math.inf})
    yield wrap(r)
    yield done(run_id, 2, "after nan")


async def _nan_params(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    r = res(run_id, 1)
    r.tool_call_started.tool_call_id = "t1"
    r.tool_call_started.tool_name = "current_time"
    r.tool_call_started.parameters.update({"x": math.nan})
    yield wrap(r)
    yield done(run_id, 2, "after nan params")


async def _nul(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield delta(run_id, 1, "a\x00b")
    yield done(run_id, 2, "nul\x00end")


async def _flood(c: Call) -> AsyncIterator[bytes]:
    run_id, arg = c.run_id, c.arg
    n = int(arg or "10000")
    for i in range(1, n + 1):
        yield delta(run_id, i, "x")
    yield done(run_id, n + 1, "flooded")


async def _endless(c: Call) -> AsyncIterator[bytes]:
    """Deltas until cancelled."""
    run_id = c.run_id
    i = 0
    while True:
        i += 1
        yield delta(run_id, i, ".")
        await asyncio.sleep(0.001)


async def _garbage(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield delta(run_id, 1, "partial")
    yield b"\xff\xff\xff\xffnot a protobuf"
    await asyncio.sleep(5)


async def _oversize(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield completed(run_id, 1, "x" * (2 * 1024 * 1024))
    yield done(run_id, 2, "small")


async def _wrong_ids(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield completed("run_someone_else", 1, "injected")
    yield delta(run_id, 0, "no sequence")
    yield delta(run_id, 7, "jump")
    yield delta(run_id, 7, "repeat")
    yield done(run_id, 8, "mine")


async def _die(c: Call) -> AsyncIterator[bytes]:
    run_id = c.run_id
    yield delta(run_id, 1, "dying")
    await asyncio.sleep(0.1)
    os.kill(os.getpid(), signal.SIGKILL)


async def _silent(c: Call) -> AsyncIterator[bytes]:
    await asyncio.sleep(3600)
    item: bytes
    for item in ():  # (an async generator that sends nothing)
        yield item


async def _state_denied(c: Call) -> AsyncIterator[bytes]:
    """A payload the validator refuses, then a clean end."""
    run_id = c.run_id
    r = res(run_id, 1)
    r.state_updated.scope = common_pb2.STATE_SCOPE_WORKSPACE
    r.state_updated.key = "k"
    r.state_updated.value.string_value = "v"
    yield wrap(r)
    yield done(run_id, 2, "after refused state")


async def _state_conv(c: Call) -> AsyncIterator[bytes]:
    """Conversation state (the reference runner's turn counter)."""
    run_id = c.run_id
    r = res(run_id, 2)
    r.state_updated.scope = common_pb2.STATE_SCOPE_CONVERSATION
    r.state_updated.key = "turns"
    r.state_updated.value.number_value = 1
    yield completed(run_id, 1, "before state")
    yield wrap(r)
    yield done(run_id, 3, "after state")


async def _unrecognized(c: Call) -> AsyncIterator[bytes]:
    run_id, ctx = c.run_id, c.ctx
    yield completed(run_id, 1, f"rogue: {ctx.input.text[:40]}")
    yield done(run_id, 2)


#: the input text's first word -> what the runner does (anything else: `_unrecognized`)
MODES: dict[str, Callable[[Call], AsyncIterator[bytes]]] = {
    "token": _token,
    "nan_usage": _nan_usage,
    "big_usage": _big_usage,
    "bad_artifacts": _bad_artifacts,
    "nan_struct": _nan_struct,
    "nan_params": _nan_params,
    "nul": _nul,
    "flood": _flood,
    "endless": _endless,
    "garbage": _garbage,
    "oversize": _oversize,
    "wrong_ids": _wrong_ids,
    "die": _die,
    "silent": _silent,
    "state_denied": _state_denied,
    "state_conv": _state_conv,
}


async def run(request_bytes: bytes, context: grpc.aio.ServicerContext[Any, Any]):
    request = runner_service_pb2.RunRequest.FromString(request_bytes)
    ctx = request.context
    run_id = ctx.run_id
    mode, _, arg = ctx.input.text.partition(" ")
    report(
        {"run_id": run_id, "token": request.run_token, "endpoint": request.host_api_endpoint, "mode": mode}
    )
    async for item in MODES.get(mode, _unrecognized)(Call(request, context, mode, arg)):
        yield item


async def list_runners(request_bytes: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    if os.environ.get("ROGUE_MANIFEST") == "garbage":
        return b"\xff\xff\xff\xff\x0fnot a ListRunnersResponse"
    return runner_service_pb2.ListRunnersResponse(runners=[manifest()]).SerializeToString()


async def describe(request_bytes: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    return runner_service_pb2.DescribeRunnerResponse(runner=manifest()).SerializeToString()


async def main() -> None:
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
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"AGENTRUNNER_LISTENING 127.0.0.1:{bound}", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main())
