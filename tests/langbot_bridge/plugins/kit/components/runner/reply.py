"""Replies to the event twice before it ends: one `ctx.reply`, one `ctx.reply_stream` of two updates."""

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class ReplyRunner(Runner):
    async def run(self, ctx: RunnerContext):
        await ctx.reply("quick reply")
        async with ctx.reply_stream() as stream:
            await stream.update("streamed")
            await stream.update("streamed reply")
        yield RunnerResult.run_completed(ctx.run_id, Message(role="assistant", content="done replying"))
