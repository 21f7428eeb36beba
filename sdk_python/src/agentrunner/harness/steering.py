"""Steering for harnesses: messages that arrive while a turn runs become resumed follow-up turns.

    async for result in steered_turns(ctx, prompt, run_turn):
        yield result

`run_turn(prompt, index)` runs one harness turn and yields its results, ending with a terminal one.
After every successful turn the queued steering input is taken (pushed on the control stream, and
pulled with `PullSteering` when the run may) and each item's text runs as the next turn (the harness
resumes its session). The run gets exactly one terminal result: the first failure, or one
`run.completed` after the last turn with the usage of all turns. A failing pull disables steering for
the rest of the run without failing it; at most `max_followups` follow-ups run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import structlog

from agentrunner import results
from agentrunner.context import RunContext
from agentrunner.errors import AgentRunnerError
from agentrunner.protocol import is_terminal
from agentrunner.v1 import common_pb2, result_pb2

log = structlog.get_logger("agentrunner.harness.steering")

MAX_FOLLOWUPS = 256
Turn = Callable[[str, int], AsyncIterator[result_pb2.RunResult]]


def add_usage(total: common_pb2.Usage, more: common_pb2.Usage) -> None:
    """Adds `more` into `total`; a count stays unset only while no turn reported it."""
    for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if more.HasField(name):
            setattr(total, name, getattr(total, name) + getattr(more, name))
    for key, value in more.extra.fields.items():
        if value.HasField("number_value") and key in total.extra.fields:
            total.extra.fields[key].number_value += value.number_value
        else:
            total.extra.fields[key].CopyFrom(value)


class _Source:
    """Steering items for this run, from the control stream and `PullSteering`, each taken once."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.pull = ctx.context.available_apis.steering_pull and ctx.api.available
        self.seen: set[str] = set()

    async def take(self) -> list[str]:
        items = list(self.ctx.steering.pending())
        if self.pull:
            try:
                for _ in range(MAX_FOLLOWUPS):  # each item is delivered once; a page of seen ones ends it
                    response = await self.ctx.api.pull_steering()
                    fresh = [i for i in response.items if not i.steering_id or i.steering_id not in self.seen]
                    if not fresh:
                        break
                    items.extend(fresh)
                    self.seen.update(i.steering_id for i in fresh if i.steering_id)
            except AgentRunnerError as exc:
                log.warning(
                    "steering pull failed; steering is off for this run",
                    run_id=self.ctx.run_id,
                    reason=exc.reason,
                )
                self.pull = False
        texts: list[str] = []
        taken: set[str] = set()
        for item in items:
            if item.steering_id and item.steering_id in taken:
                continue
            taken.add(item.steering_id)
            self.seen.add(item.steering_id)
            text = item.input.text or "\n".join(
                c.text for c in item.input.contents if c.WhichOneof("kind") == "text"
            )
            if text.strip():
                texts.append(text)
        return texts


async def steered_turns(
    ctx: RunContext, prompt: str, run_turn: Turn, *, max_followups: int = MAX_FOLLOWUPS
) -> AsyncIterator[result_pb2.RunResult]:
    """Runs the first turn, then one follow-up turn per steering item; one terminal result in all."""
    source = _Source(ctx)
    usage = common_pb2.Usage()
    queue = [prompt]
    index = 0
    last: result_pb2.RunResult | None = None
    while queue:
        text = queue.pop(0)
        terminal: result_pb2.RunResult | None = None
        async for result in run_turn(text, index):
            if is_terminal(result):
                terminal = result
                break
            yield result
        index += 1
        terminal = terminal or results.completed()
        if terminal.HasField("usage"):
            add_usage(usage, terminal.usage)
        if terminal.HasField("run_failed"):
            if usage.ListFields():
                terminal.usage.CopyFrom(usage)
            yield terminal
            return
        last = terminal
        followups = index - 1
        if not queue:
            queue.extend(await source.take())
        if queue and followups >= max_followups:
            log.warning(
                "steering follow-up cap reached", run_id=ctx.run_id, cap=max_followups, dropped=len(queue)
            )
            break
    final = results.completed(finish_reason=last.run_completed.finish_reason if last else "stop")
    if last is not None:
        if last.run_completed.HasField("message"):
            final.run_completed.message.CopyFrom(last.run_completed.message)
        if last.HasField("metadata"):
            final.metadata.CopyFrom(last.metadata)
    if usage.ListFields():
        final.usage.CopyFrom(usage)
    if index > 1:
        final.metadata.fields["turns"].number_value = index
    yield final
