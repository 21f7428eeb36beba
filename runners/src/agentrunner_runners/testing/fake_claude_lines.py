"""The stream-json lines of the fake `claude` (`fake_claude`): one `Transcript` per invocation writes
`system` / `stream_event` / `assistant` / `user` / `result` lines shaped like Claude Code 2.1's, each line
in three flushed pieces cut inside UTF-8 sequences where possible (the way a pipe delivers a long write).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any


def _cuts(data: bytes) -> list[int]:
    """Two cut points, moved inside a multi-byte UTF-8 sequence when there is one nearby."""
    cuts = []
    for at in (len(data) // 3, 2 * len(data) // 3):
        for probe in range(at, min(at + 8, len(data) - 1)):
            if data[probe] & 0xC0 == 0x80:  # a continuation byte: cutting here splits a character
                at = probe
                break
        cuts.append(at)
    return cuts


def write_line(text: str) -> None:
    """Writes one line to stdout in three flushed pieces (cut inside UTF-8 sequences where possible),
    the way a pipe delivers a long write in several reads."""
    data = (text + "\n").encode()
    out = sys.stdout.buffer
    start = 0
    for cut in [*_cuts(data), len(data)]:
        if cut > start:
            out.write(data[start:cut])
            out.flush()
            time.sleep(0.001)
            start = cut


def _emit(line: dict[str, Any] | str) -> None:
    write_line(line if isinstance(line, str) else json.dumps(line, ensure_ascii=False))


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


class Transcript:
    def __init__(self, argv: list[str], session: str, partial: bool, turn: int = 1) -> None:
        self.argv = argv
        self.session = session
        self.partial = partial
        self.count = 0
        self.turn = turn

    def base(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, **fields, "session_id": self.session, "uuid": str(uuid.uuid4())}

    def init(self) -> None:
        mcp = []
        path = _flag(self.argv, "--mcp-config")
        if path:
            servers = json.loads(Path(path).read_text())["mcpServers"]
            mcp = [{"name": name, "status": "connected"} for name in servers]
        _emit(
            self.base(
                "system",
                subtype="init",
                cwd=os.getcwd(),
                model="claude-fake-1",
                tools=["Bash", "Read"],
                mcp_servers=mcp,
                permissionMode=_flag(self.argv, "--permission-mode"),
            )
        )

    def text(
        self,
        text: str,
        *,
        pieces: list[str] | None = None,
        parent: str | None = None,
        message_id: str | None = None,
    ) -> str:
        self.count += 1
        mid = message_id or f"msg_{self.count:03d}_{uuid.uuid4().hex[:6]}"
        if self.partial and parent is None:
            self._stream(
                {"type": "message_start", "message": {"id": mid, "role": "assistant", "content": []}}
            )
            self._stream(
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            )
            for piece in pieces or [text]:
                self._stream(
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": piece},
                    }
                )
            self._stream({"type": "content_block_stop", "index": 0})
        _emit(
            self.base(
                "assistant",
                message={"id": mid, "role": "assistant", "content": [{"type": "text", "text": text}]},
                parent_tool_use_id=parent,
            )
        )
        return mid

    def tool(
        self,
        message_id: str,
        tool_id: str,
        name: str,
        params: dict[str, Any],
        json_pieces: list[str] | None = None,
    ) -> None:
        if self.partial:
            self._stream(
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {"type": "tool_use", "id": tool_id, "name": name, "input": {}},
                }
            )
            for piece in json_pieces or [json.dumps(params)]:
                self._stream(
                    {
                        "type": "content_block_delta",
                        "index": 1,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                )
            self._stream({"type": "content_block_stop", "index": 1})
        _emit(
            self.base(
                "assistant",
                message={
                    "id": message_id,
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": tool_id, "name": name, "input": params}],
                },
                parent_tool_use_id=None,
            )
        )

    def tool_result(self, tool_id: str, text: str, is_error: bool = False) -> None:
        _emit(
            self.base(
                "user",
                message={
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": tool_id, "content": text, "is_error": is_error}
                    ],
                },
                parent_tool_use_id=None,
            )
        )

    def thinking(self, text: str) -> None:
        self.count += 1
        mid = f"msg_{self.count:03d}_think"
        if self.partial:
            self._stream(
                {"type": "message_start", "message": {"id": mid, "role": "assistant", "content": []}}
            )
            self._stream(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": ""},
                }
            )
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                self._stream(
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "thinking_delta", "thinking": piece},
                    }
                )
            self._stream({"type": "content_block_stop", "index": 0})
        _emit(
            self.base(
                "assistant",
                message={
                    "id": mid,
                    "role": "assistant",
                    "content": [{"type": "thinking", "thinking": text, "signature": "sig"}],
                },
                parent_tool_use_id=None,
            )
        )

    def _stream(self, event: dict[str, Any]) -> None:
        _emit(self.base("stream_event", event=event, parent_tool_use_id=None))

    def result(
        self, text: str, *, subtype: str = "success", is_error: bool = False, turns: int = 1, **extra: Any
    ) -> None:
        _emit(
            self.base(
                "result",
                subtype=subtype,
                is_error=is_error,
                result=text,
                num_turns=turns,
                duration_ms=42,
                duration_api_ms=30 * self.turn,  # session totals, like the real CLI after --resume
                total_cost_usd=round(0.0123 * self.turn, 6),
                usage={"input_tokens": 11, "cache_read_input_tokens": 5, "output_tokens": 7},
                **extra,
            )
        )

    def synthetic(self, text: str) -> None:
        """Claude Code's own notice (e.g. an API error), as the real CLI writes it."""
        message: dict[str, Any] = {"id": str(uuid.uuid4()), "model": "<synthetic>", "role": "assistant"}
        message["content"] = [{"type": "text", "text": text}]
        _emit(self.base("assistant", message=message, parent_tool_use_id=None))

    def retry(self, status: int, error: str, attempt: int, most: int = 2) -> None:
        _emit(
            self.base(
                "system",
                subtype="api_retry",
                attempt=attempt,
                max_retries=most,
                retry_delay_ms=500,
                error_status=status,
                error=error,
            )
        )
