"""The reference runner, `plugin:langbot/reference/default`: small, and driven by its input text so host
tests can reach every path.

Input (stripped) -> behaviour:

- anything else: replies `echo: <text>` (prefix from config `prefix`). When
  `ctx.delivery.supports_streaming`, the reply is first streamed as 3 `message.delta` increments. When
  the run may page history (`available_apis.history_page`), it pulls one page (`ListHistory`, limit 50).
  It reads the conversation-state counter `reference.turns`, emits `state.updated` (scope conversation,
  key `reference.turns`, value N) and ends with `run.completed` carrying the full message. The
  `run.completed` envelope metadata (and the message metadata) holds `turn` (N) and `history_items`
  (number of items in the history page; absent when history was not pulled, with `history_error` set
  to the error reason when the pull failed).
- `fail`: raises; the SDK ends the run with `run.failed` code `runner.exception`.
- `fail:controlled`: yields `run.failed` code `runner.error` itself.
- `stall`: awaits forever (until the run is cancelled or its deadline passes).
- `slow:N`: N deltas `tick i ` 100 ms apart, then `run.completed` with their text. When a cancel
  signal arrives on the control stream it stops at the next tick with `run.failed` code `cancelled`.
- `empty`: `run.completed` with no message at all.
- `malformed:oversize`: one `message.delta` larger than 1 MiB, then a normal reply.
- `malformed:unknown`: a result whose payload uses oneof field number 99 (unknown to the contract,
  kept by protobuf as an unknown field), then a normal reply.
- `malformed:state`: a `state.updated` with scope UNSPECIFIED, then a normal reply.
- `tool:<name> <json>`: calls the tool through `ctx.api.call_tool` with the JSON object as parameters,
  emitting `tool.call.started`/`tool.call.completed`, and replies with the tool's text. A failed call is
  reported in `tool.call.completed` (`error_code` = spec code) and the reply is
  `tool error: <code>: <message>`. `tool!:<name> <json>` does the same without the SDK's local
  pre-check against `ctx.resources`, so the host's own enforcement can be exercised.
- `steer`: waits up to 5 s for one steering input and replies `steered: <text>` (`steered: ` plus
  `(none)` when nothing arrived).
- `ask:<question>`: keeps the question in conversation state (`reference.pending`), asks for an
  answer with a form (a text field `answer`, actions `submit` / `skip`) and replies `asked: <question>`.
- an `interaction.submitted` event (the answer to `ask:`, whichever binding routed it): reads the
  question back from conversation state and replies `answer to "<question>" (<action>): <answer>`, or
  `answer to an unknown question ...` when the state is not there.

"Normal reply" above means `run.completed` with message `echo: <text>`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from agentrunner import RunContext, Runner, interactions, results, tool_text
from agentrunner.errors import AgentRunnerError
from agentrunner.v1 import common_pb2, proxy_service_pb2, result_pb2

TURNS_KEY = "reference.turns"
PENDING_KEY = "reference.pending"
OVERSIZE_BYTES = (1 << 20) + 1024
#: A RunResult payload at oneof field 99 (wire type 2) holding `{1: 1}`: unknown to every v1 reader.
UNKNOWN_PAYLOAD = bytes([0x9A, 0x06, 0x02, 0x08, 0x01])


def _chunks(text: str, parts: int = 3) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


async def _each(*items: result_pb2.RunResult) -> AsyncIterator[result_pb2.RunResult]:
    for item in items:
        yield item


def _bad_state() -> result_pb2.RunResult:
    bad = result_pb2.StateUpdated(scope=common_pb2.STATE_SCOPE_UNSPECIFIED, key="reference.bad")
    bad.value.number_value = 1
    return result_pb2.RunResult(state_updated=bad)


#: inputs answered by a fixed list of results (given the normal reply)
_CANNED: dict[str, Callable[[str], list[result_pb2.RunResult]]] = {
    "empty": lambda reply: [results.completed()],
    "malformed:oversize": lambda reply: [results.delta("x" * OVERSIZE_BYTES), results.completed(reply)],
    "malformed:unknown": lambda reply: [
        result_pb2.RunResult.FromString(UNKNOWN_PAYLOAD),
        results.completed(reply),
    ],
    "malformed:state": lambda reply: [_bad_state(), results.completed(reply)],
}


class ReferenceRunner(Runner):
    """Echo runner with scripted failure modes (manifest: `manifest.yaml` next to this module)."""

    async def run(self, ctx: RunContext) -> AsyncIterator[result_pb2.RunResult]:
        text = ctx.input.to_text().strip()
        prefix = str(ctx.config.get("prefix", "echo: "))
        reply = f"{prefix}{text}"
        if text == "fail":
            raise RuntimeError("reference runner failure requested")
        if text == "fail:controlled":
            yield results.failed("runner.error", "controlled failure requested")
            return
        if text == "stall":
            await asyncio.Event().wait()
        async for r in self._scenario(ctx, text, reply):
            yield r

    def _scenario(self, ctx: RunContext, text: str, reply: str) -> AsyncIterator[result_pb2.RunResult]:
        """The results for `text` (the module docstring's table; an answered interaction first)."""
        if ctx.input.interaction is not None:
            return _each(self._answered(ctx))
        if text.startswith("ask:"):
            return self._ask(ctx, text.removeprefix("ask:").strip())
        if text.startswith("slow:"):
            return self._slow(ctx, text)
        if text.startswith(("tool:", "tool!:")):
            return self._tool(ctx, text)
        if text == "steer":
            return self._steer(ctx)
        canned = _CANNED.get(text)
        if canned is not None:
            return _each(*canned(reply))
        return self._echo(ctx, reply)

    @staticmethod
    async def _steer(ctx: RunContext) -> AsyncIterator[result_pb2.RunResult]:
        item = await ctx.steering.get(timeout=5.0)
        yield results.completed(f"steered: {item.input.text if item is not None else '(none)'}")

    async def _echo(self, ctx: RunContext, reply: str) -> AsyncIterator[result_pb2.RunResult]:
        meta: dict[str, Any] = {}
        if ctx.api.available and ctx.context.available_apis.history_page:
            try:
                page = await ctx.api.list_history(limit=50)
                meta["history_items"] = len(page.items)
            except AgentRunnerError as exc:
                meta["history_error"] = exc.reason
        turn = int(ctx.state.conversation.get(TURNS_KEY, 0) or 0) + 1
        meta["turn"] = turn
        message_id = results.new_id("msg")
        if ctx.delivery.supports_streaming:
            for piece in _chunks(reply):
                yield results.delta(piece, message_id=message_id)
        yield results.state("conversation", TURNS_KEY, turn)
        yield results.completed(reply, message_id=message_id, message_metadata=meta, metadata=meta)

    async def _ask(self, ctx: RunContext, question: str) -> AsyncIterator[result_pb2.RunResult]:
        yield results.state("conversation", PENDING_KEY, question)
        await ctx.request_form(
            question or "Your answer?",
            [interactions.field("answer", "Answer", "text", required=True)],
            actions=[("submit", "Submit", "primary"), ("skip", "Skip")],
        )
        yield results.completed(f"asked: {question}")

    @staticmethod
    def _answered(ctx: RunContext) -> result_pb2.RunResult:
        question = ctx.state.conversation.get(PENDING_KEY)
        submission = ctx.input.interaction
        action = submission.action_id if submission is not None else ""
        answer = ctx.input.interaction_values.get("answer", "")
        if not question:
            return results.completed(
                f"answer to an unknown question (no conversation state) ({action}): {answer}"
            )
        return results.completed(f'answer to "{question}" ({action}): {answer}')

    async def _slow(self, ctx: RunContext, text: str) -> AsyncIterator[result_pb2.RunResult]:
        try:
            count = int(text.removeprefix("slow:"))
        except ValueError:
            yield results.failed("runner.error", f"bad tick count in {text!r}")
            return
        sent = []
        for i in range(count):
            if i:
                await asyncio.sleep(0.1)
            if ctx.cancelled.is_set():
                yield results.failed("cancelled", f"cancelled after {i} ticks: {ctx.cancel_reason}")
                return
            piece = f"tick {i} "
            sent.append(piece)
            yield results.delta(piece)
        yield results.completed("".join(sent))

    async def _tool(self, ctx: RunContext, text: str) -> AsyncIterator[result_pb2.RunResult]:
        checked = text.startswith("tool:")
        spec = text.split(":", 1)[1]
        name, _, raw_args = spec.partition(" ")
        try:
            params = json.loads(raw_args) if raw_args.strip() else {}
            if not isinstance(params, dict):
                raise ValueError("tool arguments must be a JSON object")
        except ValueError as exc:
            yield results.failed("runner.error", f"bad tool arguments: {exc}")
            return
        call_id = results.new_id("call")
        yield results.tool_started(call_id, name, params)
        try:
            if checked:
                resp = await ctx.api.call_tool(name, params, tool_call_id=call_id)
            else:
                request = proxy_service_pb2.CallToolRequest(
                    tool_name=name, parameters=results.to_struct(params), tool_call_id=call_id
                )
                resp = await ctx.api.call("CallTool", request)
        except AgentRunnerError as exc:
            yield results.tool_completed(call_id, name, error=exc)
            yield results.completed(f"tool error: {exc.spec_code}: {exc.message}")
            return
        out = tool_text(resp)
        yield results.tool_completed(call_id, name, {"text": out[:200], "is_error": resp.is_error})
        yield results.completed(out)
