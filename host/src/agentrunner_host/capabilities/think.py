"""`<think>…</think>` removal for models that inline their reasoning in the answer text, whole or streamed."""

from __future__ import annotations

import re

_THINK_RE = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_OPEN, _CLOSE = "<think>", "</think>"


def strip_think(text: str) -> str:
    """Removes `<think>…</think>` blocks (an unclosed block runs to the end) from a whole answer."""
    return _THINK_RE.sub("", text).lstrip() if _OPEN in text else text


class ThinkFilter:
    """Streaming `<think>` remover: tags may be split across chunks, so a possible tag prefix at
    the end of a chunk is held back until the next chunk decides it."""

    def __init__(self) -> None:
        self._buf = ""
        self._inside = False
        self._started = False  # strip leading whitespace left after a leading think block

    def feed(self, text: str) -> str:
        self._buf += text
        out: list[str] = []
        while self._buf:
            tag = _CLOSE if self._inside else _OPEN
            pos = self._buf.find(tag)
            if pos >= 0:
                if not self._inside:
                    out.append(self._buf[:pos])
                self._buf = self._buf[pos + len(tag) :]
                self._inside = not self._inside
                continue
            keep = _partial_suffix(self._buf, tag)
            if not self._inside:
                out.append(self._buf[: len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep :] if keep else ""
            break
        return self._emit("".join(out))

    def flush(self) -> str:
        rest = "" if self._inside else self._buf
        self._buf = ""
        return self._emit(rest)

    def _emit(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            self._started = bool(text)
        return text


def _partial_suffix(buf: str, tag: str) -> int:
    for n in range(min(len(tag) - 1, len(buf)), 0, -1):
        if buf.endswith(tag[:n]):
            return n
    return 0
