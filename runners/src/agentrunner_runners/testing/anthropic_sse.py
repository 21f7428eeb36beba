"""The Anthropic Messages API's answers as the public docs describe them, for `anthropic_mock`.

- a message: `{"id", "type": "message", "role": "assistant", "model", "content": [...], "stop_reason",
  "stop_sequence", "usage"}` with `text`, `thinking` (with a `signature`) and `tool_use` blocks;
- its streamed form (`stream: true`), one SSE event per `event: <type>` / `data: <json>` pair:
  `message_start` (the message with empty content), `ping`, per block `content_block_start` /
  `content_block_delta` (`text_delta`, `thinking_delta` + `signature_delta`, `input_json_delta` with
  `partial_json` pieces) / `content_block_stop`, then `message_delta` (`stop_reason`, output usage) and
  `message_stop`; an error inside a stream is `event: error`;
- an error response: `{"type": "error", "error": {"type", "message"}, "request_id"}` with the type the
  docs give for each HTTP status.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from agentrunner_runners.testing.mockkit import words

#: HTTP status -> the `error.type` the API documents for it
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "api_error",
    529: "overloaded_error",
}
DEFAULT_MESSAGES = {
    401: "invalid x-api-key",
    429: "Number of request tokens has exceeded your per-minute rate limit",
    500: "Internal server error",
    529: "Overloaded",
}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def error_body(status: int, message: str = "", error_type: str = "") -> dict[str, Any]:
    kind = error_type or ERROR_TYPES.get(status, "api_error")
    return {
        "type": "error",
        "error": {"type": kind, "message": message or DEFAULT_MESSAGES.get(status, kind)},
        "request_id": new_id("req"),
    }


def blocks(step: dict[str, Any]) -> list[dict[str, Any]]:
    """The content blocks of a scripted step: thinking, text, then tool uses (in that order)."""
    out: list[dict[str, Any]] = []
    if step.get("thinking"):
        out.append({"type": "thinking", "thinking": step["thinking"], "signature": new_id("sig")})
    if step.get("text"):
        out.append({"type": "text", "text": step["text"]})
    uses = step.get("tool_use") or []
    for use in [uses] if isinstance(uses, dict) else uses:
        out.append(
            {
                "type": "tool_use",
                "id": use.get("id") or new_id("toolu"),
                "name": use["name"],
                "input": use.get("input") or {},
            }
        )
    return out


def usage_of(step: dict[str, Any]) -> dict[str, int]:
    """The step's usage (`usage` in the script), by default 100 input and 20 output tokens, so
    identical turns cost the same."""
    usage = {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 0}
    usage["cache_read_input_tokens"] = 0
    usage.update(step.get("usage") or {})
    return usage


def message(model: str, content: list[dict[str, Any]], usage: dict[str, int]) -> dict[str, Any]:
    """The complete (non-streamed) message."""
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


def event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _thirds(text: str) -> list[str]:
    cut = [len(text) // 3, 2 * len(text) // 3]
    return [p for p in (text[: cut[0]], text[cut[0] : cut[1]], text[cut[1] :]) if p]


def block_events(index: int, block: dict[str, Any]) -> list[bytes]:
    """`content_block_start` / deltas / `content_block_stop` of one block."""
    kind = block["type"]
    if kind == "text":
        start: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": w} for w in words(block["text"])]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": w} for w in words(block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        raw = json.dumps(block["input"], ensure_ascii=False)
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in _thirds(raw)]
    out = [
        event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
    ]
    out += [
        event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
        for d in deltas
    ]
    out.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
    return out


def stream_events(full: dict[str, Any]) -> list[bytes]:
    """The SSE events of `full` (a `message`) streamed."""
    usage = full["usage"]
    start = {**full, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    out = [
        event("message_start", {"type": "message_start", "message": start}),
        event("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(full["content"]):
        out += block_events(index, block)
    out.append(
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": full["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    out.append(event("message_stop", {"type": "message_stop"}))
    return out


def stream_error_events(full: dict[str, Any], error_type: str, partial: str = "") -> list[bytes]:
    """A stream that starts `full` (and `partial` text), then reports an `error` event."""
    start = {**full, "content": [], "stop_reason": None}
    out = [event("message_start", {"type": "message_start", "message": start})]
    if partial:
        out += block_events(0, {"type": "text", "text": partial})[:-1]  # the block never stops
    status = next((s for s, t in ERROR_TYPES.items() if t == error_type), 500)
    out.append(event("error", error_body(status, error_type=error_type)))
    return out
