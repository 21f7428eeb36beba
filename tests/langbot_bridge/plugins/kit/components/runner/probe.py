"""Reads a state scope the agent may not grant (actor), and reports what the host answered."""

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class ProbeRunner(Runner):
    async def run(self, ctx: RunnerContext):
        try:
            value = await ctx.state_get("actor", "profile")
            text = f"granted {value}"
        except Exception as exc:
            text = f"refused: {type(exc).__name__}: {exc}"
        yield RunnerResult.run_completed(ctx.run_id, Message(role="assistant", content=text))
