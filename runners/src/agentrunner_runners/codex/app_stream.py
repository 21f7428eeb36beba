"""`codex app-server` notifications of one turn, turned into LangBot results (no I/O here).

Notifications (public codex sources, `codex-rs/app-server-protocol` v2, `codex-rs/app-server/README.md`):
`thread/started{thread}`, `turn/started{threadId, turn{id}}`, `item/started` / `item/completed{threadId,
turnId, item}` (items `agentMessage{id, text, phase}`, `reasoning{id, summary[], content[]}`,
`commandExecution{id, command, cwd, status, aggregatedOutput, exitCode}`, `fileChange{id, changes[{path,
kind, diff}], status}`, `mcpToolCall{id, server, tool, status, arguments, result, error}`,
`webSearch{id, query}`, `userMessage`, `contextCompaction`, ...), `item/agentMessage/delta{itemId, delta}`,
`item/reasoning/summaryTextDelta` / `textDelta{itemId, delta}`, `turn/plan/updated{plan[{step,
status}]}`, `thread/tokenUsage/updated{tokenUsage{total{inputTokens, cachedInputTokens, outputTokens}}}`,
`turn/completed{turn{id, status: completed|failed|interrupted, error{message, codexErrorInfo}}}` and
`error{error{message, codexErrorInfo}, willRetry}`.

Items are mapped to the `exec` item shapes and go through the same translation as `codex exec --json`
(`CodexExecStream`): the answer once, commentary as progress, reasoning never answer text, tool-like
items as `tool.call.started` / `completed`. On top of that:
- agent message text streams as `message.delta` under the item id (kind `progress` when Codex marked
  the message `phase: commentary`), and a message marked `commentary` is progress at once;
- `thread/tokenUsage/updated` carries the thread's running total, like exec's `turn.completed`;
- an `error` with `willRetry: true` is a warning, not a failure.
- `mcpServer/startupStatus/updated` is kept per server (the runner waits for its LangBot bridge before
  the turn starts); a server that failed to start is a warning;
- `warning` / `guardianWarning` notifications are `run.log` warnings;
- an `error` with `willRetry: true` that no retry can fix (HTTP 401 / 403) is kept as `fatal`.
Every other notification of the v2 protocol is skipped quietly; unknown ones are counted and skipped
(logged once per method).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import structlog

from agentrunner import results
from agentrunner.v1 import result_pb2
from agentrunner_runners.codex.exec_stream import CodexExecStream, Usage
from agentrunner_runners.codex.failures import fatal_retry

log = structlog.get_logger("agentrunner_runners.codex")

_STATUS = {"inProgress": "in_progress", "completed": "completed", "failed": "failed", "declined": "declined"}
_ITEM_TYPES = {
    "agentMessage": "agent_message",
    "reasoning": "reasoning",
    "commandExecution": "command_execution",
    "fileChange": "file_change",
    "mcpToolCall": "mcp_tool_call",
    "webSearch": "web_search",
}
#: items of no interest to the result stream (the user's own message, history compaction, ...)
_SILENT_ITEMS = frozenset(
    {"userMessage", "contextCompaction", "imageView", "enteredReviewMode", "exitedReviewMode", "plan"}
)
#: notifications of no interest to the result stream: every other method of the v2 protocol's
#: `ServerNotification` (`codex app-server generate-json-schema`, 0.169), so none is reported as unknown
_SILENT = frozenset(
    {
        "account/gatewayOAuth/changed",
        "account/login/completed",
        "account/rateLimits/updated",
        "account/updated",
        "app/list/updated",
        "autoApprovalReview/strictReviewRequired",
        "command/exec/outputDelta",
        "configWarning",
        "deprecationNotice",
        "externalAgentConfig/import/completed",
        "externalAgentConfig/import/progress",
        "fs/changed",
        "hook/completed",
        "hook/started",
        "item/autoApprovalReview/completed",
        "item/autoApprovalReview/started",
        "item/commandExecution/outputDelta",
        "item/commandExecution/terminalInteraction",
        "item/fileChange/outputDelta",
        "item/fileChange/patchUpdated",
        "item/mcpToolCall/progress",
        "item/plan/delta",
        "item/reasoning/summaryPartAdded",
        "mcpServer/event/stream/notification",
        "mcpServer/oauthLogin/completed",
        "model/rerouted",
        "model/safetyBuffering/updated",
        "model/verification",
        "modelProvider/authRecoveryCompleted",
        "modelProvider/authRecoveryStarted",
        "process/exited",
        "process/outputDelta",
        "project/changed",
        "remoteControl/status/changed",
        "serverRequest/resolved",
        "skills/changed",
        "turn/diff/updated",
        "turn/moderationMetadata",
        "windows/worldWritableWarning",
        "windowsSandbox/setupCompleted",
    }
)
#: notification prefixes of no interest (thread bookkeeping, realtime audio, file search sessions)
_SILENT_PREFIXES = ("codex/event", "thread/", "fuzzyFileSearch/")
#: notifications whose `message` is worth a `run.log` warning
_WARNINGS = ("warning", "guardianWarning")
_COMMENTARY = ("commentary",)


def exec_item(item: dict[str, Any]) -> dict[str, Any] | None:
    """An app-server `ThreadItem` in the shape of the matching `codex exec --json` item, or None."""
    itype = _ITEM_TYPES.get(str(item.get("type")))
    if itype is None:
        return None
    out: dict[str, Any] = {"id": str(item.get("id") or ""), "type": itype}
    status = _STATUS.get(str(item.get("status") or ""), item.get("status"))
    if status:
        out["status"] = status
    if itype == "agent_message":
        out["text"] = str(item.get("text") or "")
    elif itype == "reasoning":
        parts = item.get("summary") or item.get("content") or []
        out["text"] = "\n\n".join(str(p) for p in parts) if isinstance(parts, list) else str(parts)
    elif itype == "command_execution":
        command = item.get("command")
        out["command"] = " ".join(map(str, command)) if isinstance(command, list) else str(command or "")
        out["aggregated_output"] = item.get("aggregatedOutput") or ""
        out["exit_code"] = item.get("exitCode")
    elif itype == "file_change":
        changes = item.get("changes")
        out["changes"] = (
            [_change(c) for c in changes if isinstance(c, dict)] if isinstance(changes, list) else []
        )
    elif itype == "mcp_tool_call":
        for key in ("server", "tool", "arguments", "result", "error"):
            out[key] = item.get(key)
    else:
        out["query"] = str(item.get("query") or "")
    return out


def _change(change: dict[str, Any]) -> dict[str, Any]:
    kind = change.get("kind")
    if isinstance(kind, dict):  # `{"type": "update", "move_path": ...}`
        kind = kind.get("type")
    return {"path": str(change.get("path") or ""), "kind": str(kind or "update")}


class CodexAppStream(CodexExecStream):
    """Feeds on app-server notifications; `notify` returns the results to emit now."""

    #: the notifications with a handler of their own (filled in below the class)
    _HANDLERS: ClassVar[dict[str, Callable[[CodexAppStream, dict[str, Any]], list[result_pb2.RunResult]]]]

    def __init__(self) -> None:
        super().__init__()
        self.turn_id = ""
        self.interrupted = False
        self.failure_info: Any = None
        #: `mcpServer/startupStatus/updated`: server name -> starting | ready | failed | cancelled
        self.mcp_status: dict[str, str] = {}
        self._phase: dict[str, str] = {}
        self._streamed: set[str] = set()

    @property
    def finished(self) -> bool:
        return self.completed or self.failed is not None or self.interrupted

    def notify(self, method: str, params: dict[str, Any]) -> list[result_pb2.RunResult]:
        """The results one app-server notification makes (none for the many that only report state)."""
        self.saw_event = True
        handler = self._HANDLERS.get(method)
        if handler is not None:
            return handler(self, params)
        if method in ("item/started", "item/completed"):
            item = params.get("item")
            return self._app_item(method.removeprefix("item/"), item) if isinstance(item, dict) else []
        if method in _WARNINGS:
            message = str(params.get("message") or "").strip()
            return [results.log(f"Codex: {message}", "warning")] if message else []
        if method in _SILENT or method.startswith(_SILENT_PREFIXES):
            return []
        self.skipped("notification", method)
        return []

    def _thread_started(self, params: dict[str, Any]) -> list[result_pb2.RunResult]:
        thread = params.get("thread")
        if isinstance(thread, dict) and thread.get("id") and not self.thread_id:
            self.thread_id = str(thread["id"])
        return []

    def _turn_started(self, params: dict[str, Any]) -> list[result_pb2.RunResult]:
        turn = params.get("turn")
        if isinstance(turn, dict) and turn.get("id"):
            self.turn_id = str(turn["id"])
        return []

    def _reasoning_delta(self, params: dict[str, Any]) -> list[result_pb2.RunResult]:
        delta = str(params.get("delta") or "")
        item_id = str(params.get("itemId") or "")
        if not delta or not item_id:
            return []
        return [results.delta(delta, message_id=f"{item_id}.reasoning", kind="reasoning")]

    def _plan_updated(self, params: dict[str, Any]) -> list[result_pb2.RunResult]:
        steps = params.get("plan")
        plan = [
            {"text": s.get("step", ""), "completed": s.get("status") == "completed"}
            for s in steps or []
            if isinstance(s, dict)
        ]
        return self._commentary() + self._plan(f"{self.turn_id or 'turn'}.plan", {"items": plan})

    def _token_usage(self, params: dict[str, Any]) -> list[result_pb2.RunResult]:
        usage = params.get("tokenUsage")
        total = usage.get("total") if isinstance(usage, dict) else None
        if isinstance(total, dict):
            self.usage = Usage.parse(
                {
                    "input_tokens": total.get("inputTokens"),
                    "cached_input_tokens": total.get("cachedInputTokens"),
                    "output_tokens": total.get("outputTokens"),
                }
            )
        return []

    # -- pieces ---------------------------------------------------------------------------------------

    def _app_item(self, phase: str, item: dict[str, Any]) -> list[result_pb2.RunResult]:
        mapped = exec_item(item)
        if mapped is None:
            if str(item.get("type")) not in _SILENT_ITEMS:
                self.skipped("item", str(item.get("type")))
            return []
        item_id = mapped["id"]
        if mapped["type"] == "agent_message":
            if item.get("phase"):
                self._phase[item_id] = str(item["phase"])
            if phase == "completed" and self._phase.get(item_id) in _COMMENTARY:
                if item_id in self._answered:
                    return []
                self._answered.add(item_id)
                out = self._commentary()
                text = mapped["text"]
                return out + (
                    [results.message(text, kind="progress", message_id=item_id)] if text.strip() else []
                )
        return self._item(phase, mapped)

    def _delta(self, params: dict[str, Any]) -> list[result_pb2.RunResult]:
        item_id = str(params.get("itemId") or "")
        delta = str(params.get("delta") or "")
        if not item_id or not delta or item_id in self._answered:
            return []
        out: list[result_pb2.RunResult] = []
        if item_id not in self._streamed:
            self._streamed.add(item_id)
            # a new message: the one held before it was commentary
            if self._pending is not None and self._pending[0] != item_id:
                out = self._commentary()
        kind = "progress" if self._phase.get(item_id) in _COMMENTARY else "answer"
        out.append(results.delta(delta, message_id=item_id, kind=kind))
        return out

    def _turn_completed(self, params: dict[str, Any]) -> list[result_pb2.RunResult]:
        turn = params.get("turn")
        turn = turn if isinstance(turn, dict) else {}
        status = str(turn.get("status") or "completed")
        if status == "failed":
            error = turn.get("error")
            error = error if isinstance(error, dict) else {}
            self.failed = str(error.get("message") or self.error or "the turn failed")
            self.failure_info = error.get("codexErrorInfo")
        elif status == "interrupted":
            self.interrupted = True
        else:
            self.completed = True
        return []

    def _mcp_status(self, params: dict[str, Any]) -> list[result_pb2.RunResult]:
        name, status = str(params.get("name") or ""), str(params.get("status") or "")
        if not name or not status:
            return []
        self.mcp_status[name] = status
        if status != "failed":
            return []
        reason = str(params.get("error") or "no reason given")[:500]
        return [results.log(f"Codex could not start the MCP server {name}: {reason}", "warning")]

    def _error(self, params: dict[str, Any]) -> list[result_pb2.RunResult]:
        error = params.get("error")
        message = str(error.get("message") if isinstance(error, dict) else error or "error")
        if params.get("willRetry"):
            info = error.get("codexErrorInfo") if isinstance(error, dict) else None
            more = str(error.get("additionalDetails") or "") if isinstance(error, dict) else ""
            said = f"{message} ({more})" if more else message
            log.warning("codex.transient_error", message=said[:200])
            if fatal_retry(said, info):
                self.fatal, self.failure_info = more or message, info
            return [results.log(f"Codex (retrying): {said}", "warning")]
        self.error = message
        if isinstance(error, dict):
            self.failure_info = error.get("codexErrorInfo")
        return []


CodexAppStream._HANDLERS = {
    "thread/started": CodexAppStream._thread_started,
    "turn/started": CodexAppStream._turn_started,
    "item/agentMessage/delta": CodexAppStream._delta,
    "item/reasoning/summaryTextDelta": CodexAppStream._reasoning_delta,
    "item/reasoning/textDelta": CodexAppStream._reasoning_delta,
    "turn/plan/updated": CodexAppStream._plan_updated,
    "thread/tokenUsage/updated": CodexAppStream._token_usage,
    "turn/completed": CodexAppStream._turn_completed,
    "error": CodexAppStream._error,
    "mcpServer/startupStatus/updated": CodexAppStream._mcp_status,
}
