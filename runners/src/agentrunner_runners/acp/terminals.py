"""The ACP client's `terminal/*` methods (config `client-terminal`), confined to the workspace.

A terminal is a command the agent asks the client to run: here a child process in its own process
group, started in the workspace (a `cwd` outside it is refused), with the harness toolkit's base
environment (never the runner's secrets) plus the variables the agent passes, stdout and stderr
together, the output kept to the agent's `outputByteLimit` (the oldest bytes dropped, cut at a
character boundary). `release` / `kill` / the end of the turn stop its whole group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

from acp import RequestError, schema

from agentrunner.harness import harness_env
from agentrunner_runners.acp.permissions import inside

DEFAULT_LIMIT = 1024 * 1024
MAX_TERMINALS = 16


class _Terminal:
    def __init__(self, proc: asyncio.subprocess.Process, limit: int) -> None:
        self.proc = proc
        self.limit = limit
        self.output = bytearray()
        self.truncated = False
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(65536):
            self.output += chunk
            over = len(self.output) - self.limit
            if over > 0:
                del self.output[:over]
                while self.output and (self.output[0] & 0xC0) == 0x80:  # a continuation byte
                    del self.output[0]
                self.truncated = True

    def status(self) -> schema.TerminalExitStatus | None:
        code = self.proc.returncode
        if code is None:
            return None
        if code < 0:
            return schema.TerminalExitStatus(exit_code=None, signal=signal.Signals(-code).name)
        return schema.TerminalExitStatus(exit_code=code, signal=None)

    def stop(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)


class Terminals:
    """One turn's terminals (module docstring)."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._terminals: dict[str, _Terminal] = {}
        self._count = 0

    def _get(self, terminal_id: str) -> _Terminal:
        terminal = self._terminals.get(terminal_id)
        if terminal is None:
            raise RequestError.invalid_params({"terminalId": terminal_id, "details": "no such terminal"})
        return terminal

    async def create(
        self,
        command: str,
        args: list[str] | None = None,
        env: list[schema.EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
    ) -> schema.CreateTerminalResponse:
        cwd = cwd or str(self.workspace)
        if not inside(self.workspace, cwd):
            raise RequestError.invalid_params({"cwd": cwd, "details": "terminals run inside the workspace"})
        if len(self._terminals) >= MAX_TERMINALS:
            raise RequestError.invalid_request({"details": f"at most {MAX_TERMINALS} open terminals"})
        variables = harness_env({v.name: v.value for v in env or []})
        limit = output_byte_limit or DEFAULT_LIMIT
        try:
            proc = await asyncio.create_subprocess_exec(
                command,
                *(args or []),
                cwd=str(self.workspace / cwd),
                env=variables,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise RequestError.internal_error({"details": f"cannot start {command!r}: {exc}"}) from None
        self._count += 1
        terminal_id = f"term-{self._count}"
        self._terminals[terminal_id] = _Terminal(proc, limit)
        return schema.CreateTerminalResponse(terminal_id=terminal_id)

    async def output(self, terminal_id: str) -> schema.TerminalOutputResponse:
        terminal = self._get(terminal_id)
        if terminal.proc.returncode is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(terminal.reader), 1.0)
        return schema.TerminalOutputResponse(
            output=terminal.output.decode("utf-8", errors="replace"),
            truncated=terminal.truncated,
            exit_status=terminal.status(),
        )

    async def wait(self, terminal_id: str) -> schema.WaitForTerminalExitResponse:
        terminal = self._get(terminal_id)
        await terminal.proc.wait()
        status = terminal.status()
        assert status is not None
        return schema.WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill(self, terminal_id: str) -> schema.KillTerminalResponse:
        self._get(terminal_id).stop()
        return schema.KillTerminalResponse()

    async def release(self, terminal_id: str) -> schema.ReleaseTerminalResponse:
        terminal = self._terminals.pop(terminal_id, None)
        if terminal is not None:
            terminal.stop()
            terminal.reader.cancel()
        return schema.ReleaseTerminalResponse()

    async def close(self) -> None:
        """Stops every terminal of the turn."""
        for terminal_id in list(self._terminals):
            await self.release(terminal_id)
