"""The ACP client side of one turn: what the runner answers when the agent calls it.

- `session/update`: fed to the turn's `TurnStream` in arrival order (the handler never awaits before
  it queues, so the library's one-task-per-notification dispatch keeps the order); the results go to
  `queue`. While `replaying` (a `session/load` replays the whole history) updates are counted and
  dropped: that was earlier turns' output.
- `session/request_permission`: `Permissions` (the config's policy); once the run is cancelled every
  request, open or new, is answered `cancelled`, as ACP requires of a client.
- `fs/read_text_file`, `fs/write_text_file` (config `client-fs`): paths inside the workspace only,
  opened component by component without following a symlink out (`Workspace.open`); outside, or
  disabled, a JSON-RPC error.
- `terminal/*` (config `client-terminal`): `Terminals`, inside the workspace; disabled: a JSON-RPC error.
- elicitations are declined (nobody can fill a form inside a turn); other requests are "method not
  found", other notifications ignored.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import structlog
from acp import RequestError, schema

from agentrunner import results
from agentrunner.harness import PathEscape, Redactor, Workspace
from agentrunner.v1 import result_pb2
from agentrunner_runners.acp.permissions import Permissions, cancelled, tool_name
from agentrunner_runners.acp.terminals import Terminals
from agentrunner_runners.acp.updates import TurnStream

log = structlog.get_logger("agentrunner_runners.acp")

MAX_READ_BYTES = 10 * 1024 * 1024


class AcpClient:
    """The `acp.Client` of one turn (module docstring)."""

    def __init__(
        self,
        stream: TurnStream,
        permissions: Permissions,
        *,
        workspace: Workspace | None,
        fs: bool,
        terminal: bool,
        redactor: Redactor,
    ) -> None:
        self.stream = stream
        self.permissions = permissions
        self.workspace = workspace
        self.fs = fs and workspace is not None
        self.terminals = Terminals(workspace.directory) if terminal and workspace is not None else None
        self.redactor = redactor
        self.queue: asyncio.Queue[result_pb2.RunResult] = asyncio.Queue()
        self.session_id = ""
        self.replaying = False
        self.replayed = 0
        self.cancelled = asyncio.Event()

    # -- capabilities ---------------------------------------------------------------------------------

    def capabilities(self) -> schema.ClientCapabilities:
        """What the runner offers the agent (README "What one turn does")."""
        return schema.ClientCapabilities(
            fs=schema.FileSystemCapabilities(read_text_file=self.fs, write_text_file=self.fs),
            terminal=self.terminals is not None,
        )

    # -- notifications --------------------------------------------------------------------------------

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self.replaying:
            self.replayed += 1
            return
        if self.session_id and session_id != self.session_id:
            log.warning("acp.update_for_other_session", session_id=session_id)
            return
        for result in self.stream.feed(update):
            self.queue.put_nowait(self.redactor.result(result))

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        return None

    # -- permission -----------------------------------------------------------------------------------

    async def request_permission(
        self,
        session_id: str,
        tool_call: schema.ToolCallUpdate,
        options: list[schema.PermissionOption],
        **kw: Any,
    ) -> schema.RequestPermissionResponse:
        if self.cancelled.is_set():
            return cancelled()
        tool_call = self.stream.known(tool_call)
        decision = asyncio.ensure_future(self.permissions.answer(tool_call, options))
        stop = asyncio.ensure_future(self.cancelled.wait())
        try:
            await asyncio.wait({decision, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not decision.done():
                decision.cancel()
        name = tool_name(tool_call)
        if decision.done() and not decision.cancelled():
            answer = decision.result()
            chosen = getattr(answer.outcome, "option_id", "cancelled")
            asked = json.dumps(
                tool_call.model_dump(mode="json", by_alias=True, exclude_none=True), default=str
            )
            self._log(
                f"permission for {name} ({tool_call.kind or 'other'}): {chosen}; asked: {asked[:600]}", "info"
            )
            return answer
        self._log(f"permission for {name}: cancelled (the run was cancelled)", "info")
        return cancelled()

    def _log(self, text: str, level: str) -> None:
        self.queue.put_nowait(results.log(self.redactor(text), level))

    # -- files ----------------------------------------------------------------------------------------

    def _relative(self, path: str) -> str:
        if not self.fs or self.workspace is None:
            raise RequestError.method_not_found("fs (the runner does not offer file access)")
        root = Path(os.path.realpath(self.workspace.directory))
        target = Path(os.path.normpath(root / path))
        if target != root and root not in target.parents:
            raise RequestError.invalid_params({"path": path, "details": "outside the workspace"})
        return str(target.relative_to(root))

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kw: Any
    ) -> schema.ReadTextFileResponse:
        relative = self._relative(path)
        assert self.workspace is not None
        try:
            fd = self.workspace.open(relative)
            with os.fdopen(fd, "rb") as handle:
                data = handle.read(MAX_READ_BYTES + 1)
        except PathEscape:
            raise RequestError.invalid_params({"path": path, "details": "outside the workspace"}) from None
        except FileNotFoundError:
            raise RequestError.resource_not_found(path) from None
        except OSError as exc:
            raise RequestError.internal_error({"path": path, "details": exc.strerror or str(exc)}) from None
        if len(data) > MAX_READ_BYTES:
            raise RequestError.invalid_params({"path": path, "details": "over the 10 MiB read cap"})
        text = data.decode("utf-8", errors="replace")
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            text = "".join(lines[start : start + limit] if limit is not None else lines[start:])
        return schema.ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kw: Any
    ) -> schema.WriteTextFileResponse:
        relative = self._relative(path)
        assert self.workspace is not None
        try:
            self.workspace.path(relative).parent.mkdir(parents=True, exist_ok=True)
            self.workspace.write_text(relative, content)
        except PathEscape:
            raise RequestError.invalid_params({"path": path, "details": "outside the workspace"}) from None
        except OSError as exc:
            raise RequestError.internal_error({"path": path, "details": exc.strerror or str(exc)}) from None
        return schema.WriteTextFileResponse()

    # -- terminals ------------------------------------------------------------------------------------

    def _terminals(self) -> Terminals:
        if self.terminals is None:
            raise RequestError.method_not_found("terminal (the runner does not offer terminals)")
        return self.terminals

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[schema.EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kw: Any,
    ) -> schema.CreateTerminalResponse:
        return await self._terminals().create(command, args, env, cwd, output_byte_limit)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kw: Any
    ) -> schema.TerminalOutputResponse:
        return await self._terminals().output(terminal_id)

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kw: Any
    ) -> schema.WaitForTerminalExitResponse:
        return await self._terminals().wait(terminal_id)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kw: Any
    ) -> schema.KillTerminalResponse:
        return await self._terminals().kill(terminal_id)

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kw: Any
    ) -> schema.ReleaseTerminalResponse:
        return await self._terminals().release(terminal_id)

    # -- the rest -------------------------------------------------------------------------------------

    async def create_elicitation(
        self, message: str, mode: Any, **kw: Any
    ) -> schema.DeclineElicitationResponse:
        return schema.DeclineElicitationResponse(action="decline")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    def on_connect(self, conn: Any) -> None:
        return None

    async def close(self) -> None:
        if self.terminals is not None:
            await self.terminals.close()
