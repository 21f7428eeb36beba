"""JSON-RPC 2.0 over a harness process's stdio, the way `codex app-server --listen stdio://` speaks it.

One JSON object per line in both directions (the `"jsonrpc": "2.0"` member is omitted on the wire, as
Codex does; a message carrying it is accepted too). `RpcConnection` owns the process's stdout: one
reader task sorts what arrives into

- responses to our requests (matched by `id` to the waiting `request` call, each bounded by a timeout);
- server-to-client requests (`method` + `id`) and notifications (`method` only), queued in `inbox` in
  arrival order for the turn that reads them; every server request must get exactly one answer
  (`respond` / `respond_error`);
- the end of stdout, after which pending requests fail with `RpcClosed` and `inbox` yields `CLOSED`.

Lines that are not JSON objects, and responses to ids nobody waits for, are logged and skipped.
"""

# ruff: noqa: ASYNC109 - a per-call `timeout` bounds one request / one question, not the caller's scope.
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from typing import Any, Final

import structlog

from agentrunner.harness import HarnessProcess
from agentrunner.harness.turns import parse_json_record

log = structlog.get_logger("agentrunner_runners.codex.jsonrpc")

METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602


class RpcError(Exception):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{method}: {message} (JSON-RPC error {code})")
        self.method, self.code, self.message, self.data = method, code, message, data


class RpcClosed(Exception):
    """The server closed its stdout (it exited) before answering."""


class RpcTimeout(Exception):
    """The server did not answer a request in time."""

    def __init__(self, method: str, timeout: float) -> None:
        super().__init__(f"{method}: no answer within {timeout:g} s")
        self.method = method


@dataclasses.dataclass(frozen=True, slots=True)
class Incoming:
    """A notification (`id` None) or a server-to-client request."""

    method: str
    params: dict[str, Any]
    id: int | str | None = None

    @property
    def is_request(self) -> bool:
        return self.id is not None


#: what `inbox` yields once the server's stdout ended
CLOSED: Final = Incoming("", {})


class RpcConnection:
    """A JSON-RPC client over `proc`'s stdin/stdout (module docstring); `start()` then `request` etc."""

    def __init__(self, proc: HarnessProcess, *, timeout: float = 30.0) -> None:
        self.proc = proc
        self.timeout = timeout
        self.inbox: asyncio.Queue[Incoming] = asyncio.Queue()
        self.closed = False
        self._next_id = 0
        self._pending: dict[int, tuple[str, asyncio.Future[dict[str, Any]]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self.answered: set[int | str] = set()

    def start(self) -> RpcConnection:
        self._reader = asyncio.create_task(self._read(), name="codex-jsonrpc-reader")
        return self

    async def close(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._fail_pending()

    async def close_input(self, *, grace: float) -> None:
        """Closes the server's stdin (its signal to exit) and gives it `grace` seconds to do so."""
        stdin = self.proc.proc.stdin if self.proc.proc is not None else None
        if stdin is None or stdin.is_closing():
            return
        async with self._write_lock:
            stdin.close()
        with contextlib.suppress(TimeoutError, BrokenPipeError, ConnectionResetError):
            async with asyncio.timeout(grace):
                await self.proc.wait()

    # -- sending --------------------------------------------------------------------------------------

    async def _send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        async with self._write_lock:
            try:
                await self.proc.write(line.encode())
            except (BrokenPipeError, ConnectionResetError, RuntimeError) as exc:
                raise RpcClosed(f"cannot write to the server: {exc}") from None

    async def request(
        self, method: str, params: dict[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Sends a request and waits for its result (`RpcError`, `RpcClosed`, `RpcTimeout` otherwise)."""
        if self.closed:
            raise RpcClosed(f"{method}: the server has exited")
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (method, future)
        limit = self.timeout if timeout is None else timeout
        try:
            await self._send({"id": request_id, "method": method, "params": params})
            async with asyncio.timeout(limit):
                return await future
        except TimeoutError:
            raise RpcTimeout(method, limit) from None
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    async def respond(self, request_id: int | str, result: dict[str, Any]) -> None:
        """Answers a server request once; a second answer for the same id is a bug and is not sent."""
        if self._answer(request_id):
            await self._send({"id": request_id, "result": result})

    async def respond_error(self, request_id: int | str, code: int, message: str) -> None:
        if self._answer(request_id):
            await self._send({"id": request_id, "error": {"code": code, "message": message}})

    def _answer(self, request_id: int | str) -> bool:
        if request_id in self.answered:
            log.error("codex.jsonrpc.double_answer", request_id=str(request_id))
            return False
        self.answered.add(request_id)
        return not self.closed

    # -- receiving ------------------------------------------------------------------------------------

    async def _read(self) -> None:
        try:
            while (record := await self.proc.next_record()) is not None:
                message = parse_json_record(record, event="codex.jsonrpc")
                if message is not None:
                    self._dispatch(message)
        except Exception as exc:  # a broken pipe: same as the end of stdout
            log.info("codex.jsonrpc.read_failed", error=type(exc).__name__)
        finally:
            self.closed = True
            self._fail_pending()
            self.inbox.put_nowait(CLOSED)

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if isinstance(method, str) and method:
            request_id = message.get("id")
            if isinstance(request_id, bool) or not isinstance(request_id, int | str):
                request_id = None
            self.inbox.put_nowait(Incoming(method, params, request_id))
            return
        request_id = message.get("id")
        waiting = self._pending.get(request_id) if isinstance(request_id, int) else None
        if waiting is None:
            log.warning("codex.jsonrpc.unmatched_response", request_id=str(request_id)[:40])
            return
        name, future = waiting
        if future.done():
            return
        error = message.get("error")
        if isinstance(error, dict):
            code = error.get("code")
            future.set_exception(
                RpcError(
                    name,
                    code if isinstance(code, int) else -32603,
                    str(error.get("message") or "error"),
                    error.get("data"),
                )
            )
        else:
            result = message.get("result")
            future.set_result(result if isinstance(result, dict) else {})

    def _fail_pending(self) -> None:
        for name, future in list(self._pending.values()):
            if not future.done():
                future.set_exception(RpcClosed(f"{name}: the server exited before answering"))
