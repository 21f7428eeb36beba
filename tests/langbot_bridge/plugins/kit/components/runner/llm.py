"""Calls the model chosen in its config: `invoke_llm` (usage on the terminal result), `stream: ...`
through `invoke_llm_stream`, `tokens: ...` through `count_tokens`."""

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message, MessageChunk
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class LlmRunner(Runner):
    async def run(self, ctx: RunnerContext):
        model = ctx.config["model"]
        text = ctx.input.to_text()
        if text.startswith("tokens:"):
            tokens = await ctx.api.count_tokens(model, [Message(role="user", content=text)])
            yield RunnerResult.run_completed(
                ctx.run_id, Message(role="assistant", content=f"tokens={tokens}")
            )
            return
        if text.startswith("stream:"):
            so_far = ""
            async for chunk in ctx.api.invoke_llm_stream(
                model, [Message(role="user", content=text[7:].strip())]
            ):
                so_far += chunk.content if isinstance(chunk.content, str) else ""
                yield RunnerResult.message_delta(
                    ctx.run_id, MessageChunk(role="assistant", content=chunk.content, all_content=so_far)
                )
            yield RunnerResult.run_completed(ctx.run_id, Message(role="assistant", content=so_far))
            return
        result = await ctx.api.invoke_llm_with_usage(model, [Message(role="user", content=text)])
        yield RunnerResult.run_completed(ctx.run_id, result.message, usage=result.usage)
