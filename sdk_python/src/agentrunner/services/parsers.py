"""Incremental parsers for the body shapes external services stream (SSE is `httpx-sse`'s; see `http.py`).

Every parser takes bytes exactly as the network delivered them and is correct whatever the split: inside
a UTF-8 sequence, inside a `data:` prefix, inside a JSON value, between the two newlines of an event
terminator. Each has `feed(chunk) -> items` and `close() -> items` (the end of the body: an unfinished
value is an error there, never silently dropped).

- `JsonSequence`: JSON values one after another, separated by any whitespace or nothing at all
  (n8n's concatenated / newline-separated objects, a pretty-printed body, Langflow's blank-line
  separated events); optionally skips an SSE-style `data:` prefix in front of a value.
- `JsonLines`: newline-delimited JSON (one value per line, optional `data:` prefix); a line that is not
  JSON is an error or, with `skip_invalid`, skipped and counted.
- `ThinkSplitter`: splits `<think>…</think>` reasoning out of answer text as it streams.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

__all__ = [
    "BodyTooLarge",
    "InvalidJson",
    "JsonLines",
    "JsonSequence",
    "ThinkSplitter",
    "aiter_parsed",
    "partial_suffix",
]

#: Largest single JSON value / line a parser buffers (a service sending more is broken or hostile).
MAX_VALUE_BYTES = 16 << 20


class InvalidJson(ValueError):
    """The body holds something that is not JSON where JSON was expected (`excerpt` shows where)."""

    def __init__(self, message: str, excerpt: str = "") -> None:
        super().__init__(message)
        self.excerpt = excerpt[:200]


class BodyTooLarge(ValueError):
    """One value or line exceeds `MAX_VALUE_BYTES`."""


class _Utf8:
    """Bytes -> text across chunk boundaries (a split multi-byte sequence waits for its tail)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, chunk: bytes) -> str:
        return self._decoder.decode(chunk)

    def close(self) -> str:
        return self._decoder.decode(b"", final=True)


_WS = " \t\r\n"
_DATA = "data:"


class JsonSequence:
    """JSON values back to back (any whitespace, or none, between them), parsed as they complete.

    A scanner (string- and escape-aware) finds where each value ends, so every character is looked at
    once however the body is split. Bare top-level scalars (`42`, `true`) end at whitespace, at the
    start of the next value or at the end of the body. `data_prefix=True` skips a `data:` prefix in
    front of a value (bodies that mix SSE-style lines with plain JSON).
    """

    def __init__(self, *, data_prefix: bool = False, max_value: int = MAX_VALUE_BYTES) -> None:
        self._utf8 = _Utf8()
        self._data_prefix = data_prefix
        self._max = max_value
        self._buf: list[str] = []  # the value being scanned
        self._size = 0
        self._kind = ""  # "" between values, else "nested" (object, array, string) or "bare"
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._prefix = ""  # the part of a `data:` prefix seen so far
        self.values = 0

    def feed(self, chunk: bytes) -> list[Any]:
        """Takes the next chunk; returns the values it completed (a value split across chunks waits)."""
        return self._scan(self._utf8.feed(chunk))

    def close(self) -> list[Any]:
        """Ends the body; returns the last value, or raises `InvalidJson` when the body stops mid-value."""
        out = self._scan(self._utf8.close())
        if self._prefix:
            raise InvalidJson("the body ends inside a `data:` prefix", self._prefix)
        if self._kind == "bare":
            out.append(self._finish())
        elif self._kind:
            raise InvalidJson("the body ends inside a JSON value", "".join(self._buf)[-200:])
        return out

    def _scan(self, text: str) -> list[Any]:
        out: list[Any] = []
        i, n = 0, len(text)
        while i < n:
            if not self._kind:
                i = self._between(text, i, n)
                if i >= n:
                    break
                self._kind = "bare" if text[i] not in '{["' else "nested"
            start = i
            if self._kind == "bare":
                while i < n and text[i] not in _WS and text[i] not in '{["':
                    i += 1
                self._append(text[start:i])
                if i < n:
                    out.append(self._finish())
                continue
            done, i = self._nested(text, i, n)
            self._append(text[start:i])
            if done:
                out.append(self._finish())
        return out

    def _between(self, text: str, i: int, n: int) -> int:
        """Skips whitespace and `data:` prefixes; the index of the next value's first character."""
        while i < n:
            c = text[i]
            if self._prefix or (self._data_prefix and c == "d"):
                candidate = self._prefix + c
                if not _DATA.startswith(candidate):
                    raise InvalidJson("unexpected text between JSON values", candidate)
                self._prefix = "" if candidate == _DATA else candidate
                i += 1
            elif c in _WS:
                i += 1
            else:
                return i
        return i

    def _nested(self, text: str, i: int, n: int) -> tuple[bool, int]:
        """Scans an object, array or string; (complete?, index after the scanned part)."""
        depth, in_string, escape = self._depth, self._in_string, self._escape
        done = False
        while i < n:
            c = text[i]
            i += 1
            if in_string:
                if escape:
                    escape = False
                elif c == "\\":
                    escape = True
                elif c == '"':
                    in_string = False
                    done = depth == 0
            elif c == '"':
                in_string = True
            elif c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                done = depth <= 0
            if done:
                break
        self._depth, self._in_string, self._escape = (0, False, False) if done else (depth, in_string, escape)
        return done, i

    def _append(self, piece: str) -> None:
        if not piece:
            return
        self._size += len(piece)
        if self._size > self._max:
            raise BodyTooLarge(f"a JSON value is larger than {self._max} bytes")
        self._buf.append(piece)

    def _finish(self) -> Any:
        text = "".join(self._buf)
        self._buf, self._size, self._kind = [], 0, ""
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidJson(f"invalid JSON: {exc.msg}", text) from None
        self.values += 1
        return value


