"""Answers with the conversation's earlier messages, pulled with `history_page`."""

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class HistoryRunner(Runner):
    async def run(self, ctx: RunnerContext):
        page = await ctx.history_page(before_cursor=ctx.context.latest_cursor, limit=20)
        lines = [f"{item.role}:{item.content}" for item in page.items]
        yield RunnerResult.run_completed(
            ctx.run_id, Message(role="assistant", content=f"seen {len(lines)}: " + " | ".join(lines))
        )
