"""Between the protocol's messages and the `openai` package: usage, tool calls, provider errors, and the
assembly of one choice of a streamed answer.

Errors: an attempt that may be retried raises `retry.Transient` around its typed error (429 ->
RATE_LIMITED, 408 and timeouts -> DEADLINE_EXCEEDED, 409, 5xx, dropped connections and error events
-> RUNTIME_ERROR with gRPC code UNAVAILABLE, all retryable); anything else raises the typed error itself.

The `openai` package (and its `httpx2` transport) is imported by `sdk()` at a host's first model call,
not at start: importing it costs more CPU than the rest of the host together, and every process that
only parses a config or serves runs without models would pay it (docs/performance.md).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

import grpc
import structlog
from google.protobuf import json_format, struct_pb2

from agentrunner.errors import (
    AgentRunnerError,
    DeadlineExceededError,
    InvalidArgumentError,
    RateLimitedError,
    RuntimeFailureError,
)
from agentrunner.tokens import tool_json
from agentrunner.v1 import common_pb2, proxy_service_pb2
from agentrunner_host.capabilities.retry import Transient, retry_after, should_retry_status
from agentrunner_host.capabilities.think import ThinkFilter

if TYPE_CHECKING:
    import openai

log = structlog.get_logger(__name__)

STANDARD_USAGE = ("prompt_tokens", "completion_tokens", "total_tokens")


@functools.cache
def sdk() -> ModuleType:
    """The `openai` package, with the client resources the registry calls already loaded (the client
    would import them at first attribute access, inside the first call's timeout)."""
    import openai
    import openai.resources.chat
    import openai.resources.embeddings

    return openai


@functools.cache
def provider_errors() -> tuple[type[BaseException], ...]:
    """What a failed provider attempt raises: the package's errors, its transport's, and timeouts.
    Only called while handling an exception, after `sdk()` created the client."""
    import httpx2

    return (sdk().APIError, httpx2.HTTPError, TimeoutError)


def struct_to_dict(value: struct_pb2.Struct | None) -> dict[str, Any]:
    return json_format.MessageToDict(value) if value is not None and value.fields else {}


def tools_json(tools: Any) -> list[dict[str, Any]]:
    return [tool_json(t) for t in tools]


def _plain(value: Any) -> Any:
    """A pydantic model (the package's response types) or a mapping as plain JSON values."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    return value


def usage_pb(data: Any) -> common_pb2.Usage:
    """Every count the provider reported: the three standard ones in their fields, everything else
    (`prompt_tokens_details.cached_tokens`, `completion_tokens_details.reasoning_tokens`, audio counts,
    cost, ...) in `extra`, nested as the provider sent it."""
    usage = common_pb2.Usage()
    data = _plain(data)
    if not isinstance(data, Mapping):
        return usage
    for key in STANDARD_USAGE:
        if isinstance(data.get(key), int) and not isinstance(data.get(key), bool):
            setattr(usage, key, data[key])
    extra = {k: v for k, v in data.items() if k not in STANDARD_USAGE and v is not None}
    if extra:
        usage.extra.update(json.loads(json.dumps(extra)))
    return usage


def tool_call_pb(raw: Any) -> common_pb2.ToolCall:
    raw = _plain(raw) or {}
    function = raw.get("function") or {}
    return common_pb2.ToolCall(
        id=raw.get("id") or "",
        name=function.get("name") or "",
        arguments_json=function.get("arguments") or "",
    )


def content_text(content: Any) -> str:
    """A message's content as text (some providers answer with a list of parts)."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


# --------------------------------------------------------------------------- errors


def _detail(exc: openai.APIStatusError) -> str:
    """The provider's error text, without the API key the request carried (providers quote it back:
    "Incorrect API key provided: sk-..."), for errors, logs and spans."""
    body = exc.body
    detail = exc.message or "no detail"
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else inner
        if message:
            detail = str(message)
    authorization = exc.response.request.headers.get("authorization", "")
    key = authorization.removeprefix("Bearer ").strip()
    if len(key) >= 8 and key != "none":
        detail = detail.replace(key, "[redacted]")
    return detail[:300]


def status_error(exc: openai.APIStatusError, model_id: str) -> AgentRunnerError | Transient:
    """The typed error of an HTTP error answer, wrapped in `Transient` when the policy retries it."""
    status = exc.status_code
    headers = exc.response.headers
    message = f"model {model_id}: provider answered {status}: {_detail(exc)}"
    meta = {"modelId": model_id, "httpStatus": status}
    error: AgentRunnerError
    if status == 429:
        error = RateLimitedError(message, metadata=meta)
    elif status == 408:
        error = DeadlineExceededError(message, metadata=meta)
    elif status == 409 or status >= 500:
        error = RuntimeFailureError(message, retryable=True, metadata=meta, code=grpc.StatusCode.UNAVAILABLE)
    elif status in (401, 403):
        error = RuntimeFailureError(f"{message} (check the host's API key for this model)", metadata=meta)
    else:
        error = InvalidArgumentError(message, metadata=meta)
    if should_retry_status(status, headers):
        return Transient(error, retry_after(headers))
    return error


def attempt_error(exc: BaseException, model_id: str) -> AgentRunnerError | Transient:
    """The typed error of a failed attempt: an HTTP error answer, a timeout, a dropped connection or an
    error event (the last three always retryable); anything else is re-raised as it is."""
    if isinstance(exc, sdk().APIStatusError):
        return status_error(exc, model_id)
    return Transient(_transport_error(exc, model_id, ""))


def streamed_error(exc: BaseException, model_id: str) -> AgentRunnerError:
    """The typed error of a stream that failed after part of its answer reached the runner: still
    retryable for the runner, never retried by the host."""
    if isinstance(exc, sdk().APIStatusError):
        error = status_error(exc, model_id)
        error = error.error if isinstance(error, Transient) else error
    else:
        error = _transport_error(exc, model_id, " after part of the answer was streamed (not retried)")
    error.metadata["streamed"] = "true"
    return error


def _transport_error(exc: BaseException, model_id: str, where: str) -> AgentRunnerError:
    import httpx2

    openai = sdk()
    meta: dict[str, Any] = {"modelId": model_id}
    unavailable = grpc.StatusCode.UNAVAILABLE
    if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException | TimeoutError):
        return DeadlineExceededError(
            f"model {model_id}: the provider did not answer in time{where}", metadata=meta
        )
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) and exc.__cause__ else exc
        return RuntimeFailureError(
            f"model {model_id}: the connection to the provider failed ({type(cause).__name__}){where}",
            retryable=True, metadata=meta, code=unavailable,
        )  # fmt: skip
    if isinstance(exc, openai.APIError):  # an `error` event inside the stream
        return RuntimeFailureError(
            f"model {model_id}: the provider failed mid-stream: {exc.message}{where}",
            retryable=True, metadata=meta, code=unavailable,
        )  # fmt: skip
    if isinstance(exc, httpx2.HTTPError):  # a malformed answer (bad encoding, broken framing)
        return RuntimeFailureError(
            f"model {model_id}: unreadable provider answer ({type(exc).__name__}){where}", metadata=meta
        )
    raise exc


