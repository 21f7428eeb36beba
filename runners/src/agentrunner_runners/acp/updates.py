"""`session/update` notifications of one prompt turn, turned into LangBot results (no I/O here).

| update | results |
| --- | --- |
| `agent_message_chunk` (text) | `message.delta` (answer) under a message id of the runner's; the text of a message followed by a tool call or a plan was commentary: completed as `progress`; the last message is the answer, completed once by the runner (with the outbox files) |
| an `agent_message_chunk` an agent marks as its own notice (`_meta.<agent>.kind` `informational` / `notice`) | `run.log` warning, never answer text |
| `agent_thought_chunk` | `message.delta` kind `reasoning`, completed when the thought ends |
| `tool_call`, `tool_call_update` | `tool.call.started` (the agent's tool name, its input; a call announced without its input, as Claude's are, is held until the input arrives or anything else happens) and, at `completed` / `failed`, `tool.call.completed` with a preview of its content and output; a call still open when the turn ends is completed as `acp.tool_unfinished` |
| `plan` | a `progress` message: one `[ ]` / `[~]` / `[x]` line per entry |
| `usage_update` | kept: the context window use and the session's cumulative cost |
| `user_message_chunk`, commands, modes, config options, session info | nothing |

Every parameter and preview is redacted; text is redacted by the runner on its way out.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from typing import Any

import structlog
from acp import schema

from agentrunner import results
from agentrunner.harness import Redactor
from agentrunner.v1 import result_pb2

log = structlog.get_logger("agentrunner_runners.acp")

PREVIEW = 2000
NOTICE_KINDS = frozenset({"informational", "notice"})
_PLAN_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


@dataclasses.dataclass(slots=True)
class _Text:
    message_id: str
    kind: str
    parts: list[str] = dataclasses.field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.parts)


def _notice(update: schema.AgentMessageChunk) -> bool:
    meta = update.field_meta or {}
    return any(isinstance(v, dict) and v.get("kind") in NOTICE_KINDS for v in meta.values())


def _chunk_text(content: Any) -> str:
    if isinstance(content, schema.TextContentBlock):
        return content.text
    if isinstance(content, schema.ResourceContentBlock):
        return f"[{content.name}]({content.uri})"
    return ""


def content_text(items: list[Any] | None) -> str:
    """The text of a tool call's content: text blocks, diffs (their path), terminals (their id)."""
    out: list[str] = []
    for item in items or []:
        if isinstance(item, schema.ContentToolCallContent):
            out.append(_chunk_text(item.content))
        elif isinstance(item, schema.FileEditToolCallContent):
            out.append(f"(edit of {item.path})")
        elif isinstance(item, schema.TerminalToolCallContent):
            out.append(f"(terminal {item.terminal_id})")
    return "\n".join(t for t in out if t)


def _merged(
    held: schema.ToolCallStart, update: schema.ToolCallProgress | schema.ToolCallStart
) -> schema.ToolCallStart:
    """A held announcement completed by the update that brought its input (the update's fields win)."""
    fields = {k: v for k, v in update.model_dump(exclude_none=True).items() if k != "session_update"}
    meta = {**(held.field_meta or {}), **(update.field_meta or {})}
    return held.model_copy(update={**fields, "field_meta": meta or None})


def _tool_name(update: schema.ToolCallStart | schema.ToolCallProgress) -> str:
    for value in (update.field_meta or {}).values():
        if isinstance(value, dict) and isinstance(value.get("toolName"), str) and value["toolName"]:
            return str(value["toolName"])
    return update.title or "tool"


