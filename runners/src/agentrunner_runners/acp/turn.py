"""One ACP turn: an agent process, `initialize`, the session, `session/prompt`, the updates until the
answer (README "What one turn does").

    initialize → session/resume | session/load | session/new → [session/set_mode] → session/prompt
      → session/update … → the prompt's answer (stopReason, usage)

The session id is stored (`state.updated`) as soon as the session is open, before any output. Every
request before the prompt is bounded by `rpc-timeout` (an agent that never answers `initialize` is
`acp.rpc_timeout`); the prompt by the run's budget. A cancel (or the deadline) sends `session/cancel`
at once and waits up to `CANCEL_GRACE` for the agent's `cancelled`; then the process group is stopped.
An agent that exits mid-turn is `acp.process_exited` with its stderr's end; its stderr never reaches
the answer, only the run log (redacted).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

import acp
import structlog
from acp import RequestError, schema

from agentrunner import results
from agentrunner.failures import FailureKind, RunnerFailure
from agentrunner.harness import HarnessProcess
from agentrunner.harness.asking import confirm
from agentrunner.harness.turns import wait_exit
from agentrunner.v1 import result_pb2
from agentrunner_runners.acp import remote, session
from agentrunner_runners.acp.client import AcpClient
from agentrunner_runners.acp.failures import classify, failed
from agentrunner_runners.acp.permissions import Permissions
from agentrunner_runners.acp.prompt import prompt_blocks
from agentrunner_runners.acp.transport import ProcessTransport
from agentrunner_runners.acp.updates import TurnStream

if TYPE_CHECKING:
    from agentrunner_runners.acp.runner import AcpRun

log = structlog.get_logger("agentrunner_runners.acp")

try:
    _VERSION = importlib.metadata.version("langbot-agentrunner-runners")
except importlib.metadata.PackageNotFoundError:  # a source checkout without metadata
    _VERSION = "0"
CLIENT_INFO = schema.Implementation(name="langbot-acp-runner", title="LangBot", version=_VERSION)
#: how long the agent gets to answer `session/cancel` with `cancelled` before its group is stopped
CANCEL_GRACE = 3.0
#: how long the agent gets to exit after its stdin closes
CLOSE_GRACE = 2.0
T = TypeVar("T")


class _Stop(Exception):
    def __init__(self, cancelled: bool) -> None:
        self.cancelled = cancelled


class AcpTurn:
    """One turn of a run (module docstring); `results()` yields its results, the last one terminal
    (or raises `RunnerFailure`)."""

    def __init__(self, run: AcpRun, prompt: str, attachments: list[dict[str, Any]]) -> None:
        self.run, self.prompt, self.attachments = run, prompt, attachments
        self.config = run.config
        self.ctx = run.ctx
        self.stream = TurnStream(run.redactor)
        policy = self.config.permissions
        self.ask_refused = policy == "ask" and not self.ctx.context.available_apis.steering_pull
        if self.ask_refused:  # the answer reaches an open run only as steering input: nobody could answer
            policy = "workspace"
        ask = self._ask if policy == "ask" else None
        workspace = run.workspace.directory if run.workspace is not None else None
        tools = run.bridge.tool_names if run.bridge is not None else []
        self.permissions = Permissions(policy, workspace, tools, ask)
        self.client = AcpClient(
            self.stream,
            self.permissions,
            workspace=run.workspace,
            fs=self.config.client_fs,
            terminal=self.config.client_terminal,
            redactor=run.redactor,
        )
        self.session_id = ""
        self.init: schema.InitializeResponse | None = None
        self.proc: HarnessProcess | None = None
        self.response: schema.PromptResponse | None = None
        self.stopped_with = ""

    async def _ask(self, title: str, description: str) -> bool | None:
        answer = await confirm(
            self.ctx, title, description=self.run.redactor(description), timeout=self.config.approval_timeout
        )
        if answer is None:
            await self.ctx.log(
                f"{title}: nobody answered within {self.config.approval_timeout:g} s; rejected", "warning"
            )
        return answer

    # -- the turn -------------------------------------------------------------------------------------

    async def results(self) -> AsyncIterator[result_pb2.RunResult]:
        run = self.run
        async with HarnessProcess(run.spec(), redactor=run.redactor, prefix="acp") as proc:
            self.proc = proc
            if run.remote:
                await proc.write(remote.bundle(run.remote_env()))
            transport = ProcessTransport(proc)
            conn = acp.connect_to_agent(self.client, transport)
            try:
                async for result in self._converse(conn, transport):
                    yield result
            except RunnerFailure:
                for result in self.stream.abandon():
                    yield run.redactor.result(result)
                raise
            finally:
                self.client.cancelled.set()  # a request still open is answered `cancelled`
                await self.client.close()
                await transport.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), CLOSE_GRACE)
                await conn.close()
            if text := proc.stderr_excerpt():
                yield results.log(f"{run.label} stderr: {text}", "debug")

    async def _converse(
        self, conn: acp.ClientSideConnection, transport: ProcessTransport
    ) -> AsyncIterator[result_pb2.RunResult]:
        run, config = self.run, self.config
        if self.ask_refused:
            yield results.log(
                "permissions: ask needs steering (the answer comes back into the open run); "
                "this run answers by the workspace policy",
                "warning",
            )
        self.init = init = await self._rpc(
            "initialize",
            conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION,
                client_capabilities=self.client.capabilities(),
                client_info=CLIENT_INFO,
            ),
        )
        yield results.log(self._describe(init))
        cwd = str(run.workspace.directory) if run.workspace is not None else ""
        if run.remote:
            cwd = await self._rpc("the remote workspace", asyncio.shield(transport.remote_cwd))
        servers, warnings = session.mcp_servers(
            config, run.bridge, init.agent_capabilities.mcp_capabilities if init.agent_capabilities else None
        )
        for warning in warnings:
            yield results.log(warning, "warning")
        async for result in self._open(conn, cwd, servers):
            yield result
        async for result in self._drive(conn):
            yield result

    def _describe(self, init: schema.InitializeResponse) -> str:
        info = init.agent_info
        caps = init.agent_capabilities or schema.AgentCapabilities()
        prompt = caps.prompt_capabilities or schema.PromptCapabilities()
        name = f"{info.name} {info.version}" if info is not None else "an unnamed agent"
        return (
            f"ACP agent {name} (protocol {init.protocol_version}): loadSession={bool(caps.load_session)} "
            f"resume={session.resume_method(caps) == 'resume'} image={bool(prompt.image)} "
            f"audio={bool(prompt.audio)} embeddedContext={bool(prompt.embedded_context)}"
        )

    async def _open(
        self, conn: acp.ClientSideConnection, cwd: str, servers: list[session.McpServer]
    ) -> AsyncIterator[result_pb2.RunResult]:
        run = self.run
        assert self.init is not None
        stored = run.session_id
        method = session.resume_method(self.init.agent_capabilities) if stored else ""
        opened: Any = None
        if method:
            try:
                self.client.replaying = method == "load"
                call = conn.resume_session if method == "resume" else conn.load_session
                opened = await self._rpc(
                    f"session/{method}", call(cwd=cwd, session_id=stored, mcp_servers=servers)
                )
                self.session_id = stored
            except RequestError as exc:
                message = run.redactor(session.rejected_message(method, stored, exc))
                log.warning("acp.resume_rejected", session_id=stored, code=exc.code)
                yield results.log(message, "warning")
            finally:
                self.client.replaying = False
        elif stored:
            yield results.log(f"{run.label} cannot resume a session; starting a new one", "warning")
        if not self.session_id:
            opened = await self._rpc("session/new", conn.new_session(cwd=cwd, mcp_servers=servers))
            self.session_id = opened.session_id
        self.client.session_id = self.session_id
        if self.session_id != stored:
            run.session_id = self.session_id
            if self.config.reuse_session:
                yield results.state("conversation", run.session_key, self.session_id)
        async for result in self._mode(conn, session.modes_of(opened)):
            yield result

    async def _mode(
        self, conn: acp.ClientSideConnection, modes: schema.SessionModeState | None
    ) -> AsyncIterator[result_pb2.RunResult]:
        wanted = self.config.mode
        warning = session.mode_warning(wanted, modes)
        if warning:
            yield results.log(warning, "warning")
            return
        if wanted and modes is not None and modes.current_mode_id != wanted:
            await self._rpc(
                "session/set_mode", conn.set_session_mode(session_id=self.session_id, mode_id=wanted)
            )

    # -- the prompt -----------------------------------------------------------------------------------

    async def _drive(self, conn: acp.ClientSideConnection) -> AsyncIterator[result_pb2.RunResult]:
        assert self.init is not None
        caps = self.init.agent_capabilities.prompt_capabilities if self.init.agent_capabilities else None
        blocks, notes = prompt_blocks(self.prompt, self.attachments, caps, self.run.workspace)
        for note in notes:
            yield results.log(f"attachment not sent inline: {note}", "warning")
        self.attachments = []
        task = asyncio.ensure_future(conn.prompt(session_id=self.session_id, prompt=blocks))
        try:
            async for result in self._pump(task):
                yield result
        except _Stop as stop:
            await self._cancel(conn, task)
            raise self._stopped(stop.cancelled) from None
        finally:
            if not task.done():
                task.cancel()
        for result in self._drain():
            yield result
        try:
            response: schema.PromptResponse = task.result()
        except RequestError as exc:
            raise self._refused(exc) from None
        except ConnectionError:
            raise await self._exited() from None
        self.response = response

    async def _pump(self, task: asyncio.Future[Any]) -> AsyncIterator[result_pb2.RunResult]:
        """The queued results until the prompt is answered; `_Stop` on a cancel or the deadline."""
        queue, deadline = self.client.queue, self.run.deadline()
        watcher = asyncio.ensure_future(self.ctx.cancelled.wait())
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait(
                    {getter, task, watcher},
                    timeout=max(deadline - time.monotonic(), 0.0),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if getter in done:
                    yield getter.result()
                    continue
                getter.cancel()
                if task in done:
                    return
                raise _Stop(cancelled=watcher in done)
        finally:
            watcher.cancel()

    def _drain(self) -> list[result_pb2.RunResult]:
        out = []
        while not self.client.queue.empty():
            out.append(self.client.queue.get_nowait())
        return out

    async def _cancel(self, conn: acp.ClientSideConnection, task: asyncio.Future[Any]) -> None:
        """`session/cancel` at once; the agent's answer (`cancelled`) awaited up to `CANCEL_GRACE`."""
        self.client.cancelled.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.cancel(session_id=self.session_id), 1.0)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(task), CANCEL_GRACE)
        self.stopped_with = (
            task.result().stop_reason
            if task.done() and not task.cancelled() and task.exception() is None
            else ""
        )

    def _stopped(self, cancelled: bool) -> RunnerFailure:
        confirmed = self.stopped_with == "cancelled"
        if cancelled:
            reason = self.ctx.cancel_reason or "the run was cancelled"
            return RunnerFailure(
                "cancelled",
                f"cancelled: {reason}",
                kind=FailureKind.CANCELLED,
                details={"agent_confirmed": confirmed, "session_id": self.session_id},
            )
        return failed(
            "timeout",
            f"{self.run.label} did not finish within {self.config.timeout:g} s",
            FailureKind.TIMEOUT,
            retryable=True,
            agent_confirmed=confirmed,
        )

    # -- failures -------------------------------------------------------------------------------------

    async def _rpc(self, method: str, call: Awaitable[T]) -> T:
        """A request before the prompt, bounded by `rpc-timeout`, a cancel and the agent's exit."""
        task = asyncio.ensure_future(call)
        watcher = asyncio.ensure_future(self.ctx.cancelled.wait())
        timeout = min(self.config.rpc_timeout, max(self.run.deadline() - time.monotonic(), 0.0))
        try:
            done, _ = await asyncio.wait(
                {task, watcher}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()
        if task in done:
            try:
                return task.result()
            except ConnectionError:
                raise await self._exited() from None
            except RequestError as exc:
                if method in ("session/resume", "session/load"):
                    raise
                raise self._refused(exc, method) from None
        if watcher in done:
            raise self._stopped(cancelled=True)
        raise failed(
            "rpc_timeout",
            f"{self.run.label} did not answer {method} within {timeout:g} s",
            FailureKind.TIMEOUT,
            retryable=True,
            method=method,
        )

    def _refused(self, exc: RequestError, method: str = "session/prompt") -> RunnerFailure:
        detail = exc.data.get("details") if isinstance(exc.data, dict) else None
        text = self.run.redactor(f"{exc!s}: {detail}" if detail else str(exc))[:1000]
        message = f"{self.run.label} refused {method}: {text}"
        default = failed("rpc_error", message, FailureKind.PROTOCOL_ERROR, method=method, rpc_code=exc.code)
        return classify(message, default, code=exc.code)

    async def _exited(self) -> RunnerFailure:
        assert self.proc is not None
        code = await wait_exit(self.proc, deadline=time.monotonic() + 5, prefix="acp", label=self.run.label)
        stderr = self.proc.stderr_excerpt()
        message = f"{self.run.label} exited (status {code}) before the turn ended" + (
            f": {stderr}" if stderr else ""
        )
        return classify(
            message, failed("process_exited", message, FailureKind.PROCESS_FAILED, exit_code=code)
        )
