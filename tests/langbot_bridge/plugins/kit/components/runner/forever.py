"""Never ends on its own; writes `cancelled` to its `marker` file when its task is cancelled."""

import asyncio
import pathlib

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import MessageChunk
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class ForeverRunner(Runner):
    async def run(self, ctx: RunnerContext):
        marker = pathlib.Path(ctx.config["marker"]) if ctx.config.get("marker") else None
        yield RunnerResult.message_delta(ctx.run_id, MessageChunk(role="assistant", content="working"))
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if marker is not None:
                marker.write_text(f"cancelled {ctx.run_id}")
            raise