class TurnStream:
    """Feeds on one turn's session updates; `feed` returns the results to emit now (module docstring)."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        self.redact = redactor or Redactor()
        self._prefix = f"acp_{secrets.token_hex(4)}"
        self._count = 0
        self.answer: _Text | None = None
        self.thought: _Text | None = None
        self.progress: list[str] = []
        self.tools: dict[str, str] = {}
        #: every started call as announced (a permission request may name only its id)
        self.calls: dict[str, schema.ToolCallStart | schema.ToolCallProgress] = {}
        #: announced calls without their input yet (`tool_call` with an empty `rawInput`)
        self._held: dict[str, schema.ToolCallStart] = {}
        self._done_tools: set[str] = set()
        self.cost: schema.Cost | None = None
        self.context: tuple[int, int] | None = None
        self.updates = 0
        self.ignored = 0

    def _id(self) -> str:
        self._count += 1
        return f"{self._prefix}_{self._count}"

    # -- dispatch -------------------------------------------------------------------------------------

    def feed(self, update: Any) -> list[result_pb2.RunResult]:
        self.updates += 1
        if isinstance(update, schema.ToolCallStart | schema.ToolCallProgress):
            return self._tool(update)
        out = self._release()
        return out + self._other(update)

    def _other(self, update: Any) -> list[result_pb2.RunResult]:
        if isinstance(update, schema.AgentMessageChunk):
            return self._message(update)
        if isinstance(update, schema.AgentThoughtChunk):
            return self._thought(_chunk_text(update.content))
        if isinstance(update, schema.AgentPlanUpdate):
            return self._plan(update.entries)
        if isinstance(update, schema.UsageUpdate):
            self.context = (update.used, update.size)
            if update.cost is not None:
                self.cost = update.cost
            return []
        self.ignored += 1
        return []

    def _message(self, update: schema.AgentMessageChunk) -> list[result_pb2.RunResult]:
        text = _chunk_text(update.content)
        if not text:
            return []
        if _notice(update):
            return [results.log(self.redact(f"the agent says: {text.strip()}"), "warning")]
        out = self._end_thought()
        if self.answer is None:
            self.answer = _Text(self._id(), "answer")
        self.answer.parts.append(text)
        out.append(results.delta(text, message_id=self.answer.message_id))
        return out

    def _thought(self, text: str) -> list[result_pb2.RunResult]:
        if not text:
            return []
        out = self._commentary()
        if self.thought is None:
            self.thought = _Text(self._id(), "reasoning")
        self.thought.parts.append(text)
        out.append(results.delta(text, message_id=self.thought.message_id, kind="reasoning"))
        return out

    def _end_thought(self) -> list[result_pb2.RunResult]:
        thought, self.thought = self.thought, None
        if thought is None or not thought.text:
            return []
        return [results.message(thought.text, kind="reasoning", message_id=thought.message_id)]

    def _commentary(self) -> list[result_pb2.RunResult]:
        """The open message was not the answer (a tool call, a plan or a thought came after it)."""
        answer, self.answer = self.answer, None
        if answer is None:
            return []
        self.progress.append(answer.text)
        return [results.message(answer.text, kind="progress", message_id=answer.message_id)]

    # -- tools and plans ------------------------------------------------------------------------------

    def _release(self) -> list[result_pb2.RunResult]:
        """Starts the held calls as they are (something else happened: their input is not coming)."""
        out: list[result_pb2.RunResult] = []
        for held in list(self._held.values()):
            out += self._start(held)
        self._held.clear()
        return out

    def _tool(self, update: schema.ToolCallStart | schema.ToolCallProgress) -> list[result_pb2.RunResult]:
        call_id = update.tool_call_id
        if isinstance(update, schema.ToolCallStart) and call_id not in self.tools and not update.raw_input:
            if update.status in (None, "pending", "in_progress"):
                out = self._release()
                self._held[call_id] = update
                return out
        held = self._held.pop(call_id, None)
        out = self._release()
        if call_id not in self.tools:
            out += self._start(_merged(held, update) if held is not None else update)
        if update.status in ("completed", "failed") and call_id not in self._done_tools:
            out.append(self._tool_done(call_id, update))
        return out

    def known(self, call: schema.ToolCallUpdate) -> schema.ToolCallUpdate:
        """`call` (from a permission request) completed by what the turn's updates said about it: Codex's
        agent asks about a call by its id alone."""
        seen = self.calls.get(call.tool_call_id) or self._held.get(call.tool_call_id)
        if seen is None:
            return call
        fields = {k: v for k, v in seen.model_dump(exclude_none=True).items() if k in type(call).model_fields}
        asked = {k: v for k, v in call.model_dump(exclude_none=True).items()}
        meta = {**(seen.field_meta or {}), **(call.field_meta or {})}
        return schema.ToolCallUpdate.model_validate({**fields, **asked, "field_meta": meta or None})

    def _start(self, update: schema.ToolCallStart | schema.ToolCallProgress) -> list[result_pb2.RunResult]:
        call_id = update.tool_call_id
        out = self._end_thought() + self._commentary()
        name = _tool_name(update)
        self.tools[call_id] = name
        self.calls[call_id] = update
        params = update.raw_input if isinstance(update.raw_input, dict) else {}
        if update.raw_input is not None and not isinstance(update.raw_input, dict):
            params = {"input": update.raw_input}
        meta = {"title": update.title or name, "kind": update.kind or "other"}
        out.append(results.tool_started(call_id, name, self._redacted(params), metadata=meta))
        return out

    def _tool_done(
        self, call_id: str, update: schema.ToolCallStart | schema.ToolCallProgress
    ) -> result_pb2.RunResult:
        self._done_tools.add(call_id)
        text = content_text(update.content)
        if update.raw_output is not None:
            raw = update.raw_output
            text = (text + "\n" if text else "") + (
                raw if isinstance(raw, str) else json.dumps(raw, default=str)
            )
        text = self.redact(text)[:PREVIEW]
        preview = {"text": text} if text else {}
        name = self.tools[call_id]
        if update.status == "failed":
            return results.tool_completed(
                call_id, name, preview, error_code="tool.error", error_message=text[:500] or "tool failed"
            )
        return results.tool_completed(call_id, name, preview)

    def _plan(self, entries: list[schema.PlanEntry]) -> list[result_pb2.RunResult]:
        out = self._end_thought() + self._commentary()
        lines = [f"{_PLAN_MARK.get(e.status, '[ ]')} {e.content}" for e in entries]
        if lines:
            out.append(results.message("Plan:\n" + "\n".join(lines), kind="progress", message_id=self._id()))
        return out

    def _redacted(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, list):
            return [self._redacted(v) for v in value]
        if isinstance(value, dict):
            return {str(k): self._redacted(v) for k, v in value.items()}
        return value

    # -- the end --------------------------------------------------------------------------------------

    def finish(self) -> list[result_pb2.RunResult]:
        """The turn ended: the open thought is completed and open tool calls are closed."""
        out = self._release() + self._end_thought()
        for call_id, name in self.tools.items():
            if call_id not in self._done_tools:
                self._done_tools.add(call_id)
                out.append(
                    results.tool_completed(
                        call_id,
                        name,
                        error_code="acp.tool_unfinished",
                        error_message="the turn ended before the agent reported this tool call's end",
                    )
                )
        return out

    def abandon(self) -> list[result_pb2.RunResult]:
        """The turn failed: everything open is closed; streamed answer text stays only as progress."""
        out = self.finish()
        answer, self.answer = self.answer, None
        if answer is not None and answer.text:
            out.append(
                results.message(
                    answer.text,
                    kind="progress",
                    message_id=answer.message_id,
                    message_metadata={"abandoned": True},
                )
            )
        return out
