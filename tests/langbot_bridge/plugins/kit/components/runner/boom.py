"""Raises before it answers."""

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.runner import RunnerContext


class BoomRunner(Runner):
    async def run(self, ctx: RunnerContext):
        raise RuntimeError("boom from the plugin")
        yield  # an async generator, like every runner here
