"""The fleet suite's runner: an SDK runner (control stream, steering, replies, interactions, run records)
whose input text picks what it does (first word, then arguments):

- `stream N MS`: N deltas MS ms apart, then `run.completed`; a cancel signal ends it at once with the
  runner's own `run.failed cancelled` ("runner stopped: <reason>": the signal reached it);
- `hold S`: one delta, then open for S seconds (a cancel signal ends it the same way);
- `reply`: a reply through `SendReply`, then `run.completed`;
- `steer S`: waits up to S seconds for steering input (control stream), then completes with its text;
- `ask`: an interaction (a confirmation); its answer's run completes with the action chosen;
- `send CONVERSATION`: `SendMessage` to that conversation, then `run.completed`.

`FLEET_RUNNER_LOG` (a file) gets one JSON line per run: run id, token, mode and proxy endpoint, so a
test can call the host as the runner of a run.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from agentrunner import RunContext, Runner, results
from agentrunner.v1 import result_pb2

RUNNER_ID = "plugin:test/fleet/default"


def _report(ctx: RunContext, mode: str) -> None:
    path = os.environ.get("FLEET_RUNNER_LOG")
    if path:
        entry = {"run_id": ctx.run_id, "token": ctx.api.run_token, "mode": mode, "endpoint": ctx.api.endpoint}
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")


async def _cancelled(ctx: RunContext, seconds: float) -> bool:
    """Waits `seconds` or until a cancel signal arrives; True when it did."""
    try:
        await asyncio.wait_for(ctx.cancelled.wait(), seconds)
    except TimeoutError:
        return False
    return True


def _stopped(ctx: RunContext) -> result_pb2.RunResult:
    return results.failed("cancelled", f"runner stopped: {ctx.cancel_reason}", kind="cancelled")


class FleetRunner(Runner):
    manifest: ClassVar[dict[str, Any]] = {
        "id": RUNNER_ID,
        "label": "Fleet",
        "capabilities": ["streaming", "interrupt", "steering", "interactions"],
        "permissions": {
            "runs": ["get", "list", "events_page", "cancel", "append_result", "finalize"],
            "platform_api": ["send_message"],
        },
    }

    async def run(self, ctx: RunContext) -> AsyncIterator[result_pb2.RunResult]:
        if ctx.input.interaction is not None:
            yield results.completed(f"answered: {ctx.input.interaction.action_id}")
            return
        mode, _, arg = ctx.input.to_text().strip().partition(" ")
        _report(ctx, mode)
        if mode == "stream":
            count, _, ms = arg.partition(" ")
            async for r in self._stream(ctx, int(count or 10), float(ms or 10) / 1000):
                yield r
        elif mode == "hold":
            yield results.delta("holding")
            if await _cancelled(ctx, float(arg or 60)):
                yield _stopped(ctx)
                return
            yield results.completed("held")
        elif mode == "reply":
            await ctx.reply("a reply through the fleet")
            yield results.completed("replied")
        elif mode == "steer":
            item = await ctx.steering.get(timeout=float(arg or 20))
            yield results.completed(f"steered: {item.input.text if item is not None else '(none)'}")
        elif mode == "ask":
            await ctx.request_confirmation("Proceed?")
            yield results.completed("asked")
        elif mode == "send":
            await ctx.send_message("conversation", arg, "a message from another run")
            yield results.completed("sent")
        else:
            yield results.completed(f"fleet: {mode} {arg}")

    @staticmethod
    async def _stream(ctx: RunContext, count: int, pause: float) -> AsyncIterator[result_pb2.RunResult]:
        for i in range(count):
            if ctx.cancelled.is_set() or (i and pause and await _cancelled(ctx, pause)):
                yield _stopped(ctx)
                return
            yield results.delta(f"{i} ")
        yield results.completed(f"streamed {count}")
