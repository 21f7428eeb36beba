"""Logs with `ctx.log` (a `processor.log` result) and answers."""

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class LogRunner(Runner):
    async def run(self, ctx: RunnerContext):
        await ctx.log("plugin says hi", "warning")
        yield RunnerResult.run_completed(ctx.run_id, Message(role="assistant", content="logged"))
