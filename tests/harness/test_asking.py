"""Asking the user mid-turn: the question goes out as `interaction.requested`, the answer comes back on
the run's steering channel, other steering input is kept, no answer is None after the timeout."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

import asyncio

import pytest

from agentrunner import Runner, results
from agentrunner.harness import confirm
from agentrunner.testing import HostDouble

pytestmark = pytest.mark.asyncio


class Asks(Runner):
    manifest = {"id": "plugin:test/asks/default", "capabilities": ["steering", "interactions"]}

    async def run(self, ctx):
        answer = await confirm(
            ctx, "Delete the build?", description="`rm -rf build`", timeout=float(ctx.input.text)
        )
        left = [item.input.text for item in ctx.steering.pending()]
        yield results.message(f"answer={answer} kept={left}")
        yield results.completed()


async def test_the_answer_routed_into_the_run_decides_and_other_input_is_kept() -> None:
    async with HostDouble(heartbeat_interval=0.1) as host:
        handle = await host.start_run(Asks, "30")
        async with asyncio.timeout(10):
            while not (result := await handle.next()).HasField("interaction_requested"):
                pass
        asked = result.interaction_requested.interaction
        assert asked.title == "Delete the build?" and [a.id for a in asked.actions] == ["confirm", "cancel"]
        await host.steer(handle.run_id, "meanwhile")
        await host.answer_interaction(handle.run_id, "some-other-question", "confirm")
        await host.answer_interaction(handle.run_id, asked.interaction_id, "cancel")
        out = await handle.wait(10)
    assert out.text.startswith("answer=False kept=") and "'meanwhile'" in out.text


async def test_no_answer_before_the_timeout_is_none() -> None:
    async with HostDouble(heartbeat_interval=0.1) as host:
        out = await host.run(Asks, "0.3")
    assert out.text == "answer=None kept=[]" and len(out.of_type("interaction.requested")) == 1
