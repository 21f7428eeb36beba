"""Builders for the result types (PROTOCOL_V1 §7 plus `run.log` and `interaction.requested`). Each returns a `result_pb2.RunResult`.

The SDK fills `run_id`, `sequence` and `timestamp` when the result is streamed, so builders only take
the payload plus the optional envelope fields `usage` and `metadata`. Runners may also yield a raw
`RunResult` they built themselves.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

from google.protobuf import json_format, struct_pb2

from agentrunner.failures import FailureKind, failure_kind
from agentrunner.v1 import common_pb2, result_pb2

RunResult = result_pb2.RunResult
JSON = Any
#: A message kind: `"answer"` (the default), `"reasoning"`, `"progress"`, or a `common_pb2.MessageKind`.
Kind: TypeAlias = str | common_pb2.MessageKind.ValueType

ANSWER: Final = common_pb2.MESSAGE_KIND_ANSWER
REASONING: Final = common_pb2.MESSAGE_KIND_REASONING
PROGRESS: Final = common_pb2.MESSAGE_KIND_PROGRESS

__all__ = [
    "ANSWER",
    "PROGRESS",
    "REASONING",
    "Kind",
    "RunResult",
    "action",
    "artifact",
    "completed",
    "delta",
    "failed",
    "interaction",
    "is_answer",
    "kind_name",
    "log",
    "message",
    "message_kind",
    "new_id",
    "state",
    "to_struct",
    "to_value",
    "tool_completed",
    "tool_started",
    "usage",
]


def new_id(prefix: str = "call") -> str:
    """A fresh opaque id (tool calls, messages)."""
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def to_struct(data: Mapping[str, JSON] | struct_pb2.Struct | None) -> struct_pb2.Struct:
    """A `Struct` from a JSON-safe mapping."""
    if isinstance(data, struct_pb2.Struct):
        return data
    out = struct_pb2.Struct()
    if data:
        json_format.ParseDict(dict(data), out)
    return out


def to_value(data: JSON) -> struct_pb2.Value:
    """A `Value` from any JSON-safe value (`None` is JSON null)."""
    if isinstance(data, struct_pb2.Value):
        return data
    out = struct_pb2.Value()
    json_format.ParseDict(data, out)
    return out


def message_kind(kind: Kind) -> common_pb2.MessageKind.ValueType:
    """The enum value of a message kind (`"answer"`, `"reasoning"`, `"progress"` or the enum itself)."""
    if isinstance(kind, str):
        name = "MESSAGE_KIND_" + kind.upper()
        if name not in common_pb2.MessageKind.keys() or name == "MESSAGE_KIND_UNSPECIFIED":
            raise ValueError(f"unknown message kind {kind!r}; use answer, reasoning or progress")
        return common_pb2.MessageKind.Value(name)
    if kind not in common_pb2.MessageKind.values():
        raise ValueError(f"unknown message kind {kind!r}")
    return kind


def kind_name(kind: int) -> str:
    """`answer`, `reasoning` or `progress` for an enum value (unset reads as `answer`)."""
    if kind == common_pb2.MESSAGE_KIND_UNSPECIFIED or kind not in common_pb2.MessageKind.values():
        return "answer"
    return (
        common_pb2.MessageKind.Name(common_pb2.MessageKind.ValueType(kind))
        .removeprefix("MESSAGE_KIND_")
        .lower()
    )


def is_answer(item: result_pb2.MessageDelta | common_pb2.AssistantMessage) -> bool:
    """Whether a delta or a message is part of the answer (its kind is unset or `ANSWER`)."""
    return item.kind in (common_pb2.MESSAGE_KIND_UNSPECIFIED, common_pb2.MESSAGE_KIND_ANSWER)


def usage(
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    total_tokens: int | None = None,
    **extra: JSON,
) -> common_pb2.Usage:
    """Token usage; an omitted count stays unknown (never zero)."""
    out = common_pb2.Usage()
    if prompt_tokens is not None:
        out.prompt_tokens = prompt_tokens
    if completion_tokens is not None:
        out.completion_tokens = completion_tokens
    if total_tokens is not None:
        out.total_tokens = total_tokens
    elif prompt_tokens is not None and completion_tokens is not None:
        out.total_tokens = prompt_tokens + completion_tokens
    if extra:
        out.extra.CopyFrom(to_struct(extra))
    return out


def _envelope(
    usage: common_pb2.Usage | None, metadata: Mapping[str, JSON] | None, **payload: Any
) -> RunResult:
    result = RunResult(**payload)
    if usage is not None:
        result.usage.CopyFrom(usage)
    if metadata:
        result.metadata.CopyFrom(to_struct(metadata))
    return result


def _assistant_message(
    content: str | common_pb2.AssistantMessage,
    contents: Iterable[common_pb2.ContentElement],
    artifacts: Iterable[common_pb2.ArtifactRef],
    message_id: str,
    message_metadata: Mapping[str, JSON] | None,
    kind: Kind | None = None,
) -> common_pb2.AssistantMessage:
    if isinstance(content, common_pb2.AssistantMessage):
        if kind is not None:
            content.kind = message_kind(kind)
        return content
    msg = common_pb2.AssistantMessage(
        content=content, contents=list(contents), artifacts=list(artifacts), message_id=message_id
    )
    if kind is not None and message_kind(kind) != common_pb2.MESSAGE_KIND_ANSWER:
        msg.kind = message_kind(kind)
    if message_metadata:
        msg.metadata.CopyFrom(to_struct(message_metadata))
    return msg


def delta(
    text: str = "",
    *,
    cumulative_text: str | None = None,
    contents: Iterable[common_pb2.ContentElement] = (),
    message_id: str = "",
    kind: Kind = "answer",
    usage: common_pb2.Usage | None = None,
    metadata: Mapping[str, JSON] | None = None,
) -> RunResult:
    """`message.delta`: `text` is the increment since the previous delta of the same message.

    `kind="reasoning"` / `"progress"` marks a delta that is not part of the answer; give such deltas
    their own `message_id` (all deltas of one message share a kind).
    """
    payload = result_pb2.MessageDelta(text=text, contents=list(contents), message_id=message_id)
    value = message_kind(kind)
    if value != common_pb2.MESSAGE_KIND_ANSWER:
        payload.kind = value
    if cumulative_text is not None:
        payload.cumulative_text = cumulative_text
    return _envelope(usage, metadata, message_delta=payload)


def message(
    content: str | common_pb2.AssistantMessage = "",
    *,
    contents: Iterable[common_pb2.ContentElement] = (),
    artifacts: Iterable[common_pb2.ArtifactRef] = (),
    message_id: str = "",
    message_metadata: Mapping[str, JSON] | None = None,
    kind: Kind | None = None,
    usage: common_pb2.Usage | None = None,
    metadata: Mapping[str, JSON] | None = None,
) -> RunResult:
    """`message.completed`: one complete assistant message (a run may send several).

    `kind="reasoning"` / `"progress"`: the message is kept in the run ledger but is not the answer (the
    transcript keeps answers only). Unset leaves a given `AssistantMessage`'s kind as it is (answer).
    """
    msg = _assistant_message(content, contents, artifacts, message_id, message_metadata, kind)
    return _envelope(usage, metadata, message_completed=result_pb2.MessageCompleted(message=msg))


def tool_started(
    tool_call_id: str,
    tool_name: str,
    parameters: Mapping[str, JSON] | None = None,
    *,
    metadata: Mapping[str, JSON] | None = None,
) -> RunResult:
    """`tool.call.started`; pair it with `tool_completed` using the same id."""
    if not tool_call_id or not tool_name:
        raise ValueError("tool_started needs a tool_call_id and a tool_name")
    payload = result_pb2.ToolCallStarted(
        tool_call_id=tool_call_id, tool_name=tool_name, parameters=to_struct(parameters)
    )
    return _envelope(None, metadata, tool_call_started=payload)


def tool_completed(
    tool_call_id: str,
    tool_name: str,
    result_preview: Mapping[str, JSON] | None = None,
    *,
    error: BaseException | None = None,
    error_code: str = "",
    error_message: str = "",
    usage: common_pb2.Usage | None = None,
    metadata: Mapping[str, JSON] | None = None,
) -> RunResult:
    """`tool.call.completed`; pass `error=` (an `AgentRunnerError` gives its spec code) on failure."""
    if not tool_call_id or not tool_name:
        raise ValueError("tool_completed needs a tool_call_id and a tool_name")
    if error is not None:
        error_code = error_code or getattr(error, "spec_code", "") or "runtime_error"
        error_message = error_message or getattr(error, "message", None) or str(error)
    payload = result_pb2.ToolCallCompleted(
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        result_preview=to_struct(result_preview),
        error_code=error_code,
        error_message=error_message,
    )
    return _envelope(usage, metadata, tool_call_completed=payload)


def artifact(
    *,
    content: bytes = b"",
    mime_type: str = "",
    name: str = "",
    artifact_id: str = "",
    uri: str = "",
    summary: str = "",
    ref: common_pb2.ArtifactRef | None = None,
    metadata: Mapping[str, JSON] | None = None,
) -> RunResult:
    """`artifact.created`: inline `content` (the host stores it and assigns the id) or a reference."""
    if ref is None:
        ref = common_pb2.ArtifactRef(
            artifact_id=artifact_id,
            mime_type=mime_type,
            name=name,
            uri=uri,
            summary=summary,
            size_bytes=len(content),
        )
    if not content and not ref.artifact_id and not ref.uri:
        raise ValueError("artifact needs content, an artifact_id or a uri")
    return _envelope(
        None, metadata, artifact_created=result_pb2.ArtifactCreated(artifact=ref, content=content)
    )


def _scope(scope: str | common_pb2.StateScope.ValueType) -> common_pb2.StateScope.ValueType:
    if isinstance(scope, str):
        name = "STATE_SCOPE_" + scope.upper()
        if name not in common_pb2.StateScope.keys() or name == "STATE_SCOPE_UNSPECIFIED":
            raise ValueError(f"unknown state scope {scope!r}")
        return common_pb2.StateScope.Value(name)
    if scope == common_pb2.STATE_SCOPE_UNSPECIFIED:
        raise ValueError("state scope must be set")
    return scope


def state(
    scope: str | common_pb2.StateScope.ValueType,
    key: str,
    value: JSON,
    *,
    metadata: Mapping[str, JSON] | None = None,
) -> RunResult:
    """`state.updated`: ask the host to write host-owned state (`value=None` deletes the key)."""
    if not key or len(key) > 256:
        raise ValueError("state key must have 1..256 characters")
    payload = result_pb2.StateUpdated(scope=_scope(scope), key=key, value=to_value(value))
    return _envelope(None, metadata, state_updated=payload)


def action(
    name: str,
    *,
    target: Mapping[str, JSON] | None = None,
    payload: Mapping[str, JSON] | None = None,
    idempotency_key: str = "",
    approval_hint: str = "",
    metadata: Mapping[str, JSON] | None = None,
) -> RunResult:
    """`action.requested` (recorded as telemetry only in v1)."""
    if not name:
        raise ValueError("action needs a name")
    body = result_pb2.ActionRequested(
        action=name,
        target=to_struct(target),
        payload=to_struct(payload),
        idempotency_key=idempotency_key,
        approval_hint=approval_hint,
    )
    return _envelope(None, metadata, action_requested=body)


def completed(
    message: str | common_pb2.AssistantMessage | None = None,
    *,
    finish_reason: str = "stop",
    contents: Iterable[common_pb2.ContentElement] = (),
    artifacts: Iterable[common_pb2.ArtifactRef] = (),
    message_id: str = "",
    message_metadata: Mapping[str, JSON] | None = None,
    usage: common_pb2.Usage | None = None,
    metadata: Mapping[str, JSON] | None = None,
) -> RunResult:
    """`run.completed` (terminal), optionally carrying the final message."""
    payload = result_pb2.RunCompleted(finish_reason=finish_reason)
    if message is not None:
        payload.message.CopyFrom(
            _assistant_message(message, contents, artifacts, message_id, message_metadata)
        )
    return _envelope(usage, metadata, run_completed=payload)


def failed(
    code: str,
    message: str,
    *,
    retryable: bool = False,
    kind: str | FailureKind | None = None,
    details: Mapping[str, JSON] | None = None,
    usage: common_pb2.Usage | None = None,
    metadata: Mapping[str, JSON] | None = None,
) -> RunResult:
    """`run.failed` (terminal): `code` like `runner.error`; the message must not hold a traceback.

    `kind` is the failure kind (`agentrunner.failures.FailureKind`), stored as `details.kind`; pass the
    usage the source reported before failing as `usage`.
    """
    if not code:
        raise ValueError("failed needs a code")
    body = dict(details or {})
    if kind is not None:
        body["kind"] = failure_kind(kind).value
    payload = result_pb2.RunFailed(code=code, message=message, retryable=retryable, details=to_struct(body))
    return _envelope(usage, metadata, run_failed=payload)


_LOG_LEVELS = {
    "debug": result_pb2.RUN_LOG_LEVEL_DEBUG,
    "info": result_pb2.RUN_LOG_LEVEL_INFO,
    "warning": result_pb2.RUN_LOG_LEVEL_WARNING,
    "warn": result_pb2.RUN_LOG_LEVEL_WARNING,
    "error": result_pb2.RUN_LOG_LEVEL_ERROR,
}


def log(
    text: str,
    level: str | result_pb2.RunLogLevel.ValueType = "info",
    *,
    fields: Mapping[str, JSON] | None = None,
    metadata: Mapping[str, JSON] | None = None,
) -> RunResult:
    """`run.log`: a log line kept in the run ledger (levels `debug`, `info`, `warning`, `error`)."""
    if isinstance(level, str):
        if level.lower() not in _LOG_LEVELS:
            raise ValueError(f"unknown log level {level!r}; use debug, info, warning or error")
        level = _LOG_LEVELS[level.lower()]
    if not isinstance(text, str):
        raise TypeError("log text must be a string")
    payload = result_pb2.RunLog(level=level, text=text)
    if fields:
        payload.fields.CopyFrom(to_struct(fields))
    return _envelope(None, metadata, run_log=payload)


def interaction(
    request: common_pb2.InteractionRequest, *, metadata: Mapping[str, JSON] | None = None
) -> RunResult:
    """`interaction.requested` around a request built (and checked) by `agentrunner.interactions`."""
    return _envelope(
        None, metadata, interaction_requested=result_pb2.InteractionRequested(interaction=request)
    )
