"""The ACP connection's transport: JSON-RPC messages over a `HarnessProcess`'s stdio.

The `agent-client-protocol` library speaks JSON-RPC over any object with `send` / `receive` / `close`
(its message-level transport seam). This one reads the agent's stdout through the harness toolkit
(records split on `\\n` only, up to 16 MiB, so a U+2028 inside a JSON string or a large tool result
never breaks a message; a chunk that ends inside a UTF-8 sequence waits for the rest) and writes to
its stdin; the process itself (process group, environment, stderr) stays the toolkit's.

A line that is not a JSON object is skipped with a warning (an agent that prints a banner on stdout).
Over ssh the runner's remote script prints one `{"agentrunner_remote_cwd": ...}` line before it starts
the agent: it is taken out of the stream (`remote_cwd`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog

from agentrunner.harness import HarnessProcess
from agentrunner.harness.turns import parse_json_record

log = structlog.get_logger("agentrunner_runners.acp")

REMOTE_CWD = "agentrunner_remote_cwd"


class ProcessTransport:
    """`send` / `receive` / `close` over one agent process (module docstring)."""

    def __init__(self, proc: HarnessProcess) -> None:
        self.proc = proc
        self.closed = False
        self.remote_cwd: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        #: every message the agent sent, in order (tests and diagnostics count on it)
        self.received = 0
        self._write = asyncio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        if self.closed:
            raise ConnectionError("the agent's stdin is closed")
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        async with self._write:
            try:
                await self.proc.write(data)
            except (BrokenPipeError, ConnectionResetError, RuntimeError) as exc:
                raise ConnectionError(f"the agent closed its stdin: {exc}") from None

    async def receive(self) -> dict[str, Any] | None:
        while True:
            record = await self.proc.next_record()
            if record is None:
                if not self.remote_cwd.done():
                    self.remote_cwd.set_result("")
                return None
            message = parse_json_record(record, event="acp")
            if message is None:
                continue
            if REMOTE_CWD in message and "jsonrpc" not in message:
                if not self.remote_cwd.done():
                    self.remote_cwd.set_result(str(message[REMOTE_CWD]))
                continue
            self.received += 1
            return message

    async def close(self) -> None:
        """Closes the agent's stdin (an ACP agent's cue to exit); the process group is stopped after."""
        if self.closed:
            return
        self.closed = True
        stdin = self.proc.proc.stdin if self.proc.proc is not None else None
        if stdin is not None and not stdin.is_closing():
            stdin.close()
