"""One control connection to the plugin runtime, played from LangBot's side (the runtime's host).

Both sides send requests `{seq_id, action, data, context?, stream_flow_control?}` and answer with
`{seq_id, code, message, data, chunk_status, stream_index?}` (`code` 0 is success). What this module does:

- **Outbound calls** (`call`, `stream`): our requests carry the runtime's installation binding as their
  `context`. A streamed answer (`run_runner`) is read with the runtime's flow control: we ask for it
  (`stream_flow_control: 1`), check `stream_index` runs 1, 2, 3, ... and acknowledge every 4th frame
  with `__stream_ack` once the frame has been passed on, so a slow consumer (the host) slows the plugin
  instead of overflowing the runtime's 128-frame queue. Leaving a stream early sends `__cancel_action`.
- **Inbound requests** (the runtime forwarding a plugin's API call, plugin settings): each is served in
  its own task by the handler given to the peer; a handler answers a dict, an async iterator (sent as a
  stream, respecting the runtime's window of 8 unacknowledged frames when it asked for flow control)
  or raises `ReplyError`, which becomes the runtime's own error shape (`code: 1`, a message, and the
  structured error in `data.error`). Nothing inbound is left unanswered: any other exception is
  answered as an internal error, and `__cancel_action` from the runtime cancels the serving task.
- **End**: EOF or broken framing fails every pending call and stream with `PeerClosed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from agentrunner_runners.langbot_bridge.wire import FrameError, FrameReader, encode

log = structlog.get_logger("agentrunner_runners.langbot_bridge.peer")

#: frames the runtime may send before our acknowledgement (its `STREAM_WINDOW`); we ack every half window
STREAM_WINDOW = 8
ACK_EVERY = STREAM_WINDOW // 2
#: retries of an acknowledgement or cancellation the runtime refused as busy (its 4 reserved slots)
_CONTROL_RETRIES = 50
_CONTROL_RETRY_SECONDS = 0.02

Handler = Callable[
    [str, dict[str, Any], dict[str, Any] | None], Awaitable["dict[str, Any] | AsyncIterator[dict[str, Any]]"]
]


class PeerClosed(ConnectionError):
    """The runtime's connection ended (its process exited, or it broke the framing)."""


class ActionError(Exception):
    """The runtime answered one of our requests with an error (`code` != 0)."""

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data or {}

    @property
    def busy(self) -> bool:
        """The runtime refused it for lack of capacity (its 128 concurrent actions), not for its content."""
        return "is busy" in self.message and "concurrent actions" in self.message


