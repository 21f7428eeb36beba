"""`python -m agentrunner connect HOST module:Runner`: serve runners by dialing the host (a runtime).

One outbound connection per process, no listening port: the runtime opens `RuntimeService.Connect`,
registers (runtime id, machine, SDK, labels, slots, the runners' manifests, detected harness CLIs),
heartbeats, and keeps one `ClaimRun` stream per free slot on which the host places runs
(`runtime/slots.py`). When the session ends (the host went away, the network dropped, the host took the
runtime for offline) its runs stop and the runtime connects again after a capped exponential backoff
with jitter; the host never re-sends a run, so none is executed twice. A refusal that waiting cannot fix
(credentials, a runner id or label it may not serve, a manifest the host refuses) ends the process with
`RuntimeRefused`. SIGTERM drains: the host places no new runs, open runs get `grace` seconds to finish,
then end with `run.failed` `cancelled`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.metadata
import platform
import random
import secrets
import socket
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import grpc
import structlog

from agentrunner.api import HostTls
from agentrunner.detect import DEFAULT_HARNESSES, detect_harnesses
from agentrunner.engine import CANCELLED
from agentrunner.errors import AgentRunnerError, from_rpc_error
from agentrunner.runner import Runner
from agentrunner.runtime.credentials import check_key_transport, load_runtime_key
from agentrunner.runtime.slots import SlotRunner
from agentrunner.server import RunnerServicer, _instances
from agentrunner.v1 import runtime_pb2, runtime_service_pb2

log = structlog.get_logger("agentrunner.runtime")

CONNECT_METHOD = "/agentrunner.v1.RuntimeService/Connect"
#: printed on stdout (with the runtime id and connection id) each time the host accepts the runtime
CONNECTED_PREFIX = "AGENTRUNNER_RUNTIME_CONNECTED"
#: statuses that end the process: waiting does not change the host's answer
FATAL = frozenset(
    {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT}
)
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", 16 << 20),
    ("grpc.max_send_message_length", 16 << 20),
    ("grpc.keepalive_time_ms", 15_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.enable_retries", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class RuntimeRefused(Exception):
    """The host refused the runtime for a reason waiting cannot fix; the message says which."""

    def __init__(self, error: AgentRunnerError) -> None:
        super().__init__(f"{error.status_code.name} {error.reason}: {error.message}")
        self.error = error


def sdk_version() -> str:
    """The installed SDK's version, sent in the runtime's registration."""
    try:
        return importlib.metadata.version("langbot-agentrunner-sdk")
    except importlib.metadata.PackageNotFoundError:
        return "0"


@dataclasses.dataclass(slots=True)
class RuntimeOptions:
    """How a runtime connects and what it announces."""

    address: str
    runtime_id: str = dataclasses.field(default_factory=socket.gethostname)
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    slots: int = 4
    #: the runtime key (`authorization: Bearer`); default: AGENTRUNNER_RUNTIME_KEY(_FILE)
    key: str | None = None
    #: TLS towards the host; default: the AGENTRUNNER_HOST_* variables (plaintext without them)
    tls: HostTls | None = None
    #: harness CLIs to look for on PATH
    detect: Sequence[str] = DEFAULT_HARNESSES
    #: seconds open runs get on SIGTERM
    grace: float = 5.0
    backoff_initial: float = 0.1
    backoff_max: float = 5.0
    precheck: bool = True


def backoff_delay(attempt: int, initial: float, cap: float) -> float:
    """Capped exponential backoff with jitter: half the step fixed, half random (`attempt` from 0)."""
    step = min(cap, initial * (2**attempt))
    return float(step / 2 + random.uniform(0, step / 2))


class Runtime:
    """A runtime process's connection to the host (see the module docstring)."""

    def __init__(self, runners: Iterable[Runner | type[Runner]], options: RuntimeOptions) -> None:
        self.options = options
        self.runners = _instances(runners)
        self.servicer = RunnerServicer(self.runners, precheck=options.precheck)
        self.instance_id = secrets.token_hex(8)
        if options.key is not None:
            key = options.key
        else:
            loaded = load_runtime_key()
            key = loaded.value if loaded is not None else ""
        self.tls = options.tls if options.tls is not None else HostTls.from_env()
        check_key_transport(options.address, key, self.tls)
        metadata = (("authorization", f"Bearer {key}"),) if key else ()
        self.slots = SlotRunner(self.servicer.find, options.address, metadata, precheck=options.precheck)
        self.metadata = metadata
        self.capabilities: list[runtime_pb2.HarnessCapability] = []
        self.connection_id = ""
        self.connections = 0
        #: set while the host has not drained this runtime (slot streams may be opened)
        self.undrained = asyncio.Event()
        self.leaving = False
        self._stop = asyncio.Event()
        self._call: Any = None
        self._write_lock = asyncio.Lock()

    # -- the loop of sessions --------------------------------------------------------------------------
    async def run(self, announce: bool = False) -> None:
        """Connects, serves, reconnects with backoff until `stop()`; raises `RuntimeRefused`."""
        if self.options.detect:
            self.capabilities = await detect_harnesses(self.options.detect)
        attempt = 0
        while not self._stop.is_set():
            welcomed = self.connections
            try:
                await self._session(announce)
            except grpc.aio.AioRpcError as exc:
                error = from_rpc_error(exc)
                if exc.code() in FATAL:
                    raise RuntimeRefused(error) from None
                log.warning(
                    "runtime.connect_failed", code=exc.code().name, reason=error.reason, message=error.message
                )
            except (grpc.aio.UsageError, asyncio.InvalidStateError, OSError) as exc:  # ended under a write
                log.warning("runtime.session_failed", error=repr(exc))
            if self._stop.is_set():
                return
            if self.connections > welcomed:
                attempt = 0  # (the host had accepted this session: the first retry comes quickly again)
            delay = backoff_delay(attempt, self.options.backoff_initial, self.options.backoff_max)
            attempt += 1
            log.info("runtime.reconnecting", in_s=round(delay, 3))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    def _channel(self) -> grpc.aio.Channel:
        address, tls = self.options.address, self.tls
        if tls is None:
            return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        options = list(CHANNEL_OPTIONS)
        if tls.server_name:
            options.append(("grpc.ssl_target_name_override", tls.server_name))
        return grpc.aio.secure_channel(address, tls.credentials(), options=options)

    def hello(self) -> runtime_service_pb2.ConnectRequest:
        """The registration this runtime opens `Connect` with (ids, machine, SDK, labels, slots, manifests,
        detected harness CLIs)."""
        o = self.options
        hello = runtime_service_pb2.RuntimeHello(
            runtime_id=o.runtime_id,
            instance_id=self.instance_id,
            machine=runtime_pb2.RuntimeMachine(
                hostname=socket.gethostname(),
                os=sys.platform,
                arch=platform.machine(),
                os_release=platform.release(),
            ),
            sdk=runtime_pb2.RuntimeSdk(language="python", version=sdk_version()),
            labels=o.labels,
            slots=o.slots,
            runners=[r.get_manifest() for r in self.runners],
            capabilities=self.capabilities,
        )
        return runtime_service_pb2.ConnectRequest(hello=hello)

    async def _session(self, announce: bool) -> None:
        """One connection: register, then heartbeats, slots and the host's signals until it ends."""
        channel = self._channel()
        tasks: list[asyncio.Task[Any]] = []
        try:
            call = channel.stream_stream(
                CONNECT_METHOD,
                request_serializer=runtime_service_pb2.ConnectRequest.SerializeToString,
                response_deserializer=runtime_service_pb2.ConnectResponse.FromString,
            )(metadata=self.metadata)
            self._call = call
            await call.write(self.hello())
            first = await call.read()
            if (
                not isinstance(first, runtime_service_pb2.ConnectResponse)
                or first.WhichOneof("message") != "welcome"
            ):
                return
            welcome = first.welcome
            self.connection_id = welcome.connection_id
            self.connections += 1
            self._set_drained(welcome.drained)
            log.info(
                "runtime.connected",
                runtime_id=self.options.runtime_id,
                connection=self.connection_id,
                runners=list(welcome.runner_ids),
                drained=welcome.drained,
            )
            if announce:
                sys.stdout.write(f"{CONNECTED_PREFIX} {self.options.runtime_id} {self.connection_id}\n")
                sys.stdout.flush()
            interval = max(0.05, welcome.heartbeat_interval.ToTimedelta().total_seconds() or 2.0)
            tasks.append(asyncio.create_task(self._heartbeats(call, interval)))
            for _ in range(self.options.slots):
                tasks.append(asyncio.create_task(self._slot(channel, welcome.connection_id)))
            await self._signals(call)
        finally:
            self._call = None
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await channel.close()

    def _may_open(self) -> bool:
        return not self.leaving and not self._stop.is_set()

    def _set_drained(self, drained: bool) -> None:
        if drained:
            self.undrained.clear()
        else:
            self.undrained.set()

    async def _slot(self, channel: grpc.aio.Channel, connection_id: str) -> None:
        """One slot of the session: slot streams while the runtime takes runs, a pause while drained."""
        while self._may_open():
            await self.undrained.wait()
            await self.slots.serve_slot(
                channel, connection_id, lambda: self._may_open() and self.undrained.is_set()
            )
            if self.undrained.is_set():
                return  # (the host no longer knows the connection, or the runtime stops)

    async def _signals(self, call: Any) -> None:
        """Reads the host's messages until the session ends (EOF or an error, raised)."""
        while True:
            message = await call.read()
            if not isinstance(message, runtime_service_pb2.ConnectResponse):
                return
            if message.WhichOneof("message") == "drain":
                self._set_drained(message.drain.drained)
                log.info("runtime.drain", drained=message.drain.drained, reason=message.drain.reason)

    async def _write(self, call: Any, request: runtime_service_pb2.ConnectRequest) -> None:
        async with self._write_lock:
            await call.write(request)

    async def _heartbeats(self, call: Any, interval: float) -> None:
        slots = self.options.slots
        with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
            while True:
                beat = runtime_service_pb2.RuntimeHeartbeat(
                    free_slots=max(0, slots - len(self.slots.active)),
                    active_run_ids=sorted(self.slots.run_ids),
                )
                await self._write(call, runtime_service_pb2.ConnectRequest(heartbeat=beat))
                await asyncio.sleep(interval)

    # -- stopping --------------------------------------------------------------------------------------
    async def drain_and_stop(self, grace: float | None = None) -> None:
        """Graceful stop: tell the host (no new runs), let open runs finish for `grace`, stop the rest."""
        grace = self.options.grace if grace is None else grace
        self.leaving = True
        call = self._call
        if call is not None:
            with contextlib.suppress(Exception):
                await self._write(
                    call,
                    runtime_service_pb2.ConnectRequest(
                        drain=runtime_service_pb2.RuntimeDrain(reason="the runtime is shutting down")
                    ),
                )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.slots.idle.wait(), grace)
        for execution in list(self.slots.active):
            execution.stop(CANCELLED, "the runtime is shutting down")
        with contextlib.suppress(TimeoutError):  # (their `run.failed` results reach the host)
            await asyncio.wait_for(self.slots.idle.wait(), 1.0)
        self._stop.set()
        call = self._call
        if call is not None:
            with contextlib.suppress(Exception):
                await call.done_writing()

    def stop(self) -> None:
        """Stops at once (open runs end with the session)."""
        self._stop.set()
        if self._call is not None:
            self._call.cancel()


async def connect_async(
    runners: Iterable[Runner | type[Runner]], options: RuntimeOptions, *, announce: bool = True
) -> None:
    """Runs a runtime until SIGTERM/SIGINT (then drains for `options.grace`); raises `RuntimeRefused`."""
    import signal

    from agentrunner import telemetry
    from agentrunner.api import close_channels

    telemetry.configure_logging()  # stdout carries the connected lines (and nothing else)
    shutdown_tracing = telemetry.configure_otlp("agentrunner-runtime")
    runtime = Runtime(runners, options)
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Task[None]] = []

    def on_signal() -> None:
        if not draining:
            log.info("runtime.shutting_down", grace=options.grace, active=len(runtime.slots.active))
            draining.append(asyncio.ensure_future(runtime.drain_and_stop()))
        else:
            runtime.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)
    try:
        await runtime.run(announce=announce)
        for task in draining:
            await task
    finally:
        await close_channels()
        services = sys.modules.get("agentrunner.services.http")
        if services is not None:
            await services.close_http_clients()
        if shutdown_tracing is not None:
            await asyncio.to_thread(shutdown_tracing)
