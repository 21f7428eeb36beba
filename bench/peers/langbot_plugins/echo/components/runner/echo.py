"""`burst:N:B` streams N deltas of B bytes (the increment only: a 20,000-delta run's text so far would
pass the runtime's 1 MiB frame limit), then completes; anything else is one 100-byte delta: the
workload of `bench/bench_peers.py`, written against the public plugin SDK."""

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message, MessageChunk
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class EchoRunner(Runner):
    async def run(self, ctx: RunnerContext):
        parts = ctx.input.to_text().strip().split(":")
        count, size = (int(parts[1]), int(parts[2])) if parts[0] == "burst" else (1, 100)
        piece = "x" * size
        for _ in range(count):
            yield RunnerResult.message_delta(ctx.run_id, MessageChunk(role="assistant", content=piece))
        yield RunnerResult.run_completed(ctx.run_id, Message(role="assistant", content=f"{count} deltas"))
