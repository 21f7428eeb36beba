"""`codex exec --json` events, turned into LangBot results (no I/O here).

Events (public codex sources, `codex-rs/exec/src/exec_events.rs`): `thread.started{thread_id}`,
`turn.started`, `item.started` / `item.updated` / `item.completed{item{id, type, ...}}` with item types
`agent_message{text}`, `reasoning{text}`, `command_execution{command, aggregated_output, exit_code,
status}`, `file_change{changes[{path, kind}], status}`, `mcp_tool_call{server, tool, arguments, result,
error, status}`, `web_search{query}`, `todo_list{items[{text, completed}]}`, `error{message}`;
`turn.completed{usage{input_tokens, cached_input_tokens, output_tokens}}`, `turn.failed{error{message}}`
and a top-level `error{message}`.

What becomes what:
- an agent message is held until the next event tells what it was: a message followed by a tool-like
  item, a plan or another message was commentary and is completed as `progress`; the last one of a
  completed turn is the answer (delivered once, by the runner, with the outbox files). The same item id
  completed twice counts once.
- reasoning is `kind=reasoning`, never answer text;
- command executions, file changes, MCP tool calls and web searches become `tool.call.started` /
  `tool.call.completed` (an item completed without a start gets both);
- a todo list is a progress message each time it changes;
- `error` items and transient top-level errors ("Reconnecting... 1/5", "stream disconnected - retrying")
  are warnings, not failures; another top-level error is kept as the turn's error. A transient error
  that cannot go away by retrying (the model API refused the credentials: 401 / 403) is kept as
  `fatal`, so the runner stops the turn at once instead of waiting for Codex's reconnects.
Unknown event and item types are counted and skipped (logged once per type).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import structlog

from agentrunner import results
from agentrunner.v1 import common_pb2, result_pb2
from agentrunner_runners.codex.failures import fatal_retry

log = structlog.get_logger("agentrunner_runners.codex")

_PREVIEW = 2000
_TOOL_ITEMS = frozenset({"command_execution", "file_change", "mcp_tool_call", "web_search"})
_TRANSIENT = re.compile(r"reconnecting|retrying|stream disconnected|temporarily unavailable", re.I)


@dataclasses.dataclass(slots=True)
class Usage:
    """Token counts as codex reports them (on a resumed thread: the thread's running total)."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0

    @classmethod
    def parse(cls, raw: Any) -> Usage | None:
        if not isinstance(raw, dict):
            return None
        counts = {}
        for name in ("input_tokens", "cached_input_tokens", "output_tokens"):
            value = raw.get(name)
            counts[name] = int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
        return cls(**counts)

    def minus(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens - other.input_tokens,
            self.cached_input_tokens - other.cached_input_tokens,
            self.output_tokens - other.output_tokens,
        )

    def covers(self, other: Usage) -> bool:
        """Whether `self` can be a later running total than `other` (no count went down)."""
        return (
            self.input_tokens >= other.input_tokens
            and self.cached_input_tokens >= other.cached_input_tokens
            and self.output_tokens >= other.output_tokens
        )

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def to_proto(self) -> common_pb2.Usage:
        return results.usage(
            self.input_tokens, self.output_tokens, cached_input_tokens=self.cached_input_tokens
        )


class CodexExecStream:
    """Feeds on parsed exec events; `feed` returns the results to emit now."""

    def __init__(self) -> None:
        self.thread_id = ""
        self.completed = False
        self.failed: str | None = None
        self.error: str | None = None
        self.usage: Usage | None = None
        self.saw_event = False
        #: a transient error no retry can fix (`fatal_retry`): the turn must stop
        self.fatal: str | None = None
        self.unknown = 0
        self._unknown_seen: set[str] = set()
        self._pending: tuple[str, str] | None = None  # (item id, text) of the last agent message
        self._answered: set[str] = set()
        self._tools: dict[str, str] = {}  # item id -> tool name (started)
        self._done: set[str] = set()
        self._plans: dict[str, int] = {}
        self._reasoning: set[str] = set()

    @property
    def answer(self) -> tuple[str, str] | None:
        """(item id, text) of the answer once the turn completed."""
        return self._pending if self.completed else None

    def feed(self, event: dict[str, Any]) -> list[result_pb2.RunResult]:
        self.saw_event = True
        kind = event.get("type")
        if kind == "thread.started":
            self.thread_id = str(event.get("thread_id") or "")
            return []
        if kind == "turn.started":
            return []
        if kind in ("item.started", "item.updated", "item.completed"):
            item = event.get("item")
            if isinstance(item, dict):
                return self._item(str(kind).removeprefix("item."), item)
            return []
        if kind == "turn.completed":
            self.completed = True
            self.usage = Usage.parse(event.get("usage"))
            return []
        if kind == "turn.failed":
            error = event.get("error") or {}
            self.failed = str(error.get("message") if isinstance(error, dict) else error) or "turn failed"
            return []
        if kind == "error":
            message = str(event.get("message") or "error")
            if _TRANSIENT.search(message):
                log.warning("codex.transient_error", message=message[:200])
                if fatal_retry(message):
                    self.fatal = message
                return [results.log(f"Codex: {message}", "warning")]
            self.error = message
            return []
        self.skipped("event", str(kind))
        return []

    def skipped(self, what: str, name: str) -> None:
        """Counts something Codex sent that the runner does not know; logs each name once."""
        self.unknown += 1
        if name not in self._unknown_seen:
            self._unknown_seen.add(name)
            log.info(f"codex.unknown_{what}", name=name[:64])

    # -- items ----------------------------------------------------------------------------------------

    def _item(self, phase: str, item: dict[str, Any]) -> list[result_pb2.RunResult]:
        item_id = str(item.get("id") or "")
        itype = item.get("type") or item.get("item_type")
        if itype == "agent_message":
            if phase != "completed" or not item_id or item_id in self._answered:
                return []
            self._answered.add(item_id)
            out = self._commentary()
            text = str(item.get("text") or "")
            if text.strip():
                self._pending = (item_id, text)
            return out
        if itype == "reasoning":
            text = str(item.get("text") or "")
            if phase != "completed" or not text.strip() or item_id in self._reasoning:
                return []
            self._reasoning.add(item_id)
            return [results.message(text, kind="reasoning", message_id=f"{item_id}.reasoning")]
        if itype in _TOOL_ITEMS:
            out = self._commentary()
            return out + self._tool(phase, str(itype), item_id, item)
        if itype == "todo_list":
            return self._commentary() + self._plan(item_id, item)
        if itype == "error":
            if phase == "completed":
                log.warning("codex.error_item", message=str(item.get("message"))[:200])
                return [results.log(f"Codex: {item.get('message') or 'error'}", "warning")]
            return []
        self.skipped("item", str(itype))
        return []

    def _commentary(self) -> list[result_pb2.RunResult]:
        """The held agent message was not the last: it was commentary (progress)."""
        if self._pending is None:
            return []
        item_id, text = self._pending
        self._pending = None
        return [results.message(text, kind="progress", message_id=item_id)]

    def _tool(self, phase: str, itype: str, item_id: str, item: dict[str, Any]) -> list[result_pb2.RunResult]:
        if not item_id or item_id in self._done:
            return []
        name, params = _tool_call(itype, item)
        out: list[result_pb2.RunResult] = []
        if item_id not in self._tools:
            self._tools[item_id] = name
            out.append(results.tool_started(item_id, name, params))
        if phase != "completed":
            return out
        self._done.add(item_id)
        preview, error = _tool_outcome(itype, item)
        if error:
            out.append(
                results.tool_completed(item_id, name, preview, error_code="tool.error", error_message=error)
            )
        else:
            out.append(results.tool_completed(item_id, name, preview))
        return out

    def _plan(self, item_id: str, item: dict[str, Any]) -> list[result_pb2.RunResult]:
        steps = item.get("items")
        if not isinstance(steps, list) or not steps:
            return []
        version = self._plans.get(item_id, 0) + 1
        self._plans[item_id] = version
        text = "\n".join(
            f"[{'x' if s.get('completed') else ' '}] {s.get('text', '')}"
            for s in steps
            if isinstance(s, dict)
        )
        return [results.message(text, kind="progress", message_id=f"{item_id}.plan{version}")]


def _tool_call(itype: str, item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if itype == "command_execution":
        return "shell", {"command": str(item.get("command") or "")}
    if itype == "file_change":
        changes = item.get("changes")
        return "apply_patch", {"changes": changes[:100] if isinstance(changes, list) else []}
    if itype == "mcp_tool_call":
        name = f"{item.get('server') or 'mcp'}.{item.get('tool') or 'tool'}"
        arguments = item.get("arguments")
        return name, arguments if isinstance(arguments, dict) else {"arguments": arguments}
    return "web_search", {"query": str(item.get("query") or "")}


def _tool_outcome(itype: str, item: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The result preview and an error message ("" when it went well)."""
    status = str(item.get("status") or "completed")
    if itype == "command_execution":
        output = str(item.get("aggregated_output") or "")
        preview: dict[str, Any] = {"text": output[-_PREVIEW:], "exit_code": item.get("exit_code")}
        code = item.get("exit_code")
        failed = status in ("failed", "declined") or code not in (0, None)
        said = f"command {status}" + (f", exit code {code}" if code is not None else "")
        return preview, (said if failed else "")
    if itype == "mcp_tool_call":
        error = item.get("error")
        if isinstance(error, dict) and error.get("message"):
            return {}, str(error["message"])[:500]
        result = item.get("result")
        content = result.get("content") if isinstance(result, dict) else None
        blocks = content if isinstance(content, list) else []
        text = "\n".join(str(c.get("text", "")) for c in blocks if isinstance(c, dict))
        return ({"text": text[:_PREVIEW]} if text else {}), (
            f"tool call {status}" if status in ("failed", "declined") else ""
        )
    if itype == "file_change":
        problems = {"failed": "the patch did not apply", "declined": "the change was declined"}
        return {"status": status}, problems.get(status, "")
    return {}, ""


def parse_usage_state(value: Any) -> tuple[str, Usage] | None:
    """The stored `{thread_id, input_tokens, ...}` running total, or None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    usage = Usage.parse(value)
    return (str(value.get("thread_id") or ""), usage) if usage is not None else None
