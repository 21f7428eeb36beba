"""The host kit's runner: one RunnerService that behaves, or misbehaves, as the input text says.

It is served raw (a generic gRPC handler whose `Run` writes bytes), so it can send what no SDK would:
undecodable messages, foreign run ids, repeated sequences, two terminals, results after the terminal,
oversized results, a stream that breaks or never ends. Each run records what the runner saw (the
request, the answers of its probing proxy calls, the control signals) for the kit to check.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from agentrunner.manifest import build_manifest
from agentrunner.protocol import RUN_ID_HEADER, RUN_TOKEN_HEADER
from agentrunner.results import completed, delta, failed, state
from agentrunner.v1 import (
    common_pb2,
    proxy_service_pb2,
    proxy_service_pb2_grpc,
    result_pb2,
    runner_service_pb2,
)

RUNNER_ID = "plugin:conformance/kit/default"
SERVICE = "agentrunner.v1.RunnerService"
OVERSIZE = (1 << 20) + 1024
UNKNOWN_PAYLOAD = bytes([0x9A, 0x06, 0x02, 0x08, 0x01])  # RunResult oneof field 99 = {1: 1}
UNGRANTED_TOOL = "conformance.not-granted"

MANIFEST = build_manifest(
    {
        "id": RUNNER_ID,
        "label": "Conformance kit runner",
        "description": "Plays well-behaved and misbehaving runners for agentrunner-conformance host.",
        "capabilities": ["streaming", "interrupt", "tool_calling"],
        "permissions": {"history": ["page"], "state": ["conversation"], "tools": ["call"]},
        "context_policy": {"supports_history_pull": True},
    }
)


@dataclasses.dataclass
class Answer:
    """How the host answered one probing call."""

    code: grpc.StatusCode
    reason: str = ""
    has_error_info: bool = False


@dataclasses.dataclass
class Seen:
    """What the runner saw of one run."""

    request: runner_service_pb2.RunRequest
    answers: dict[str, Answer] = dataclasses.field(default_factory=dict)
    welcome: proxy_service_pb2.ControlWelcome | None = None
    signals: list[proxy_service_pb2.ControlResponse] = dataclasses.field(default_factory=list)
    waiting: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    call_cancelled: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    cancelled_at: float | None = None


def _frame(request: runner_service_pb2.RunRequest, seq: int, result: result_pb2.RunResult) -> bytes:
    result.run_id = result.run_id or request.context.run_id
    result.sequence = seq
    result.timestamp.GetCurrentTime()
    return runner_service_pb2.RunResponse(result=result).SerializeToString()


async def probe(seen: Seen, label: str, call: Awaitable[Any]) -> None:
    """Records how the host answered a call (OK, or the code and ErrorInfo reason)."""
    from agentrunner.conformance.checks import error_info

    try:
        await call
        seen.answers[label] = Answer(grpc.StatusCode.OK)
    except grpc.RpcError as exc:
        code, info, _ = error_info(exc)
        seen.answers[label] = Answer(code, info.reason if info else "", info is not None)


Behaviour = Callable[["KitRunner", runner_service_pb2.RunRequest, Seen], AsyncIterator[bytes]]


class KitRunner:
    """The RunnerService of the host kit; `seen[text]` is filled as runs arrive."""

    def __init__(self) -> None:
        self.seen: dict[str, Seen] = {}
        self.arrived: dict[str, asyncio.Event] = {}
        self._server: grpc.aio.Server | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}

    def expect(self, text: str) -> asyncio.Event:
        """An event set when a run for `text` arrives (arm it before sending the event)."""
        self.arrived[text] = asyncio.Event()
        return self.arrived[text]

    def proxy(self, request: runner_service_pb2.RunRequest) -> proxy_service_pb2_grpc.ProxyServiceAsyncStub:
        """A ProxyService stub to the endpoint the host gave the run (channels are kept per endpoint)."""
        endpoint = request.host_api_endpoint
        if endpoint not in self._channels:
            self._channels[endpoint] = grpc.aio.insecure_channel(endpoint)
        return proxy_service_pb2_grpc.ProxyServiceStub(self._channels[endpoint])

    @staticmethod
    def metadata(request: runner_service_pb2.RunRequest) -> tuple[tuple[str, str | bytes], ...]:
        """The run's token and id as call metadata, as a real runner sends them."""
        return ((RUN_TOKEN_HEADER, request.run_token), (RUN_ID_HEADER, request.context.run_id))

    async def start(self, listen: str) -> None:
        """Serves the kit's RunnerService on `listen` (for the host to call)."""
        server = grpc.aio.server(
            options=[("grpc.so_reuseport", 0), ("grpc.max_send_message_length", 16 << 20)]
        )
        des = runner_service_pb2
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "ListRunners": grpc.unary_unary_rpc_method_handler(
                self._list, des.ListRunnersRequest.FromString, des.ListRunnersResponse.SerializeToString
            ),
            "DescribeRunner": grpc.unary_unary_rpc_method_handler(
                self._describe,
                des.DescribeRunnerRequest.FromString,
                des.DescribeRunnerResponse.SerializeToString,
            ),
            "Run": grpc.unary_stream_rpc_method_handler(self._run, des.RunRequest.FromString, lambda b: b),
        }
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
        checker = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(checker, server)
        if not server.add_insecure_port(listen):
            raise OSError(f"cannot listen on {listen}")
        await server.start()
        await checker.set("", health_pb2.HealthCheckResponse.SERVING)
        self._server = server

    async def stop(self) -> None:
        """Closes the proxy channels and stops the server."""
        for channel in self._channels.values():
            await channel.close()
        if self._server is not None:
            await self._server.stop(0)

    async def _list(self, request: Any, context: Any) -> runner_service_pb2.ListRunnersResponse:
        return runner_service_pb2.ListRunnersResponse(runners=[MANIFEST])

    async def _describe(self, request: Any, context: Any) -> runner_service_pb2.DescribeRunnerResponse:
        return runner_service_pb2.DescribeRunnerResponse(runner=MANIFEST)

    async def _run(
        self, request: runner_service_pb2.RunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        text = request.context.input.text
        seen = self.seen[text] = Seen(request)
        if text in self.arrived:
            self.arrived[text].set()
        behaviour = BEHAVIOURS.get(text, well_behaved)
        try:
            async for frame in behaviour(self, request, seen):
                yield frame
        except asyncio.CancelledError:
            seen.cancelled_at = asyncio.get_running_loop().time()
            seen.call_cancelled.set()
            raise


# -- behaviours ---------------------------------------------------------------------------------------


async def well_behaved(kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: two deltas and a completion, all in order."""
    yield _frame(r, 1, delta("hel", message_id="m1"))
    yield _frame(r, 2, delta("lo", message_id="m1"))
    yield _frame(r, 3, completed("hello", message_id="m1"))


async def wrong_run_id(kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: a result carrying another run's id among good ones (the host drops it)."""
    foreign = delta("not mine")
    foreign.run_id = "run_someone_else"
    yield _frame(r, 1, foreign)
    yield _frame(r, 2, delta("mine"))
    yield _frame(r, 3, completed("mine"))


async def sequence_backwards(
    kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen
) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: a sequence number repeated (the host drops the repeat)."""
    yield _frame(r, 1, delta("a"))
    yield _frame(r, 2, delta("b"))
    yield _frame(r, 1, delta("again"))
    yield _frame(r, 3, completed("ab"))


async def two_terminals(kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: `run.completed` then `run.failed` (the first terminal stands)."""
    yield _frame(r, 1, completed("first"))
    yield _frame(r, 2, failed("runner.error", "second terminal"))


async def after_terminal(
    kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen
) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: a delta after the terminal result (the host drops it)."""
    yield _frame(r, 1, completed("done"))
    yield _frame(r, 2, delta("late"))


async def oversized(kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: a delta over the host's 1 MiB result cap, then a completion (the run goes on)."""
    yield _frame(r, 1, delta("x" * OVERSIZE))
    yield _frame(r, 2, completed("fine"))


async def garbage(kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: bytes that are no RunResponse (the host fails the run: runner.protocol_error)."""
    yield b"\xff\xff\xff\xff\xff"


async def no_terminal(kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: a delta and then the end of the stream (runner.no_terminal)."""
    yield _frame(r, 1, delta("and then nothing"))


async def empty(kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: `run.completed` with no output at all (runner.empty_output)."""
    yield _frame(r, 1, completed())


async def dies(kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: the process dies mid-stream (runner.stream_broken)."""
    yield _frame(r, 1, delta("a"))
    await asyncio.sleep(0.05)
    raise ConnectionResetError("the runner process died")  # the call ends with UNKNOWN mid-stream


async def unknown_payload(
    kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen
) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: a result type from a newer contract (the host ignores it)."""
    yield _frame(r, 1, result_pb2.RunResult.FromString(UNKNOWN_PAYLOAD))
    yield _frame(r, 2, completed("ok"))


async def invalid_payload(
    kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen
) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: a `state.updated` without a scope (the host drops it)."""
    bad = state("conversation", "conformance.bad", 1)
    bad.state_updated.scope = common_pb2.STATE_SCOPE_UNSPECIFIED
    yield _frame(r, 1, bad)
    yield _frame(r, 2, completed("ok"))


async def probes(kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen) -> AsyncIterator[bytes]:
    """Calls the host correctly and incorrectly, recording each answer."""
    stub, md, p = kit.proxy(r), kit.metadata(r), proxy_service_pb2
    await probe(seen, "granted", stub.ListHistory(p.ListHistoryRequest(limit=5), metadata=md, timeout=10))
    await probe(seen, "no_token", stub.ListHistory(p.ListHistoryRequest(), timeout=10))
    await probe(
        seen,
        "bad_token",
        stub.ListHistory(p.ListHistoryRequest(), metadata=((RUN_TOKEN_HEADER, "forged"),), timeout=10),
    )
    other: tuple[tuple[str, str | bytes], ...] = (
        (RUN_TOKEN_HEADER, r.run_token),
        (RUN_ID_HEADER, "run_someone_else"),
    )
    await probe(seen, "other_run", stub.ListHistory(p.ListHistoryRequest(), metadata=other, timeout=10))
    tool = p.CallToolRequest(tool_name=UNGRANTED_TOOL, tool_call_id="call_1")
    await probe(seen, "ungranted_tool", stub.CallTool(tool, metadata=md, timeout=10))
    scope = p.GetStateRequest(scope=common_pb2.STATE_SCOPE_WORKSPACE, key="k")
    await probe(seen, "ungranted_scope", stub.GetState(scope, metadata=md, timeout=10))
    await _control_probes(kit, r, seen)
    yield _frame(r, 1, completed("probed"))


async def _control_probes(kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen) -> None:
    stub, p = kit.proxy(r), proxy_service_pb2
    forged = stub.Control(metadata=((RUN_TOKEN_HEADER, "forged"),), timeout=10)
    await forged.write(p.ControlRequest(hello=p.ControlHello(run_id=r.context.run_id, run_token="forged")))

    async def first(call: Any) -> Any:
        message = await call.read()
        if not isinstance(message, p.ControlResponse):  # EOF: the host closed without a status
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNKNOWN, grpc.aio.Metadata(), grpc.aio.Metadata(), "EOF"
            )
        return message

    await probe(seen, "control_forged", first(forged))
    forged.cancel()
    call = stub.Control(metadata=kit.metadata(r), timeout=10)
    await call.write(
        p.ControlRequest(
            hello=p.ControlHello(run_id=r.context.run_id, run_token=r.run_token, accepts=["cancel"])
        )
    )
    with contextlib.suppress(grpc.RpcError):
        message = await call.read()
        if isinstance(message, p.ControlResponse) and message.WhichOneof("signal") == "welcome":
            seen.welcome = message.welcome
    call.cancel()


async def _control(
    kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen, *, obey: bool
) -> AsyncIterator[bytes]:
    """Opens Control, says it is waiting, and on a cancel acks (then ends with run.failed, or not)."""
    p = proxy_service_pb2
    call = kit.proxy(r).Control(metadata=kit.metadata(r))
    await call.write(
        p.ControlRequest(
            hello=p.ControlHello(run_id=r.context.run_id, run_token=r.run_token, accepts=["cancel"])
        )
    )
    try:
        while True:
            message = await call.read()
            if not isinstance(message, p.ControlResponse):  # EOF
                break
            kind = message.WhichOneof("signal")
            if kind == "welcome":
                seen.welcome = message.welcome
                seen.waiting.set()
                continue
            seen.signals.append(message)
            if message.signal_id:
                await call.write(
                    p.ControlRequest(ack=p.ControlAck(signal_id=message.signal_id, accepted=True))
                )
            if kind == "cancel" and obey:
                yield _frame(r, 1, failed("cancelled", f"cancelled: {message.cancel.reason}"))
                return
        await asyncio.Event().wait()  # the control stream ended: keep the run open until cancelled
    finally:
        call.cancel()


async def cancel(kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: holds the Control stream open and ends with `run.failed` when cancelled."""
    async for frame in _control(kit, r, seen, obey=True):
        yield frame


async def ignores_cancel(
    kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen
) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: acknowledges a cancel but never ends (the host must end the run itself)."""
    async for frame in _control(kit, r, seen, obey=False):
        yield frame


async def never_ends(kit: KitRunner, r: runner_service_pb2.RunRequest, seen: Seen) -> AsyncIterator[bytes]:
    """A runner behaviour for the host kit: one delta, then nothing until the call is cancelled (the deadline scenario)."""
    yield _frame(r, 1, delta("thinking"))
    seen.waiting.set()
    await asyncio.Event().wait()


BEHAVIOURS: dict[str, Behaviour] = {
    f.__name__: f
    for f in (
        well_behaved,
        wrong_run_id,
        sequence_backwards,
        two_terminals,
        after_terminal,
        oversized,
        garbage,
        no_terminal,
        empty,
        dies,
        unknown_payload,
        invalid_payload,
        probes,
        cancel,
        ignores_cancel,
        never_ends,
    )
}
