"""The runner side of the per-run control stream (`ProxyService.Control`).

Opened for runners that declare `interrupt` or `steering`: sends `hello`, acknowledges every host signal
by id, sends heartbeats, and turns signals into `ctx.cancelled`, steering items and deadline changes.
A host without the stream (UNIMPLEMENTED) or a broken stream never fails the run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import grpc
import structlog

from agentrunner.context import RunContext
from agentrunner.errors import AgentRunnerError
from agentrunner.refusal import lost_refusal, recover_refusal
from agentrunner.v1 import proxy_service_pb2 as P

log = structlog.get_logger("agentrunner.control")

DEFAULT_HEARTBEAT = 10.0

_Call = grpc.aio.StreamStreamCall[P.ControlRequest, P.ControlResponse]


class ControlClient:
    """Runs the control stream of one run until cancelled (the engine cancels it when the run ends)."""

    def __init__(
        self,
        ctx: RunContext,
        *,
        run_token: str,
        accepts: list[str],
        on_cancel: Callable[[str, float | None], None],
        last_sequence: Callable[[], int],
    ) -> None:
        self._ctx = ctx
        self._token = run_token
        self._accepts = accepts
        self._on_cancel = on_cancel
        self._last_sequence = last_sequence
        self._write_lock = asyncio.Lock()
        self.connected = asyncio.Event()
        self.unimplemented = False
        self._heartbeat: asyncio.Task[None] | None = None

    async def _write(self, call: _Call, request: P.ControlRequest) -> None:
        async with self._write_lock:
            await call.write(request)

    async def _heartbeats(self, call: _Call, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            beat = P.ControlHeartbeat(last_sequence=self._last_sequence())
            await self._write(call, P.ControlRequest(heartbeat=beat))

    def _apply(self, msg: P.ControlResponse) -> None:
        kind = msg.WhichOneof("signal")
        if kind == "cancel":
            grace = None
            if msg.cancel.HasField("grace_period"):
                grace = msg.cancel.grace_period.ToNanoseconds() / 1e9
            self._on_cancel(msg.cancel.reason, grace)
        elif kind == "steering":
            self._ctx.steering.push(msg.steering)
        elif kind == "deadline":
            self._ctx._set_deadline(msg.deadline.deadline_at.ToNanoseconds() / 1e9)

    async def run(self) -> None:
        """Holds the stream open until the host ends it or the engine cancels this task; never raises
        for the stream's own failures (UNIMPLEMENTED marks `unimplemented`, the rest is logged)."""
        api = self._ctx.api
        remaining = self._ctx.remaining()
        timeout = None if remaining is None else max(remaining, 0.0) + 5.0
        call: _Call | None = None
        try:
            call = api.stub.Control(metadata=api.metadata(), timeout=timeout)
            await self._serve(call)
        except grpc.RpcError as exc:
            if lost_refusal(exc):  # (the host refused while hello was in flight: agentrunner.refusal)
                refused = await recover_refusal("Control", api.stub, api.metadata())
                log.warning("control stream refused", run_id=self._ctx.run_id, reason=refused.reason)
            else:
                self._ended(exc)
        except AgentRunnerError as exc:
            log.warning("control stream unavailable", run_id=self._ctx.run_id, reason=exc.reason)
        finally:
            self._ctx.steering.control_active = False
            if self._heartbeat is not None:
                self._heartbeat.cancel()
                with contextlib.suppress(asyncio.CancelledError, grpc.RpcError):
                    await self._heartbeat
            if call is not None:
                call.cancel()

    async def _serve(self, call: _Call) -> None:
        """`hello`, then every host message in turn until the host closes the stream."""
        hello = P.ControlHello(run_id=self._ctx.run_id, run_token=self._token, accepts=self._accepts)
        await self._write(call, P.ControlRequest(hello=hello))
        if "steering" in self._accepts:
            self._ctx.steering.control_active = True
        while True:
            msg = await call.read()
            if not isinstance(msg, P.ControlResponse):  # EOF
                return
            if msg.WhichOneof("signal") == "welcome":
                self._welcome(call, msg.welcome)
            else:
                await self._signal(call, msg)

    def _welcome(self, call: _Call, welcome: P.ControlWelcome) -> None:
        """The host's `welcome`: connected; its deadline applies; heartbeats start at its interval."""
        self.connected.set()
        interval = DEFAULT_HEARTBEAT
        if welcome.HasField("heartbeat_interval"):
            interval = max(welcome.heartbeat_interval.ToNanoseconds() / 1e9, 0.05)
        if welcome.HasField("deadline_at"):
            self._ctx._set_deadline(welcome.deadline_at.ToNanoseconds() / 1e9)
        if self._heartbeat is None:
            self._heartbeat = asyncio.create_task(self._heartbeats(call, interval))

    async def _signal(self, call: _Call, msg: P.ControlResponse) -> None:
        """A signal: acknowledged by id (refused when not accepted or unknown), then applied."""
        kind = msg.WhichOneof("signal")
        accepted, detail = True, ""
        if kind == "steering" and "steering" not in self._accepts:
            accepted, detail = False, "runner does not accept steering"
        elif kind not in ("cancel", "steering", "deadline"):
            accepted, detail = False, "unknown signal"
        # The ack goes out before the signal acts: a steering item can end the run at once, and the
        # run's end cancels this task (an ack still to be written would never reach the host).
        try:
            if msg.signal_id:
                ack = P.ControlAck(signal_id=msg.signal_id, accepted=accepted, detail=detail)
                await self._write(call, P.ControlRequest(ack=ack))
        finally:
            if accepted:
                self._apply(msg)

    def _ended(self, exc: grpc.RpcError) -> None:
        code = exc.code() if hasattr(exc, "code") else None
        if code == grpc.StatusCode.UNIMPLEMENTED:
            self.unimplemented = True
            log.info("host has no control stream; continuing without it", run_id=self._ctx.run_id)
        elif code != grpc.StatusCode.CANCELLED:
            log.warning("control stream ended", run_id=self._ctx.run_id, code=str(code))
