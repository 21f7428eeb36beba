"""Claude Code's `--output-format stream-json` output, turned into LangBot results (no I/O here).

Lines (public Claude Code docs): `system` (`subtype: init` with `session_id`, `model`, `tools`,
`mcp_servers`), `assistant` (a message with `text`, `thinking` and `tool_use` blocks; Claude Code sends
one line per block, repeating the message id), `user` (`tool_result` blocks), `stream_event` (with
`--include-partial-messages`: the API's `message_start`, `content_block_start` / `_delta` / `_stop`
with `text_delta`, `thinking_delta`, `input_json_delta`), and the final `result` (`subtype` `success` /
`error_max_turns` / `error_during_execution`, `is_error`, `result`, `usage`, `total_cost_usd`,
`session_id`, `num_turns`, `duration_ms`). Lines with `parent_tool_use_id` come from a sub-agent.

What becomes what:
- text is streamed as `message.delta` under the Claude message id; a message that goes on to call a
  tool was commentary, so it is completed as a `progress` message; the answer is the `result` text,
  delivered once as `message.completed` (by the runner, with the outbox artifacts), under the id of the
  last assistant message when that is the same text;
- thinking is reasoning (`kind=reasoning`), never answer text; sub-agent text is never the answer;
- `tool_use` / `tool_result` become `tool.call.started` / `tool.call.completed`, their parameters and
  previews redacted;
- text Claude Code writes itself (`model: "<synthetic>"`, e.g. "API Error: 500 ...") is not model
  output: never streamed, kept in `synthetic`;
- a streamed answer message that never completes (the CLI abandons its blocks after a broken stream,
  or the turn fails) is closed as a `progress` message (`abandoned` in its metadata) by `close_unfinished`,
  so no unfinished answer stays behind;
- `system` lines: `init` (model, MCP servers), `api_retry` (each retry of a failed API request, with
  `error_status`; a 401/403 sets `auth_failure` at once) and `permission_denied` become warnings in
  the run log;
- usage and cost come from the `result` line; a count it does not report stays unset.
Unknown line types are counted and skipped, never a failure.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import structlog

from agentrunner import results
from agentrunner.harness import Redactor
from agentrunner.v1 import common_pb2, result_pb2

log = structlog.get_logger("agentrunner_runners.claude_code")

_PREVIEW = 2000
_IGNORED_TYPES = frozenset({"rate_limit_event", "keep_alive"})
SYNTHETIC_MODEL = "<synthetic>"
AUTH_STATUSES = frozenset({401, 403})


@dataclasses.dataclass(slots=True)
class _Block:
    kind: str
    tool_id: str = ""
    tool_name: str = ""
    json: str = ""


@dataclasses.dataclass(slots=True)
class _Message:
    text: list[str] = dataclasses.field(default_factory=list)
    #: the streamed text deltas (the text of a message abandoned before its `assistant` line)
    partial: list[str] = dataclasses.field(default_factory=list)
    has_tool: bool = False
    streamed: bool = False
    #: answer deltas went out for it (it must be completed or closed)
    delta_sent: bool = False
    thinking_streamed: bool = False
    progress_sent: bool = False


class ClaudeStream:
    """Feeds on parsed stream-json lines; `feed` returns the results to emit now."""

    def __init__(self, *, streaming: bool, redactor: Redactor | None = None) -> None:
        self.streaming = streaming
        self.redact = redactor or Redactor()
        #: text Claude Code wrote itself (API error notices), never streamed as the answer
        self.synthetic: list[str] = []
        #: the `api_retry` line of a 401/403: the credentials were refused
        self.auth_failure: dict[str, Any] | None = None
        self.retries = 0
        self.session_id = ""
        self.model = ""
        self.result: dict[str, Any] | None = None
        self.saw_output = False
        self.unknown = 0
        self.mcp_servers: list[dict[str, Any]] = []
        self._messages: dict[str, _Message] = {}
        self._order: list[str] = []
        self._current = ""
        self._blocks: dict[int, _Block] = {}
        self._tools: dict[str, str] = {}  # tool_use id -> name (started)
        self._done_tools: set[str] = set()

    # -- dispatch -------------------------------------------------------------------------------------

    def feed(self, line: dict[str, Any]) -> list[result_pb2.RunResult]:
        kind = line.get("type")
        if isinstance(line.get("session_id"), str) and line["session_id"]:
            self.session_id = line["session_id"]
        if kind == "system":
            return self._system(line)
        if kind == "stream_event":
            return self._stream_event(line)
        if kind == "assistant":
            self.saw_output = True
            return self._assistant(line)
        if kind == "user":
            return self._user(line)
        if kind == "result":
            self.result = line
            return []
        if kind not in _IGNORED_TYPES:
            self.unknown += 1
            log.warning("claude_code.unknown_line", line_type=str(kind)[:64])
        return []

    def _system(self, line: dict[str, Any]) -> list[result_pb2.RunResult]:
        subtype = line.get("subtype")
        if subtype == "init":
            self.model = str(line.get("model") or "")
            servers = line.get("mcp_servers")
            self.mcp_servers = (
                [s for s in servers if isinstance(s, dict)] if isinstance(servers, list) else []
            )
        elif subtype == "api_retry":
            self.retries += 1
            status = line.get("error_status")
            if isinstance(status, int) and status in AUTH_STATUSES and self.auth_failure is None:
                self.auth_failure = line
            text = (
                f"Claude Code is retrying the model API after HTTP {status} {line.get('error') or ''}".rstrip()
                + f" (attempt {line.get('attempt')} of {line.get('max_retries')})"
            )
            return [results.log(self.redact(text), "warning")]
        elif subtype == "permission_denied":
            reason = self.redact(str(line.get("message") or "not allowed"))
            return [
                results.log(f"Claude Code refused {line.get('tool_name') or 'a tool'}: {reason}", "warning")
            ]
        return []

    # -- partial messages ---------------------------------------------------------------------------

    def _stream_event(self, line: dict[str, Any]) -> list[result_pb2.RunResult]:
        if line.get("parent_tool_use_id"):
            return []  # a sub-agent's stream: never the answer
        event = line.get("event") or {}
        etype = event.get("type")
        if etype == "message_start":
            self._current = str((event.get("message") or {}).get("id") or "")
            self._blocks.clear()
            self._message(self._current)
            return []
        index = event.get("index", 0)
        if etype == "content_block_start":
            spec = event.get("content_block") or {}
            self._blocks[index] = _Block(
                kind=str(spec.get("type") or ""),
                tool_id=str(spec.get("id") or ""),
                tool_name=str(spec.get("name") or ""),
            )
            return []
        if etype == "content_block_delta":
            return self._delta(index, event.get("delta") or {})
        if etype == "message_stop" and line.get("abandoned_blocks"):
            return self._close(self._current)  # the CLI dropped this message's blocks (a broken stream)
        if etype == "content_block_stop":
            block = self._blocks.pop(index, None)
            if block is not None and block.kind == "tool_use" and block.tool_id:
                self._message(self._current).has_tool = True
                try:
                    params = json.loads(block.json) if block.json.strip() else {}
                except json.JSONDecodeError:
                    params = {"_raw": block.json[:_PREVIEW]}
                return self._tool_started(block.tool_id, block.tool_name, params) + self._progress(
                    self._current
                )
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[result_pb2.RunResult]:
        dtype = delta.get("type")
        message = self._message(self._current)
        if dtype == "text_delta":
            text = str(delta.get("text") or "")
            if not text:
                return []
            self.saw_output = True
            if not self.streaming:
                return []
            message.streamed = message.delta_sent = True
            message.partial.append(text)
            return [results.delta(text, message_id=self._current)]
        if dtype == "thinking_delta":
            text = str(delta.get("thinking") or "")
            if not text or not self.streaming:
                return []
            message.thinking_streamed = True
            return [results.delta(text, message_id=f"{self._current}.thinking", kind="reasoning")]
        if dtype == "input_json_delta":
            block = self._blocks.get(index)
            if block is not None:
                block.json += str(delta.get("partial_json") or "")
        return []

    # -- complete messages --------------------------------------------------------------------------

    def _message(self, message_id: str) -> _Message:
        message = self._messages.get(message_id)
        if message is None:
            message = self._messages[message_id] = _Message()
            self._order.append(message_id)
        return message

    def _assistant(self, line: dict[str, Any]) -> list[result_pb2.RunResult]:
        body = line.get("message") or {}
        blocks = body.get("content")
        if not isinstance(blocks, list):
            return []
        if body.get("model") == SYNTHETIC_MODEL:
            self.synthetic += [
                str(b.get("text") or "") for b in blocks if isinstance(b, dict) and b.get("text")
            ]
            return []  # Claude Code's own notice (an API error), not the model's answer
        sub = bool(line.get("parent_tool_use_id"))
        message_id = str(body.get("id") or f"msg-{len(self._order) + 1}")
        message = self._message(f"sub:{message_id}" if sub else message_id)
        out: list[result_pb2.RunResult] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype == "tool_use":
                meta = {"parent_tool_use_id": line["parent_tool_use_id"]} if sub else None
                out += self._tool_started(
                    str(block.get("id") or ""), str(block.get("name") or ""), block.get("input"), meta
                )
                if not sub:
                    message.has_tool = True
                    out += self._progress(message_id)
            elif sub:
                continue  # a sub-agent's text or thinking is not this run's answer
            elif btype == "text" and block.get("text"):
                text = str(block["text"])
                message.text.append(text)
                if self.streaming and not message.streamed:
                    message.delta_sent = True
                    out.append(results.delta(text, message_id=message_id))
                if message.has_tool:
                    out += self._progress(message_id)
            elif btype == "thinking" and block.get("thinking") and not message.thinking_streamed:
                out.append(
                    results.message(
                        str(block["thinking"]), kind="reasoning", message_id=f"{message_id}.thinking"
                    )
                )
        return out

    def _progress(self, message_id: str) -> list[result_pb2.RunResult]:
        """A message that calls a tool was commentary: completed once as `progress`."""
        message = self._messages.get(message_id)
        if message is None or message.progress_sent or not message.text:
            return []
        message.progress_sent = True
        return [results.message("".join(message.text), kind="progress", message_id=message_id)]

    def _close(self, message_id: str) -> list[result_pb2.RunResult]:
        """A streamed message that will never be completed is closed as `progress` (abandoned)."""
        message = self._messages.get(message_id)
        if message is None or message.progress_sent or not message.delta_sent:
            return []
        message.progress_sent = True
        text = "".join(message.text) or "".join(message.partial)
        return [
            results.message(
                text or "(abandoned)",
                kind="progress",
                message_id=message_id,
                message_metadata={"abandoned": True},
            )
        ]

    def close_unfinished(self, keep: str = "") -> list[result_pb2.RunResult]:
        """Closes every streamed message except `keep` (the answer's) that was not completed."""
        out: list[result_pb2.RunResult] = []
        for message_id in self._order:
            if message_id != keep and not message_id.startswith("sub:"):
                out += self._close(message_id)
        return out

    def _tool_started(
        self, tool_id: str, name: str, params: Any, metadata: dict[str, Any] | None = None
    ) -> list[result_pb2.RunResult]:
        if not tool_id or tool_id in self._tools:
            return []
        self._tools[tool_id] = name or "tool"
        parameters = params if isinstance(params, dict) else ({"input": params} if params is not None else {})
        return [results.tool_started(tool_id, name or "tool", self._redacted(parameters), metadata=metadata)]

    def _redacted(self, value: Any) -> Any:
        """`value` with every string redacted (tool parameters can carry what a command printed)."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, list):
            return [self._redacted(v) for v in value]
        if isinstance(value, dict):
            return {k: self._redacted(v) for k, v in value.items()}
        return value

    def _user(self, line: dict[str, Any]) -> list[result_pb2.RunResult]:
        content = (line.get("message") or {}).get("content")
        if not isinstance(content, list):
            return []
        out: list[result_pb2.RunResult] = []
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            tool_id = str(block.get("tool_use_id") or "")
            if tool_id not in self._tools or tool_id in self._done_tools:
                continue
            self._done_tools.add(tool_id)
            text = self.redact(_result_text(block.get("content")))
            name = self._tools[tool_id]
            preview = {"text": text[:_PREVIEW]} if text else {}
            if block.get("is_error"):
                out.append(
                    results.tool_completed(
                        tool_id,
                        name,
                        preview,
                        error_code="tool.error",
                        error_message=text[:500] or "tool error",
                    )
                )
            else:
                out.append(results.tool_completed(tool_id, name, preview))
        return out

    # -- the end --------------------------------------------------------------------------------------

    def answer_message_id(self, answer: str) -> str:
        """The id of the last top-level assistant message when its text is the answer (so clients merge
        the streamed text with the final message), else a fresh id."""
        for message_id in reversed(self._order):
            message = self._messages[message_id]
            if message_id.startswith("sub:") or not message.text:
                continue
            if not message.has_tool and "".join(message.text).strip() == answer.strip():
                return message_id
            break
        return results.new_id("msg")

    def usage(self, cost: dict[str, Any] | None = None) -> common_pb2.Usage | None:
        """Usage from the `result` line (tokens are the run's own), with `cost` (this run's share of the
        session's cumulative cost and API time, from `accounting`) in `extra`; unknown counts stay unset."""
        if self.result is None:
            return None
        raw = self.result.get("usage")
        raw = raw if isinstance(raw, dict) else {}
        prompt_parts = [
            raw.get(k) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        ]
        known = [int(v) for v in prompt_parts if isinstance(v, int | float) and not isinstance(v, bool)]
        prompt = sum(known) if isinstance(raw.get("input_tokens"), int | float) else None
        output = raw.get("output_tokens")
        completion = int(output) if isinstance(output, int | float) and not isinstance(output, bool) else None
        extra: dict[str, Any] = {}
        for key in ("cache_creation_input_tokens", "cache_read_input_tokens"):
            if isinstance(raw.get(key), int | float):
                extra[key] = raw[key]
        for key in ("num_turns", "duration_ms"):
            value = self.result.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                extra[key] = value
        extra.update(cost or {})
        if prompt is None and completion is None and not extra:
            return None
        return results.usage(prompt, completion, **extra)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(c.get("text", "")) for c in content if isinstance(c, dict) and c.get("type") == "text"
        )
    return "" if content is None else json.dumps(content)[:_PREVIEW]