# --------------------------------------------------------------------------- one streamed choice


class ChoiceAssembler:
    """Turns the chunks of a streamed answer into the `ModelChunk`s of one choice (`index`): text as
    it arrives (think blocks removed when asked), tool calls whole when the choice finishes. Chunks of
    other choices are counted and dropped, never mixed in."""

    def __init__(self, index: int = 0, *, remove_think: bool = False) -> None:
        self.index = index
        self.think = ThinkFilter() if remove_think else None
        self.calls: dict[int, dict[str, str]] = {}
        self.usage: common_pb2.Usage | None = None
        self.finished = False
        self.other_choices: set[int] = set()

    def feed(self, chunk: Any) -> list[proxy_service_pb2.ModelChunk]:
        out: list[proxy_service_pb2.ModelChunk] = []
        if getattr(chunk, "usage", None):
            self.usage = usage_pb(chunk.usage)
        for choice in getattr(chunk, "choices", None) or []:
            if choice.index != self.index:
                self.other_choices.add(choice.index)
                continue
            if self.finished:
                continue
            delta = choice.delta
            text = (delta.content or "") if delta is not None else ""
            if self.think is not None and text:
                text = self.think.feed(text)
            for part in (delta.tool_calls if delta is not None else None) or []:
                slot = self.calls.setdefault(part.index or 0, {"id": "", "name": "", "arguments": ""})
                slot["id"] = part.id or slot["id"]
                if part.function is not None:
                    slot["name"] += part.function.name or ""
                    slot["arguments"] += part.function.arguments or ""
            reason = choice.finish_reason or ""
            piece = proxy_service_pb2.ModelChunk(content=text, finish_reason=reason)
            if reason:
                self._finish(piece)
            if piece.content or piece.tool_calls or piece.finish_reason:
                out.append(piece)
        return out

    def _finish(self, piece: proxy_service_pb2.ModelChunk) -> None:
        self.finished = True
        if self.think is not None:
            piece.content += self.think.flush()
        piece.tool_calls.extend(
            common_pb2.ToolCall(id=c["id"], name=c["name"], arguments_json=c["arguments"])
            for _, c in sorted(self.calls.items())
        )
        self.calls.clear()

    def end(self) -> list[proxy_service_pb2.ModelChunk]:
        """What is left when the stream ended without a finish reason for this choice."""
        if self.other_choices:
            log.warning("model_stream_other_choices_dropped", choices=sorted(self.other_choices))
        if self.finished:
            return []
        tail = self.think.flush() if self.think is not None else ""
        if not tail and not self.calls:
            return []
        piece = proxy_service_pb2.ModelChunk(content=tail, finish_reason="stop")
        self._finish(piece)
        return [piece]
