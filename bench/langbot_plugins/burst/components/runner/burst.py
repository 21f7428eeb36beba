"""`burst:N` streams N deltas as fast as it can (each its increment and the text so far, as LangBot
runners send them), then completes; anything else is one delta and a completed message: the same
workload as `bench/bench_runner.py`, written against the public plugin SDK."""

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message, MessageChunk
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class BurstRunner(Runner):
    async def run(self, ctx: RunnerContext):
        text = ctx.input.to_text().strip()
        count = int(text.removeprefix("burst:")) if text.startswith("burst:") else 1
        so_far = ""
        for i in range(count):
            piece = f"d{i} "
            so_far += piece
            yield RunnerResult.message_delta(
                ctx.run_id, MessageChunk(role="assistant", content=piece, all_content=so_far)
            )
        yield RunnerResult.run_completed(ctx.run_id, Message(role="assistant", content=f"{count} deltas"))
