"""`crash` kills its plugin worker (the whole process) mid-run; anything else is answered."""

import os

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message, MessageChunk
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class CrashRunner(Runner):
    async def run(self, ctx: RunnerContext):
        text = ctx.input.to_text()
        yield RunnerResult.message_delta(ctx.run_id, MessageChunk(role="assistant", content="about to "))
        if text == "crash":
            os._exit(3)
        yield RunnerResult.run_completed(ctx.run_id, Message(role="assistant", content=f"alive: {text}"))
