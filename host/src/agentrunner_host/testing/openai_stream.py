"""The mock's streamed chat answer: `chat.completion.chunk` frames as the OpenAI API sends them, written
in pieces cut at awkward byte boundaries (inside `data:`, inside a JSON string, inside a multi-byte
UTF-8 character), because networks split writes too. It can also stop the way a broken connection
does: after `drop_after` content chunks the server raises `DropConnection`, and uvicorn closes the
socket without ending the chunked body."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from typing import Any


class DropConnection(Exception):
    """Raised inside a response body: the connection is cut mid-answer."""


class _QuietDrops(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], DropConnection))


logging.getLogger("uvicorn.error").addFilter(_QuietDrops())


@dataclasses.dataclass
class StreamRecord:
    """One streamed response as the server saw it: whether the client went away before the end."""

    request_index: int
    chunks_sent: int = 0
    completed: bool = False
    client_disconnected: bool = False
    closed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


def awkward_pieces(frame: bytes) -> list[bytes]:
    """`frame` cut after its first byte, inside `data:` (or a JSON key), in the middle of the payload
    and before its last byte (between an SSE frame's two newlines); when the frame has a multi-byte
    UTF-8 character, also between that character's bytes."""
    cuts = {1, 3, len(frame) // 2, len(frame) - 1}
    for i, byte in enumerate(frame):
        if byte >= 0xC0:  # the lead byte of a multi-byte character: cut after it
            cuts.add(i + 1)
            break
    points = sorted(c for c in cuts if 0 < c < len(frame))
    return [frame[a:b] for a, b in zip([0, *points], [*points, len(frame)], strict=True)]


def sse(obj: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


@dataclasses.dataclass
class StreamPlan:
    """What one streamed answer sends."""

    cid: str
    created: int
    model: str
    #: per choice index: its text pieces
    choices: list[list[str]]
    tool_calls: list[dict[str, Any]]
    finish: str
    usage: dict[str, Any] | None
    chunk_delay: float = 0.0
    #: cut the connection after this many content chunks (None: never)
    drop_after: int | None = None
    #: send an `error` event after this many content chunks (None: never)
    error_after: int | None = None

    def frame(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        obj = {"id": self.cid, "object": "chat.completion.chunk", "created": self.created,
               "model": self.model, "choices": choices, **extra}  # fmt: skip
        return sse(obj)

    def delta(self, index: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return self.frame([{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}])

    def _interleaved(self) -> list[tuple[int, str]]:
        """(choice index, piece) in send order: choices take turns; the last choice's pieces go first
        so that, with two choices, choice 1 finishes before choice 0."""
        order: list[tuple[int, str]] = []
        longest = max((len(c) for c in self.choices), default=0)
        for step in range(longest):
            for index in reversed(range(len(self.choices))):
                if step < len(self.choices[index]):
                    order.append((index, self.choices[index][step]))
        return order

    def _tool_frames(self) -> list[bytes]:
        frames = []
        for i, call in enumerate(self.tool_calls):
            args = call["arguments"]
            head = {"index": i, "id": call["id"], "type": "function",
                    "function": {"name": call["name"], "arguments": ""}}  # fmt: skip
            frames.append(self.delta(0, {"tool_calls": [head]}))
            frames.extend(
                self.delta(0, {"tool_calls": [{"index": i, "function": {"arguments": args[j : j + 5]}}]})
                for j in range(0, len(args), 5)
            )
        return frames

    async def body(self, record: StreamRecord) -> AsyncIterator[bytes]:
        try:
            for index in range(len(self.choices)):
                for piece in awkward_pieces(self.delta(index, {"role": "assistant", "content": ""})):
                    yield piece
            remaining = {i: len(c) for i, c in enumerate(self.choices)}
            for index, text in self._interleaved():
                if self.drop_after is not None and record.chunks_sent >= self.drop_after:
                    raise DropConnection()
                if self.error_after is not None and record.chunks_sent >= self.error_after:
                    yield sse({"error": {"message": "scripted mid-stream failure", "type": "server_error"}})
                    return
                if self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
                record.chunks_sent += 1
                for piece in awkward_pieces(self.delta(index, {"content": text})):
                    yield piece
                remaining[index] -= 1
                if remaining[index] == 0 and index > 0:
                    for piece in awkward_pieces(self.delta(index, {}, "stop")):
                        yield piece
            if self.drop_after is not None and record.chunks_sent >= self.drop_after:
                raise DropConnection()
            tail = [*self._tool_frames(), self.delta(0, {}, self.finish)]
            if self.usage is not None:
                tail.append(self.frame([], usage=self.usage))
            for frame in [*tail, b"data: [DONE]\n\n"]:
                for piece in awkward_pieces(frame):
                    yield piece
            record.completed = True
        finally:
            record.client_disconnected = not record.completed
            record.closed.set()
