"""The plugin runtime's stdio framing: one JSON object per line, large messages in fragments.

The public runtime (`langbot-plugin` 0.7.x, `rt -s`) reads and writes one JSON object per line. A message
whose UTF-8 form is over 16 KiB travels as `{"type":"chunk_start","total_size":N}`, then
`{"type":"chunk_data","data":<text>,"offset":<bytes so far>}` lines of at most 16 KiB of text each, then
`{"type":"chunk_end"}`. Limits: 16 MiB per message, 4096 fragments. `encode` writes that form;
`FrameReader` reassembles it and checks every limit, so a runtime that breaks them ends the connection
with `FrameError` instead of growing a buffer without bound.
"""

from __future__ import annotations

import json
from typing import Any

CHUNK_BYTES = 16 * 1024
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MAX_FRAGMENTS = 4096
#: the longest line the runtime writes: a fragment of 16 KiB of text, JSON-escaped (up to 6 bytes a byte)
MAX_LINE_BYTES = 8 * CHUNK_BYTES + 1024


class FrameError(ValueError):
    """The peer broke the framing (oversized, out of order, undecodable): the connection is unusable."""


def _split_utf8(text: str, limit: int) -> list[str]:
    """`text` in pieces of at most `limit` UTF-8 bytes, never cutting a character."""
    pieces: list[str] = []
    start = 0
    size = 0
    for i, ch in enumerate(text):
        n = len(ch.encode("utf-8"))
        if size + n > limit:
            pieces.append(text[start:i])
            start, size = i, 0
        size += n
    pieces.append(text[start:])
    return pieces


def encode(message: dict[str, Any]) -> bytes:
    """The bytes to write for one message (one line, or the fragment lines of a large one)."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    raw = text.encode("utf-8")
    if len(raw) <= CHUNK_BYTES:
        return raw + b"\n"
    if len(raw) > MAX_MESSAGE_BYTES:
        raise FrameError(f"message of {len(raw)} bytes exceeds the runtime's {MAX_MESSAGE_BYTES} byte limit")
    pieces = _split_utf8(text, CHUNK_BYTES)
    if len(pieces) > MAX_FRAGMENTS:
        raise FrameError(f"message needs {len(pieces)} fragments, over the runtime's {MAX_FRAGMENTS}")
    lines = [json.dumps({"type": "chunk_start", "total_size": len(raw)})]
    offset = 0
    for piece in pieces:
        lines.append(json.dumps({"type": "chunk_data", "data": piece, "offset": offset}, ensure_ascii=False))
        offset += len(piece.encode("utf-8"))
    lines.append(json.dumps({"type": "chunk_end"}))
    return ("\n".join(lines) + "\n").encode("utf-8")


class FrameReader:
    """Turns lines into messages: `feed(line)` returns a complete message or None (a fragment, a blank or
    non-JSON line, which the runtime's own reader skips as well)."""

    def __init__(self) -> None:
        self._parts: list[str] | None = None
        self._total = 0
        self._size = 0
        self._count = 0

    def feed(self, line: bytes) -> dict[str, Any] | None:
        stripped = line.strip()
        if not stripped:
            return None
        try:
            value = json.loads(stripped)
        except (UnicodeDecodeError, json.JSONDecodeError):
            if self._parts is not None:
                raise FrameError("undecodable line inside a fragmented message") from None
            return None
        if not isinstance(value, dict):
            return None
        kind = value.get("type") if isinstance(value.get("type"), str) else None
        if kind == "chunk_start":
            self._start(value)
            return None
        if kind == "chunk_data":
            self._data(value)
            return None
        if kind == "chunk_end":
            return self._end()
        if self._parts is not None:
            raise FrameError("a whole message arrived inside a fragmented one")
        return value

    def _start(self, value: dict[str, Any]) -> None:
        total = value.get("total_size")
        if not isinstance(total, int) or isinstance(total, bool) or not 0 <= total <= MAX_MESSAGE_BYTES:
            raise FrameError(f"fragmented message of invalid size {total!r}")
        self._parts, self._total, self._size, self._count = [], total, 0, 0
        return None

    def _data(self, value: dict[str, Any]) -> None:
        if self._parts is None:
            raise FrameError("a fragment arrived outside a fragmented message")
        data = value.get("data")
        if not isinstance(data, str) or value.get("offset") != self._size:
            raise FrameError("fragment out of order")
        self._count += 1
        self._size += len(data.encode("utf-8"))
        if self._count > MAX_FRAGMENTS or self._size > self._total:
            raise FrameError("fragmented message exceeds its declared size or the fragment limit")
        self._parts.append(data)
        return None

    def _end(self) -> dict[str, Any]:
        if self._parts is None or self._size != self._total:
            raise FrameError("fragmented message ended incomplete")
        text = "".join(self._parts)
        self._parts = None
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise FrameError("reassembled message is not JSON") from None
        if not isinstance(value, dict):
            raise FrameError("reassembled message is not an object")
        return value
