"""What a model says through the OpenAI Responses API, as the streamed events of `POST /v1/responses`.

Written from the public API reference (streaming responses): a response streams as server-sent events,
each `event: <type>` + `data: <json with the same "type" and a "sequence_number">`:

    response.created {response}            response.in_progress {response}
    response.output_item.added {output_index, item}
      message:  response.content_part.added, response.output_text.delta {item_id, delta}*,
                response.output_text.done, response.content_part.done
      function_call: response.function_call_arguments.delta {item_id, delta}*, ...arguments.done
    response.output_item.done {output_index, item}
    response.completed {response: {..., output, usage{input_tokens, input_tokens_details{cached_tokens},
                                                      output_tokens, output_tokens_details, total_tokens}}}

or, when the model fails mid-stream, `response.failed {response: {status: failed, error{code,
message}}}`. An HTTP error is a plain JSON body `{"error": {message, type, param, code}}` with the status.

`Reply` is one response: the output items (`text`, `function_call`, `custom_tool_call`,
`tool_search_call`), or an HTTP error (`http_error`), or a mid-stream failure (`failed`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from typing import Any

_IDS = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_mock{next(_IDS):06d}"


@dataclasses.dataclass
class Reply:
    """One model response: output items, or an HTTP error, or a failure inside the stream."""

    items: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: an HTTP error instead of a stream: (status, error body's `error` object)
    error: tuple[int, dict[str, Any]] | None = None
    #: `response.failed` after the items: the error object (`code`, `message`)
    failure: dict[str, Any] | None = None
    #: output tokens reported (default: a word count of the items)
    output_tokens: int | None = None
    #: seconds to wait before each streamed event (a slow model, for cancel tests)
    delay: float = 0.0

    def __add__(self, other: Reply) -> Reply:
        return Reply(
            [*self.items, *other.items], other.error, other.failure, other.output_tokens, other.delay
        )


def text(content: str, *, phase: str = "") -> Reply:
    """An assistant message (streamed as `output_text.delta`s, a few words each); `phase` is Codex's
    `commentary` / `final_answer` marker, left out when empty."""
    item: dict[str, Any] = {
        "type": "message",
        "id": _id("msg"),
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": content, "annotations": []}],
    }
    if phase:
        item["phase"] = phase
    return Reply([item])


def function_call(name: str, arguments: dict[str, Any] | str, *, namespace: str = "") -> Reply:
    """A `function_call` item (`arguments` as the JSON text the API sends)."""
    item: dict[str, Any] = {
        "type": "function_call",
        "id": _id("fc"),
        "call_id": _id("call"),
        "name": name,
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        "status": "completed",
    }
    if namespace:
        item["namespace"] = namespace
    return Reply([item])


def custom_tool_call(name: str, tool_input: str) -> Reply:
    """A `custom_tool_call` item (a freeform tool such as Codex's `apply_patch`)."""
    return Reply(
        [
            {
                "type": "custom_tool_call",
                "id": _id("ctc"),
                "call_id": _id("call"),
                "name": name,
                "input": tool_input,
                "status": "completed",
            }
        ]
    )


def tool_search_call(query: str, limit: int = 8) -> Reply:
    """A client-executed `tool_search_call` (the client searches its deferred tools, e.g. MCP tools)."""
    return Reply(
        [
            {
                "type": "tool_search_call",
                "id": _id("tsc"),
                "call_id": _id("call"),
                "execution": "client",
                "status": "completed",
                "arguments": {"query": query, "limit": limit},
            }
        ]
    )


_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}


def http_error(status: int, message: str = "") -> Reply:
    """An HTTP error response with the API's error body."""
    kind, code = _ERROR_TYPES.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    default = {
        401: "Incorrect API key provided. You can find your API key at the dashboard.",
        429: "Rate limit reached for requests. Please try again in 1s.",
        500: "The server had an error while processing your request. Sorry about that!",
    }.get(status, f"mock error {status}")
    return Reply(error=(status, {"message": message or default, "type": kind, "param": None, "code": code}))


def failed(message: str, code: str = "server_error") -> Reply:
    """A stream that ends with `response.failed` instead of `response.completed`."""
    return Reply(failure={"code": code, "message": message})


def _event(kind: str, seq: int, **fields: Any) -> bytes:
    data = json.dumps({"type": kind, "sequence_number": seq, **fields}, ensure_ascii=False)
    return f"event: {kind}\ndata: {data}\n\n".encode()


def _words(content: str) -> list[str]:
    pieces, current = [], ""
    for ch in content:
        current += ch
        if ch == " " and len(current) > 8:
            pieces.append(current)
            current = ""
    return [*pieces, current] if current else pieces


def usage(input_tokens: int, output_tokens: int, cached: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def events(reply: Reply, *, model: str, input_tokens: int) -> list[bytes]:
    """The SSE events of a streamed `reply` (module docstring)."""
    response: dict[str, Any] = {
        "id": _id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "model": model,
        "output": [],
    }
    seq = itertools.count()
    out = [
        _event("response.created", next(seq), response=response),
        _event("response.in_progress", next(seq), response=response),
    ]
    for index, item in enumerate(reply.items):
        out += _item_events(item, index, seq)
    words = sum(len(json.dumps(item).split()) for item in reply.items)
    done = {**response, "output": reply.items}
    if reply.failure is not None:
        out.append(
            _event(
                "response.failed", next(seq), response={**done, "status": "failed", "error": reply.failure}
            )
        )
        return out
    tokens = usage(input_tokens, reply.output_tokens if reply.output_tokens is not None else words)
    out.append(
        _event("response.completed", next(seq), response={**done, "status": "completed", "usage": tokens})
    )
    return out


def _item_events(item: dict[str, Any], index: int, seq: itertools.count[int]) -> list[bytes]:
    kind, item_id = item["type"], item.get("id", "")
    start = {**item, "status": "in_progress"}
    if kind == "message":
        start["content"] = []
    elif kind == "function_call":
        start["arguments"] = ""
    out = [_event("response.output_item.added", next(seq), output_index=index, item=start)]
    where = {"item_id": item_id, "output_index": index}
    if kind == "message":
        body = item["content"][0]["text"]
        part = {"type": "output_text", "text": "", "annotations": []}
        out.append(_event("response.content_part.added", next(seq), **where, content_index=0, part=part))
        for piece in _words(body):
            out.append(_event("response.output_text.delta", next(seq), **where, content_index=0, delta=piece))
        out.append(_event("response.output_text.done", next(seq), **where, content_index=0, text=body))
        part = {**part, "text": body}
        out.append(_event("response.content_part.done", next(seq), **where, content_index=0, part=part))
    elif kind == "function_call":
        out.append(
            _event("response.function_call_arguments.delta", next(seq), **where, delta=item["arguments"])
        )
        out.append(
            _event("response.function_call_arguments.done", next(seq), **where, arguments=item["arguments"])
        )
    out.append(_event("response.output_item.done", next(seq), output_index=index, item=item))
    return out
