"""Keeps a counter in conversation state through `state_get` / `state_set`, and asks for one more key
with a `state.updated` result."""

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class StateRunner(Runner):
    async def run(self, ctx: RunnerContext):
        current = (await ctx.state_get("conversation", "counter")).get("value") or 0
        await ctx.state_set("conversation", "counter", current + 1)
        yield RunnerResult.state_updated(ctx.run_id, "last_input", ctx.input.to_text(), scope="conversation")
        seen = ctx.state.conversation.get("last_input")
        yield RunnerResult.run_completed(
            ctx.run_id, Message(role="assistant", content=f"counter={current + 1} last={seen}")
        )
