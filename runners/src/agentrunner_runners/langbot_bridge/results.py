"""The plugin SDK's result envelopes (`RunnerResult` / `AgentRunResult`) as this protocol's `RunResult`s.

| plugin result | becomes |
| --- | --- |
| `message.delta` `{chunk}` | `message.delta`: `text` = the increment; see below |
| `message.completed` `{message, file_ids}` | `message.completed` (file ids are Box handles: kept in metadata) |
| `tool.call.started` / `.completed` | the same, `result` as the preview, `error` as `tool.error` |
| `state.updated` `{scope, key, value}` | `state.updated` |
| `action.requested` `{action: "interaction.requested", payload}` | `interaction.requested` |
| `action.requested` (any other action) | `action.requested` |
| `processor.log` `{text, level}` (`ctx.log`) | `run.log` |
| `run.completed` `{finish_reason, message}` | `run.completed` |
| `run.failed` `{error, code, retryable}` | `run.failed`, code mapped by `FAILURES` |
| `usage` on any envelope | `usage` on the same result |
| a type this table does not know | dropped, with a warning (the SDK's own forward-compatibility rule) |
| a payload this protocol cannot carry (a state scope it does not know, ...) | dropped, with a warning (what the host does with an invalid payload) |

Deltas: a LangBot chunk is a snapshot (LangBot's pipeline replaces the previous chunk and prefers
`all_content`), so the text so far is `all_content` when the chunk has it, else its `content`. The
translator keeps that text per message (`resp_message_id`) and sends the increment as `text`; when a
snapshot does not extend the text sent so far (a plugin rewrote its answer), the delta carries the new
whole text as `cumulative_text` (the host then replaces its buffer), and the final chunk (`is_final`)
carries it as a checkpoint. A chunk that adds nothing sends nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import structlog

from agentrunner import results
from agentrunner.failures import FailureKind
from agentrunner.v1 import common_pb2, result_pb2

log = structlog.get_logger("agentrunner_runners.langbot_bridge.results")

INTERACTION_REQUESTED = "interaction.requested"

#: the runtime's and SDK's failure codes -> (our code, failure kind, retryable); others keep their code
FAILURES: dict[str, tuple[str, FailureKind, bool]] = {
    "runner.timeout": ("deadline_exceeded", FailureKind.TIMEOUT, True),
    "runner.exception": ("runner.exception", FailureKind.INTERNAL_ERROR, False),
    "runner.context_invalid": ("langbot.context_invalid", FailureKind.INPUT_INVALID, False),
    "runner.forward_exception": ("langbot.plugin_crashed", FailureKind.PROCESS_FAILED, True),
    "runner.plugin_not_found": ("langbot.plugin_unavailable", FailureKind.CONNECTION_ERROR, True),
    "runner.plugin_disabled": ("langbot.plugin_unavailable", FailureKind.CONNECTION_ERROR, True),
    "runner.plugin_not_initialized": ("langbot.plugin_unavailable", FailureKind.CONNECTION_ERROR, True),
    "runner.handler_not_found": ("langbot.plugin_unavailable", FailureKind.CONNECTION_ERROR, True),
    "runner.not_initialized": ("langbot.plugin_unavailable", FailureKind.CONNECTION_ERROR, True),
    "runner.not_found": ("langbot.runner_not_found", FailureKind.CONFIG_INVALID, False),
    "cancelled": ("cancelled", FailureKind.CANCELLED, False),
}
_LEVELS = {"debug", "info", "warning", "error"}


def message_text(message: Any) -> str:
    """The text of an SDK `Message`/`MessageChunk` `content` (a string or content elements)."""
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(c.get("text") or "") for c in content if isinstance(c, Mapping) and c.get("type") == "text"
        )
    return ""


def usage(raw: Any) -> common_pb2.Usage | None:
    if not isinstance(raw, Mapping):
        return None
    counts = {k: raw.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    if all(v is None for v in counts.values()):
        return None
    return results.usage(**{k: int(v) for k, v in counts.items() if isinstance(v, int | float)})


def _struct_or_none(value: Any) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, Mapping) else None


def interaction_request(raw: Mapping[str, Any]) -> common_pb2.InteractionRequest:
    """The SDK's `InteractionRequest` (already validated by the plugin's SDK) as this protocol's."""
    out = common_pb2.InteractionRequest(
        interaction_id=str(raw.get("interaction_id") or ""),
        kind=common_pb2.InteractionKind.Value("INTERACTION_KIND_" + str(raw.get("kind") or "form").upper()),
        title=str(raw.get("title") or ""),
        description=str(raw.get("description") or ""),
        fallback_text=str(raw.get("fallback_text") or ""),
    )
    for f in raw.get("fields") or []:
        field = out.fields.add(
            id=str(f.get("id")),
            label=str(f.get("label")),
            type=common_pb2.InteractionFieldType.Value(
                "INTERACTION_FIELD_TYPE_" + str(f.get("type")).upper()
            ),
            required=bool(f.get("required")),
            placeholder=str(f.get("placeholder") or ""),
        )
        for o in f.get("options") or []:
            field.options.add(
                value=str(o.get("value")),
                label=str(o.get("label")),
                description=str(o.get("description") or ""),
            )
        if f.get("default") is not None:
            field.default_value.CopyFrom(results.to_value(f["default"]))
    for a in raw.get("actions") or []:
        style = "INTERACTION_ACTION_STYLE_" + str(a.get("style") or "default").upper()
        out.actions.add(
            id=str(a.get("id")),
            label=str(a.get("label")),
            style=common_pb2.InteractionActionStyle.Value(style),
        )
    expires = raw.get("expires_at")
    if isinstance(expires, int | float) and not isinstance(expires, bool):
        out.expires_at.FromDatetime(dt.datetime.fromtimestamp(float(expires), dt.UTC))
    return out


