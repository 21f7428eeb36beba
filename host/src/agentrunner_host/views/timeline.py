"""A run's results as a timeline people can read: one entry per message, not one row per delta.

`Timeline` takes a run's stream items in order (stored or live `RunResult`s, and the `Reply` /
`Interaction` updates of `AttachRun`) and keeps entries: a `message` gathers the deltas and the
completion of one `message_id`; tool calls pair `tool.call.started` with `tool.call.completed`; logs,
state updates, artifacts, interactions, replies and the terminal result are entries of their own.
Used by `agentrunner-host runs show` and by the web console's run page, so both show the same thing.
Entries are JSON-ready dicts (usage numbers as numbers).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from agentrunner import results
from agentrunner.v1 import common_pb2, result_pb2
from agentrunner_host.views.jsonview import usage_dict

LOG_LEVELS = {0: "info", 1: "debug", 2: "info", 3: "warning", 4: "error"}


def _struct(message: Message, field: str) -> dict[str, Any]:
    return json_format.MessageToDict(getattr(message, field)) if message.HasField(field) else {}


def kind_name(message: Message) -> str:
    """The kind of a delta or a message: `answer`, `reasoning` or `progress`."""
    return results.kind_name(getattr(message, "kind", 0))


class Timeline:
    """Entries of one run, built incrementally (`add`) so a live page can use it as well."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._messages: dict[str, dict[str, Any]] = {}
        self._tools: dict[str, dict[str, Any]] = {}
        self.usage: dict[str, Any] = {}

    def extend(self, items: Iterable[Any]) -> Timeline:
        for item in items:
            self.add(item)
        return self

    def add(self, item: Any) -> dict[str, Any] | None:
        """Adds one stream item (a `RunResult`, or an update with `result` / `reply` / `interaction`);
        returns the entry it created or changed."""
        if isinstance(item, result_pb2.RunResult):
            return self._result(item)
        kind = item.WhichOneof("update") if hasattr(item, "WhichOneof") else None
        if kind == "result":
            return self._result(item.result)
        if kind == "reply":
            reply = item.reply
            mode = common_pb2.ReplyMode.Name(reply.mode).removeprefix("REPLY_MODE_").lower()
            return self._push({"kind": "reply", "reply_id": reply.reply_id, "mode": mode,
                               "text": reply.message.content})  # fmt: skip
        if kind == "interaction":
            req = item.interaction.request
            return self._push(
                {"kind": "interaction", "interaction_id": req.interaction_id, "title": req.title,
                 "fields": [f.id for f in req.fields], "actions": [a.id for a in req.actions]}
            )  # fmt: skip
        return None

    def _push(self, entry: dict[str, Any]) -> dict[str, Any]:
        self.entries.append(entry)
        return entry

    def _message(self, message_id: str, sequence: int) -> dict[str, Any]:
        entry = self._messages.get(message_id)
        if entry is None:
            entry = self._push({"kind": "message", "message_id": message_id, "text": "", "deltas": 0,
                                "first_sequence": sequence, "last_sequence": sequence,
                                "completed": False, "message_kind": "answer"})  # fmt: skip
            self._messages[message_id] = entry
        entry["last_sequence"] = sequence
        return entry

    def _result(self, r: result_pb2.RunResult) -> dict[str, Any] | None:
        payload = r.WhichOneof("payload")
        if r.HasField("usage"):
            self.usage = usage_dict(r.usage)
        seq = int(r.sequence)
        if payload == "message_delta":
            d = r.message_delta
            entry = self._message(d.message_id, seq)
            entry["text"] = d.cumulative_text if d.HasField("cumulative_text") else entry["text"] + d.text
            entry["deltas"] += 1
            entry["message_kind"] = kind_name(d)
            return entry
        if payload in ("message_completed", "run_completed"):
            message = getattr(r, payload).message
            if payload == "run_completed" and not (message.content or message.message_id in self._messages):
                return self._terminal(r, "completed")
            entry = self._message(message.message_id, seq)
            entry["text"] = message.content or entry["text"]
            entry["completed"] = True
            entry["message_kind"] = kind_name(message)
            if payload == "run_completed":
                self._terminal(r, "completed")
            return entry
        if payload == "tool_call_started":
            call = r.tool_call_started
            entry = self._push({"kind": "tool_call", "sequence": seq, "tool_call_id": call.tool_call_id,
                                "tool_name": call.tool_name, "parameters": _struct(call, "parameters"),
                                "status": "running"})  # fmt: skip
            self._tools[call.tool_call_id] = entry
            return entry
        if payload == "tool_call_completed":
            done = r.tool_call_completed
            entry = self._tools.get(done.tool_call_id) or self._push(
                {"kind": "tool_call", "sequence": seq, "tool_call_id": done.tool_call_id,
                 "tool_name": done.tool_name, "parameters": {}}
            )  # fmt: skip
            entry["status"] = "failed" if done.error_code else "completed"
            entry["error_code"] = done.error_code
            entry["error_message"] = done.error_message
            entry["result_preview"] = _struct(done, "result_preview")
            return entry
        if payload == "run_failed":
            return self._terminal(r, "failed")
        if payload == "run_log":
            return self._push({"kind": "log", "sequence": seq, "level": LOG_LEVELS.get(r.run_log.level, "info"),
                               "text": r.run_log.text})  # fmt: skip
        if payload is None:
            return None
        detail = json_format.MessageToDict(getattr(r, payload), preserving_proto_field_name=True)
        return self._push({"kind": payload, "sequence": seq, "detail": detail})

    def _terminal(self, r: result_pb2.RunResult, status: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"kind": "terminal", "sequence": int(r.sequence), "status": status}
        if status == "failed":
            entry.update(
                code=r.run_failed.code, message=r.run_failed.message, retryable=r.run_failed.retryable
            )
        if r.HasField("usage"):
            entry["usage"] = usage_dict(r.usage)
        return self._push(entry)


def build_timeline(items: Iterable[Any]) -> list[dict[str, Any]]:
    return Timeline().extend(items).entries