class ReplyError(Exception):
    """Raised by a handler: answered as the runtime's error shape, `data.error` = the structured error."""

    def __init__(self, message: str, error: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.error = error


@dataclass
class _Sender:
    """Flow-control state of one stream we send (the runtime acknowledges with `__stream_ack`)."""

    sent: int = 0
    acked: int = 0
    ready: asyncio.Event = field(default_factory=asyncio.Event)


class RuntimePeer:
    """The connection over the runtime's stdin/stdout. `run()` reads until the connection ends."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handler: Handler,
        *,
        binding: dict[str, Any],
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._handler = handler
        self.binding = binding
        self._seq = itertools.count(1)
        self._write_lock = asyncio.Lock()
        self._calls: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._streams: dict[int, asyncio.Queue[dict[str, Any] | BaseException]] = {}
        self._serving: dict[int, asyncio.Task[None]] = {}
        self._senders: dict[int, _Sender] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.closed = asyncio.Event()

    # -- reading ----------------------------------------------------------------------------------
    async def run(self) -> None:
        frames = FrameReader()
        try:
            while True:
                line = await self._reader.readline()
                if not line:
                    break
                message = frames.feed(line)
                if message is not None:
                    self._dispatch(message)
        except (FrameError, ValueError, ConnectionError) as exc:
            log.error("langbot.runtime_framing", error=str(exc)[:300])
        finally:
            self._close()

    def _dispatch(self, message: dict[str, Any]) -> None:
        seq = message.get("seq_id")
        if not isinstance(seq, int) or isinstance(seq, bool):
            log.warning("langbot.runtime_message_without_seq")
            return
        if "code" in message:
            self._on_response(seq, message)
        elif isinstance(message.get("action"), str):
            self._on_request(seq, message)

    def _on_response(self, seq: int, message: dict[str, Any]) -> None:
        future = self._calls.pop(seq, None)
        if future is not None:
            if not future.done():
                future.set_result(message)
            return
        queue = self._streams.get(seq)
        if queue is not None:
            queue.put_nowait(message)

    def _close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        error = PeerClosed("the plugin runtime's connection ended")
        for future in self._calls.values():
            if not future.done():
                future.set_exception(error)
        self._calls.clear()
        for queue in self._streams.values():
            queue.put_nowait(error)
        for task in self._serving.values():
            task.cancel()
        for sender in self._senders.values():
            sender.ready.set()

    # -- writing ----------------------------------------------------------------------------------
    async def _write(self, message: dict[str, Any]) -> None:
        if self.closed.is_set():
            raise PeerClosed("the plugin runtime's connection ended")
        data = encode(message)
        async with self._write_lock:
            try:
                self._writer.write(data)
                await self._writer.drain()
            except (ConnectionError, RuntimeError) as exc:
                self._close()
                raise PeerClosed(f"writing to the plugin runtime failed: {exc}") from None

    def _request(self, seq: int, action: str, data: dict[str, Any], scoped: bool) -> dict[str, Any]:
        request: dict[str, Any] = {"seq_id": seq, "action": action, "data": data}
        if scoped:
            request["context"] = self.binding
        return request

    # -- outbound ---------------------------------------------------------------------------------
    async def call(
        self, action: str, data: dict[str, Any], *, scoped: bool = True, within: float | None = 30.0
    ) -> dict[str, Any]:
        """One request and its answer's `data`; raises `ActionError` for an error answer."""
        seq = next(self._seq)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._calls[seq] = future
        try:
            await self._write(self._request(seq, action, data, scoped))
            async with asyncio.timeout(within):
                answer = await future
        finally:
            self._calls.pop(seq, None)
        if answer.get("code") != 0:
            raise ActionError(str(answer.get("message") or "the runtime refused the action"), _dict(answer))
        return _dict(answer)

    async def stream(
        self, action: str, data: dict[str, Any], *, scoped: bool = True
    ) -> AsyncGenerator[dict[str, Any], None]:
        """A flow-controlled streamed answer, frame by frame. Closing it early cancels the action."""
        seq = next(self._seq)
        queue: asyncio.Queue[dict[str, Any] | BaseException] = asyncio.Queue()
        self._streams[seq] = queue
        finished = False
        try:
            request = self._request(seq, action, data, scoped)
            request["stream_flow_control"] = 1
            await self._write(request)
            consumed = 0
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                if item.get("code") != 0:
                    finished = True
                    raise ActionError(
                        str(item.get("message") or "the runtime failed the action"), _dict(item)
                    )
                if item.get("chunk_status") == "end":
                    finished = True
                    return
                index = item.get("stream_index")
                if isinstance(index, int):
                    if index != consumed + 1:
                        raise ActionError(f"stream frame {index} arrived after {consumed}")
                    consumed = index
                yield _dict(item)
                if isinstance(index, int) and consumed % ACK_EVERY == 0:
                    await self._control("__stream_ack", {"seq_id": seq, "index": consumed})
        finally:
            self._streams.pop(seq, None)
            if not finished and not self.closed.is_set():
                self._spawn(self._control("__cancel_action", {"seq_id": seq}))

    async def _control(self, action: str, data: dict[str, Any]) -> None:
        """An acknowledgement or cancellation: retried while the runtime's reserved slots are busy."""
        for _ in range(_CONTROL_RETRIES):
            try:
                await self.call(action, data, within=10.0)
                return
            except ActionError as exc:
                if not exc.busy:
                    log.warning("langbot.runtime_control_refused", action=action, error=exc.message[:200])
                    return
            except (PeerClosed, TimeoutError):
                return
            await asyncio.sleep(_CONTROL_RETRY_SECONDS)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- inbound ----------------------------------------------------------------------------------
    def _on_request(self, seq: int, message: dict[str, Any]) -> None:
        action = str(message["action"])
        data = message.get("data") if isinstance(message.get("data"), dict) else {}
        assert isinstance(data, dict)
        if action == "__stream_ack":
            self._spawn(self._reply(seq, 0, {"accepted": self._on_ack(data)}))
        elif action == "__cancel_action":
            task = self._serving.get(_int(data.get("seq_id")))
            if task is not None:
                task.cancel()
            self._spawn(self._reply(seq, 0, {"cancelled": task is not None}))
        elif action == "__ping":
            self._spawn(self._reply(seq, 0, {"message": "pong"}))
        else:
            context = message.get("context") if isinstance(message.get("context"), dict) else None
            flow = message.get("stream_flow_control") == 1
            task = asyncio.ensure_future(self._serve(seq, action, data, context, flow))
            self._serving[seq] = task
            task.add_done_callback(functools.partial(self._served, seq))

    def _served(self, seq: int, _task: asyncio.Task[None]) -> None:
        self._serving.pop(seq, None)

    def _on_ack(self, data: dict[str, Any]) -> bool:
        sender = self._senders.get(_int(data.get("seq_id")))
        index = data.get("index")
        if sender is None or not isinstance(index, int) or not sender.acked <= index <= sender.sent:
            return False
        sender.acked = index
        sender.ready.set()
        return True

    async def _serve(
        self, seq: int, action: str, data: dict[str, Any], context: dict[str, Any] | None, flow: bool
    ) -> None:
        try:
            answer = await self._handler(action, data, context)
            if isinstance(answer, dict):
                await self._reply(seq, 0, answer)
            else:
                await self._send_stream(seq, answer, flow)
        except ReplyError as exc:
            await self._reply(seq, 1, {"error": exc.error} if exc.error else {}, exc.message)
        except asyncio.CancelledError:
            raise
        except PeerClosed:
            pass
        except Exception as exc:  # a bug of ours must still answer, never leave the plugin waiting
            log.exception("langbot.bridge_action_failed", action=action)
            await self._reply(seq, 1, {}, f"{type(exc).__name__}: the bridge failed to serve {action}")

    async def _send_stream(self, seq: int, items: AsyncIterator[dict[str, Any]], flow: bool) -> None:
        sender = _Sender()
        if flow:
            self._senders[seq] = sender
        try:
            while True:
                while flow and sender.sent - sender.acked >= STREAM_WINDOW:  # before asking for more
                    sender.ready.clear()
                    await sender.ready.wait()
                    if self.closed.is_set():
                        raise PeerClosed("the plugin runtime's connection ended")
                try:
                    item = await anext(items)
                except StopAsyncIteration:
                    break
                frame: dict[str, Any] = {
                    "seq_id": seq,
                    "code": 0,
                    "message": "success",
                    "data": item,
                    "chunk_status": "continue",
                }
                if flow:
                    sender.sent += 1
                    frame["stream_index"] = sender.sent
                await self._write(frame)
        finally:
            self._senders.pop(seq, None)
            closer = getattr(items, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()
        await self._write({"seq_id": seq, "code": 0, "message": "success", "data": {}, "chunk_status": "end"})

    async def _reply(self, seq: int, code: int, data: dict[str, Any], message: str = "success") -> None:
        with contextlib.suppress(PeerClosed):
            await self._write(
                {"seq_id": seq, "code": code, "message": message, "data": data, "chunk_status": "continue"}
            )

    async def aclose(self) -> None:
        """Stops serving: cancels inbound work and background acknowledgements."""
        self._close()
        tasks = [*self._serving.values(), *self._background]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _dict(message: dict[str, Any]) -> dict[str, Any]:
    data = message.get("data")
    return data if isinstance(data, dict) else {}