class ResultTranslator:
    """Translates one run's plugin results, in order (it keeps each message's text so far)."""

    def __init__(self) -> None:
        self._sent: dict[str, str] = {}

    def translate(self, envelope: Mapping[str, Any]) -> result_pb2.RunResult | None:
        """The result for one envelope, or None when it adds nothing / is of an unknown type."""
        kind = str(envelope.get("type") or "")
        data = envelope.get("data") if isinstance(envelope.get("data"), Mapping) else {}
        assert isinstance(data, Mapping)
        handler = _HANDLERS.get(kind)
        if handler is None:
            log.warning("langbot.result_type_unknown", type=kind[:100])
            return None
        try:
            out = handler(self, data)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # the host would drop it as invalid
            log.warning("langbot.result_invalid", type=kind, error=str(exc)[:200])
            return None
        if out is not None:
            used = usage(envelope.get("usage"))
            if used is not None:
                out.usage.CopyFrom(used)
        return out

    def _delta(self, data: Mapping[str, Any]) -> result_pb2.RunResult | None:
        chunk = data.get("chunk") if isinstance(data.get("chunk"), Mapping) else {}
        assert isinstance(chunk, Mapping)
        message_id = str(chunk.get("resp_message_id") or "")
        whole = chunk["all_content"] if isinstance(chunk.get("all_content"), str) else message_text(chunk)
        sent = self._sent.get(message_id, "")
        final = chunk.get("is_final") is True
        self._sent[message_id] = whole
        if whole.startswith(sent):
            increment = whole[len(sent) :]
            if not increment and not final:
                return None
            return results.delta(increment, message_id=message_id, cumulative_text=whole if final else None)
        return results.delta("", message_id=message_id, cumulative_text=whole)

    def _completed_message(self, data: Mapping[str, Any]) -> result_pb2.RunResult:
        message = data.get("message") if isinstance(data.get("message"), Mapping) else {}
        meta = {"file_ids": list(data["file_ids"])} if data.get("file_ids") else None
        return results.message(message_text(message), message_metadata=meta)

    def _tool_started(self, data: Mapping[str, Any]) -> result_pb2.RunResult:
        return results.tool_started(
            str(data.get("tool_call_id") or "call"),
            str(data.get("tool_name") or "tool"),
            _struct_or_none(data.get("parameters")),
        )

    def _tool_completed(self, data: Mapping[str, Any]) -> result_pb2.RunResult:
        error = data.get("error")
        return results.tool_completed(
            str(data.get("tool_call_id") or "call"),
            str(data.get("tool_name") or "tool"),
            _struct_or_none(data.get("result")),
            error_code="tool.error" if error else "",
            error_message=str(error or ""),
        )

    def _state(self, data: Mapping[str, Any]) -> result_pb2.RunResult:
        return results.state(str(data.get("scope")), str(data.get("key")), data.get("value"))

    def _action(self, data: Mapping[str, Any]) -> result_pb2.RunResult:
        action = str(data.get("action") or "")
        payload = data.get("payload")
        if action == INTERACTION_REQUESTED and isinstance(payload, Mapping):
            return results.interaction(interaction_request(payload))
        return results.action(
            action or "unknown", target=_struct_or_none(data.get("target")), payload=_struct_or_none(payload)
        )

    def _interaction(self, data: Mapping[str, Any]) -> result_pb2.RunResult:
        return results.interaction(interaction_request(data))

    def _log(self, data: Mapping[str, Any]) -> result_pb2.RunResult:
        level = str(data.get("level") or "info")
        return results.log(str(data.get("text") or ""), level if level in _LEVELS else "info")

    def _run_completed(self, data: Mapping[str, Any]) -> result_pb2.RunResult:
        message = data.get("message")
        text = message_text(message) if isinstance(message, Mapping) else None
        return results.completed(text, finish_reason=str(data.get("finish_reason") or "stop"))

    def _run_failed(self, data: Mapping[str, Any]) -> result_pb2.RunResult:
        source = str(data.get("code") or "runner.error")
        message = str(data.get("error") or data.get("message") or "the plugin runner failed")
        code, kind, retryable = FAILURES.get(
            source, (source, FailureKind.API_ERROR, bool(data.get("retryable")))
        )
        details = {"langbot_code": source} if code != source else None
        return results.failed(code, message[:2000], retryable=retryable, kind=kind, details=details)


_HANDLERS = {
    "message.delta": ResultTranslator._delta,
    "message.completed": ResultTranslator._completed_message,
    "tool.call.started": ResultTranslator._tool_started,
    "tool.call.completed": ResultTranslator._tool_completed,
    "state.updated": ResultTranslator._state,
    "action.requested": ResultTranslator._action,
    "interaction.requested": ResultTranslator._interaction,
    "processor.log": ResultTranslator._log,
    "run.completed": ResultTranslator._run_completed,
    "run.failed": ResultTranslator._run_failed,
}


def is_terminal_type(kind: Any) -> bool:
    return kind in ("run.completed", "run.failed")


__all__ = ["FAILURES", "ResultTranslator", "interaction_request", "is_terminal_type"]
