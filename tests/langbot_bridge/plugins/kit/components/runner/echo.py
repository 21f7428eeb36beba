"""Streams the input back word by word (increments + `all_content`, or LangBot-style snapshots); an
input starting with `wait ` is answered after a second (to keep many runs open at once)."""

import asyncio

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message, MessageChunk
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class EchoRunner(Runner):
    async def run(self, ctx: RunnerContext):
        text = ctx.input.to_text()
        if text == "greet":  # the plugin-level setting (manifest spec.config / --plugin-config)
            text = str(self.get_plugin_config().get("greeting"))
        if text.startswith("wait "):
            await asyncio.sleep(1.0)
        answer = str(ctx.config.get("prefix") or "") + text
        snapshots = ctx.config.get("style") == "snapshots"
        so_far = ""
        for word in answer.split(" "):
            piece = word if not so_far else " " + word
            so_far += piece
            chunk = (
                MessageChunk(role="assistant", content=so_far)
                if snapshots
                else MessageChunk(role="assistant", content=piece, all_content=so_far)
            )
            yield RunnerResult.message_delta(ctx.run_id, chunk)
        yield RunnerResult.run_completed(ctx.run_id, Message(role="assistant", content=answer))