class JsonLines:
    """Newline-delimited JSON: one value per non-blank line, an optional `data:` prefix stripped."""

    def __init__(self, *, skip_invalid: bool = False, max_line: int = MAX_VALUE_BYTES) -> None:
        self._utf8 = _Utf8()
        self._partial: list[str] = []
        self._size = 0
        self._skip_invalid = skip_invalid
        self._max = max_line
        self.skipped = 0

    def feed(self, chunk: bytes) -> list[Any]:
        """Takes the next chunk; returns the values of the lines it completed."""
        return self._lines(self._utf8.feed(chunk))

    def close(self) -> list[Any]:
        """Ends the body; a last line without a newline still counts."""
        out = self._lines(self._utf8.close())
        if self._partial:
            out.extend(self._parse("".join(self._partial)))
            self._partial = []
        return out

    def _lines(self, text: str) -> list[Any]:
        out: list[Any] = []
        while text:
            cut = text.find("\n")
            if cut < 0:
                self._size += len(text)
                if self._size > self._max:
                    raise BodyTooLarge(f"a line is longer than {self._max} bytes")
                self._partial.append(text)
                break
            line = "".join(self._partial) + text[:cut]
            self._partial, self._size = [], 0
            text = text[cut + 1 :]
            out.extend(self._parse(line))
        return out

    def _parse(self, line: str) -> list[Any]:
        line = line.strip()
        if line.startswith(_DATA):
            line = line[len(_DATA) :].strip()
        if not line:
            return []
        try:
            return [json.loads(line)]
        except json.JSONDecodeError as exc:
            if self._skip_invalid:
                self.skipped += 1
                return []
            raise InvalidJson(f"invalid JSON line: {exc.msg}", line) from None


async def aiter_parsed(chunks: AsyncIterable[bytes], parser: JsonSequence | JsonLines) -> AsyncIterator[Any]:
    """The values of a byte stream, as each completes."""
    async for chunk in chunks:
        for value in parser.feed(chunk):
            yield value
    for value in parser.close():
        yield value


class ThinkSplitter:
    """Splits streamed text into answer and reasoning at `<think>` / `</think>` tags.

    `feed(text)` returns `(answer, reasoning)` increments; a tag split across chunks is held back until
    it is complete (at most `len("</think>") - 1` characters). Leading whitespace right after a closing
    tag is dropped from the answer, as the models emit `</think>\\n\\n`.
    """

    OPEN = "<think>"
    CLOSE = "</think>"

    def __init__(self) -> None:
        self._held = ""
        self._thinking = False
        self._after_close = False

    def feed(self, text: str) -> tuple[str, str]:
        """Takes the next piece of streamed text; returns its (answer, reasoning) parts. A tail that may be
        the start of a tag is held back until the next piece decides it."""
        text = self._held + text
        self._held = ""
        answer: list[str] = []
        reasoning: list[str] = []
        while text:
            tag = self.CLOSE if self._thinking else self.OPEN
            at = text.find(tag)
            if at < 0:
                keep = partial_suffix(text, tag)
                body, self._held = text[: len(text) - keep], text[len(text) - keep :]
                self._emit(body, answer, reasoning)
                break
            self._emit(text[:at], answer, reasoning)
            text = text[at + len(tag) :]
            self._thinking = not self._thinking
            self._after_close = not self._thinking
        return "".join(answer), "".join(reasoning)

    def close(self) -> tuple[str, str]:
        """Ends the stream: returns what was held back, as answer or reasoning depending on the open tag."""
        held, self._held = self._held, ""
        answer: list[str] = []
        reasoning: list[str] = []
        self._emit(held, answer, reasoning)
        return "".join(answer), "".join(reasoning)

    def _emit(self, body: str, answer: list[str], reasoning: list[str]) -> None:
        if not body:
            return
        if self._thinking:
            reasoning.append(body)
            return
        if self._after_close:
            body = body.lstrip()
            if not body:
                return
            self._after_close = False
        answer.append(body)


def partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0
