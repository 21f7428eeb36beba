"""One Codex turn over `codex app-server --listen stdio://` (JSON-RPC 2.0, `jsonrpc.py`).

    initialize → initialized → thread/resume (stored id; on an error: thread/start) | thread/start
      → (the LangBot MCP server's `mcpServer/startupStatus/updated` leaves `starting`)
      → turn/start → notifications until turn/completed

Codex answers the model's tool search from the MCP tools it knows when the turn starts, so the turn
starts only once the LangBot bridge is up (at most `MCP_READY_TIMEOUT`; the HTTP bridge takes well
under a second).

One app-server process per turn, started in the conversation's workspace with the run's private
`CODEX_HOME`, stopped (its process group) when the turn ends however it ends. The thread id is stored
(`state.updated`) as soon as `thread/start` / `thread/resume` answers, before any output. Server
requests (approvals, elicitations, unknown methods) are answered by `Approvals` in their own tasks, so
the notifications keep flowing while one waits for the user; a request still open when the turn ends
is declined. A cancel (or the deadline) sends `turn/interrupt` first and waits briefly for Codex to
confirm (`turn/completed` with status `interrupted`) before the process group is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.metadata
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import structlog

from agentrunner import results
from agentrunner.failures import FailureKind, RunnerFailure
from agentrunner.harness import HarnessProcess, ProcessSpec
from agentrunner.harness.asking import confirm
from agentrunner.harness.turns import LANGBOT_SERVER, harness_failure, wait_exit
from agentrunner.v1 import result_pb2
from agentrunner_runners.codex import invocation
from agentrunner_runners.codex.app_stream import CodexAppStream
from agentrunner_runners.codex.approvals import Approvals
from agentrunner_runners.codex.jsonrpc import CLOSED, Incoming, RpcClosed, RpcConnection, RpcError, RpcTimeout

if TYPE_CHECKING:
    from agentrunner_runners.codex.runner import CodexRun

log = structlog.get_logger("agentrunner_runners.codex")

try:
    _VERSION = importlib.metadata.version("langbot-agentrunner-runners")
except importlib.metadata.PackageNotFoundError:  # a source checkout without metadata
    _VERSION = "0"
CLIENT_INFO = {"name": "langbot_codex_agent", "title": "LangBot Codex Agent", "version": _VERSION}
#: how long Codex gets to confirm a `turn/interrupt` before its process group is stopped
INTERRUPT_GRACE = 3.0
#: how long the app-server gets to exit after its stdin is closed
CLOSE_GRACE = 1.0
_OVERLOADED = -32001
#: how long the turn waits for the LangBot MCP server to leave `starting` (Codex's own limit is 10 s)
MCP_READY_TIMEOUT = 12.0

_failed = functools.partial(harness_failure, "codex")


class _Stop(Exception):
    """The turn must stop: the run was cancelled or the deadline passed."""

    def __init__(self, cancelled: bool) -> None:
        self.cancelled = cancelled


async def _next(conn: RpcConnection, deadline: float, cancelled: asyncio.Event) -> Incoming:
    getter = asyncio.ensure_future(conn.inbox.get())
    watcher = asyncio.ensure_future(cancelled.wait())
    try:
        done, _ = await asyncio.wait(
            {getter, watcher},
            timeout=max(deadline - time.monotonic(), 0.0),
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        for waiter in (getter, watcher):
            if not waiter.done():
                waiter.cancel()
    if getter in done:
        return getter.result()
    raise _Stop(cancelled=watcher in done)


def _thread_id(result: dict[str, Any]) -> str:
    thread = result.get("thread")
    if isinstance(thread, dict) and thread.get("id"):
        return str(thread["id"])
    return str(result.get("threadId") or "")


class AppServerTurn:
    """One turn of a run on an app-server (module docstring); `results()` yields its results and
    leaves the outcome in `stream` (or raises `RunnerFailure`)."""

    def __init__(self, run: CodexRun, prompt: str, stream: CodexAppStream) -> None:
        self.run, self.prompt, self.stream = run, prompt, stream
        self.config = run.config
        assert run.workspace is not None
        self.workspace = run.workspace.directory
        policy = self.config.approvals
        if policy == "ask" and not run.ctx.context.available_apis.steering_pull:
            # the answer reaches an open run only as steering input: without it nobody could answer
            log.warning("codex.ask_without_steering", run_id=run.ctx.run_id)
            policy = "workspace"
        self.asking = policy == "ask"
        self.approvals = Approvals(policy, self.workspace, self._ask if policy == "ask" else None)
        self.handlers: set[asyncio.Task[None]] = set()

    async def _ask(self, title: str, description: str) -> bool | None:
        # what Codex wants to run can carry a secret it read: the user sees it redacted
        answer = await confirm(
            self.run.ctx,
            title,
            description=self.run.redactor(description),
            timeout=self.config.approval_timeout,
        )
        if answer is None:
            await self.run.ctx.log(
                f"{title}: nobody answered within {self.config.approval_timeout:g} s; declined", "warning"
            )
        return answer

    async def results(self) -> AsyncIterator[result_pb2.RunResult]:
        if self.config.approvals == "ask" and not self.asking:
            yield results.log(
                "approvals: ask needs steering (the answer comes back into the open run); "
                "this run answers by the workspace policy",
                "warning",
            )
        run, config = self.run, self.config
        spec = ProcessSpec(
            argv=invocation.app_server_args(config), cwd=self.workspace, env=run.env, stdin=None
        )
        deadline = run.deadline()
        async with HarnessProcess(spec, redactor=run.redactor, prefix="codex") as proc:
            conn = RpcConnection(proc, timeout=config.rpc_timeout).start()
            try:
                await conn.request("initialize", {"clientInfo": CLIENT_INFO})
                await conn.notify("initialized")
                thread_id = await self._open_thread(conn)
                self.stream.thread_id = thread_id
                if thread_id != run.thread_id:
                    run.thread_id = thread_id
                    if config.reuse_session:
                        yield results.state("conversation", run.session_key, thread_id)
                async for result in self._await_bridge(conn):
                    yield result
                turn = await conn.request("turn/start", {"threadId": thread_id, "input": self._input()})
                started = turn.get("turn")
                if isinstance(started, dict) and started.get("id"):
                    self.stream.turn_id = str(started["id"])
                async for result in self._drive(conn, deadline):
                    yield result
            except RpcClosed:
                raise await self._exited(proc, deadline) from None
            except RpcTimeout as exc:
                raise _failed(
                    "timeout",
                    f"Codex did not answer {exc.method} within {config.rpc_timeout:g} s",
                    FailureKind.TIMEOUT,
                    retryable=True,
                ) from None
            except RpcError as exc:
                raise self._rpc_failure(exc) from None
            finally:
                await self._close(conn)

    def _input(self) -> list[dict[str, str]]:
        """The prompt, then the run's image attachments (on its first turn only) as `localImage`."""
        items = [{"type": "text", "text": self.prompt}]
        items += [{"type": "localImage", "path": path} for path in self.run.images]
        self.run.images = []
        return items

    async def _open_thread(self, conn: RpcConnection) -> str:
        run = self.run
        params = invocation.thread_params(self.config, self.workspace)
        if run.thread_id:
            try:
                resumed = await conn.request("thread/resume", {"threadId": run.thread_id, **params})
                return _thread_id(resumed) or run.thread_id
            except RpcError as exc:
                log.warning("codex.resume_rejected", thread_id=run.thread_id, code=exc.code)
                await run.ctx.log(
                    run.redactor(
                        f"Codex could not resume thread {run.thread_id} ({exc.message[:200]}); starting a new one"
                    ),
                    "warning",
                )
        try:
            started = await conn.request("thread/start", params)
        except RpcError as exc:
            raise _failed(
                "thread_start_failed",
                run.redactor(f"Codex could not start a thread: {exc.message}")[:1000],
                FailureKind.API_ERROR,
                rpc_code=exc.code,
            ) from None
        thread_id = _thread_id(started)
        if not thread_id:
            raise _failed(
                "thread_start_failed", "thread/start answered without a thread id", FailureKind.PROTOCOL_ERROR
            )
        return thread_id

    async def _await_bridge(self, conn: RpcConnection) -> AsyncIterator[result_pb2.RunResult]:
        """Handles notifications until the LangBot MCP server is no longer `starting` (module
        docstring); a Codex that reports no startup status is not waited for."""
        stream, ctx = self.stream, self.run.ctx
        while not conn.inbox.empty():  # what arrived while the thread opened (the status comes first)
            for result in self._handle(conn, conn.inbox.get_nowait()):
                yield result
        if self.run.bridge is None or stream.mcp_status.get(LANGBOT_SERVER) != "starting":
            return
        started = time.monotonic()
        end = min(started + MCP_READY_TIMEOUT, self.run.deadline())
        try:
            while stream.mcp_status.get(LANGBOT_SERVER) == "starting":
                for result in self._handle(conn, await _next(conn, end, ctx.cancelled)):
                    yield result
        except _Stop as stop:
            if stop.cancelled:
                raise self._cancelled() from None
        waited = time.monotonic() - started
        log.info(
            "codex.mcp_bridge_wait", status=stream.mcp_status.get(LANGBOT_SERVER), seconds=round(waited, 3)
        )
        if stream.mcp_status.get(LANGBOT_SERVER) == "starting":
            yield results.log(
                f"the LangBot MCP server was not ready after {waited:.1f} s; the turn starts without it",
                "warning",
            )

    def _cancelled(self) -> RunnerFailure:
        reason = self.run.ctx.cancel_reason or "the run was cancelled"
        return RunnerFailure(
            "cancelled",
            f"cancelled: {reason}",
            kind=FailureKind.CANCELLED,
            details={"interrupted": self.stream.interrupted, "turn_id": self.stream.turn_id},
        )

    async def _drive(self, conn: RpcConnection, deadline: float) -> AsyncIterator[result_pb2.RunResult]:
        ctx, stream = self.run.ctx, self.stream
        while not stream.finished:
            try:
                incoming = await _next(conn, deadline, ctx.cancelled)
            except _Stop as stop:
                await self._interrupt(conn)
                if stop.cancelled:
                    raise self._cancelled() from None
                raise _failed(
                    "timeout",
                    f"Codex did not finish within {self.config.timeout:g} s",
                    FailureKind.TIMEOUT,
                    retryable=True,
                    interrupted=stream.interrupted,
                ) from None
            for result in self._handle(conn, incoming):
                yield result
            if stream.fatal is not None:  # no retry can help: stop now, not after Codex's reconnects
                run = self.run
                raise run.classify(stream.fatal, run.turn_failed(stream.fatal), stream.failure_info)

    def _handle(self, conn: RpcConnection, incoming: Incoming) -> list[result_pb2.RunResult]:
        if incoming is CLOSED:
            raise RpcClosed("the server exited during the turn")
        if incoming.is_request:
            task = asyncio.create_task(self.approvals.answer(conn, incoming), name=f"codex-{incoming.method}")
            self.handlers.add(task)
            task.add_done_callback(self.handlers.discard)
            return []
        if incoming.method in ("item/started", "item/completed"):
            item = incoming.params.get("item")
            if isinstance(item, dict):
                self.approvals.saw_item(item)
        # what Codex ran and saw can carry a secret (a command with a token, the output of `env`)
        return [self.run.redactor.result(r) for r in self.stream.notify(incoming.method, incoming.params)]

    async def _interrupt(self, conn: RpcConnection) -> None:
        """`turn/interrupt`, then the notifications until Codex confirms (at most `INTERRUPT_GRACE`)."""
        stream = self.stream
        if conn.closed or not stream.turn_id or stream.finished:
            return
        with contextlib.suppress(RpcError, RpcClosed, RpcTimeout):
            await conn.request(
                "turn/interrupt",
                {"threadId": stream.thread_id, "turnId": stream.turn_id},
                timeout=INTERRUPT_GRACE,
            )
        end = time.monotonic() + INTERRUPT_GRACE
        never = asyncio.Event()
        with contextlib.suppress(_Stop, RpcClosed):
            while not stream.finished:
                self._handle(conn, await _next(conn, end, never))

    async def _close(self, conn: RpcConnection) -> None:
        """Declines what is still open (each handler answers when cancelled), then closes."""
        for task in list(self.handlers):
            task.cancel()
        if self.handlers:
            await asyncio.gather(*self.handlers, return_exceptions=True)
        # the app-server exits when its stdin closes; the process group is stopped after that anyway
        await conn.close_input(grace=CLOSE_GRACE)
        await conn.close()

    async def _exited(self, proc: HarnessProcess, deadline: float) -> RunnerFailure:
        code = await wait_exit(proc, deadline=deadline, prefix="codex", label="Codex")
        stderr = proc.stderr_excerpt()
        message = f"Codex exited (status {code}) before the turn ended" + (f": {stderr}" if stderr else "")
        return self.run.classify(
            message, _failed("process_exited", message, FailureKind.PROCESS_FAILED, exit_code=code)
        )

    def _rpc_failure(self, exc: RpcError) -> RunnerFailure:
        message = self.run.redactor(f"Codex refused {exc.method}: {exc.message}")[:1000]
        if exc.code == _OVERLOADED:
            return _failed(
                "rate_limited", message, FailureKind.RATE_LIMITED, retryable=True, rpc_code=exc.code
            )
        return self.run.classify(
            message,
            _failed("rpc_error", message, FailureKind.PROTOCOL_ERROR, method=exc.method, rpc_code=exc.code),
        )
