"""Lists its tools and calls the host's `add` tool through `ctx.call_tool`."""

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class ToolRunner(Runner):
    async def run(self, ctx: RunnerContext):
        names = sorted(t["name"] for t in await ctx.get_available_tools())
        detail = await ctx.api.get_tool_detail("add")
        result = await ctx.call_tool("add", {"a": 2, "b": 3})
        text = f"tools={','.join(names)} params={sorted(detail['parameters'].get('properties', {}))} add={result['content']}"
        yield RunnerResult.run_completed(ctx.run_id, Message(role="assistant", content=text))
